# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Container mode (``ray_container_image``): which engine runs the node's image, whether the image is there (loaded
from an archive on the shared volume, or pulled with credentials that never reach an argument list), what it is
(its ID, the fingerprint the restart rule and the cluster's environment check compare), and the ``run`` command line
the Ray unit starts. Small functions, each given the engine's calls as a ``run(argv, data=None) -> (rc, out, err)``
callable, so tests/unit can drive them without an engine. Standard library only (it runs on the nodes)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import tarfile
import tempfile
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files, owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import normpath

if TYPE_CHECKING:
    # run(argv, data=None) -> (rc, out, err): the engine's calls (module.run_command, or a test's fake)
    _Run = Callable[..., tuple[int, str, str]]

ENGINES = ("podman", "docker")
# A fingerprint of the image the node runs; "image:" keeps it apart from a venv's (python_env.py) in every comparison.
FINGERPRINT_PREFIX = "image:"
_HEX64 = re.compile(r"^(?:sha256:)?([0-9a-f]{64})$")
_MAX_MANIFEST = 16 * 1024 * 1024


def fact_arg(image_id_empty: bool = True) -> vocabulary.Section:
    """The node's Ray container as its rlinfra_ray local fact records it (ray_node writes it, ray_cluster_info returns
    it): the engine and its path, the container's name, the image and its ID; ``image_id_empty`` false for a caller
    that needs the image's ID."""
    return vocabulary.Options(
        dict(
            engine=vocabulary.Choice(ENGINES),
            engine_path=vocabulary.AbsPath("reads"),
            name=vocabulary.Name(),
            image=vocabulary.ImageRef(),
            image_id=vocabulary.Text(
                empty=image_id_empty, pattern=r"^[0-9a-f]{64}$", what="an image ID (64 hex characters)"
            ),
        ),
        suboptions=False,
        default={},
    )


class ContainerError(Exception):
    """One line: what went wrong and what to do."""


def choose_engine(wanted: str, which: Callable[[str], str | None]) -> tuple[str, str | None]:
    """``(name, path)`` of the engine to use. ``wanted``: auto (podman where both exist: daemonless, the unit's own
    process is the container's parent), podman or docker. ``which(name)`` -> absolute path or None.
    ``(name, None)`` when it is missing (the caller installs it or says so)."""
    if wanted == "auto":
        for name in ENGINES:
            path = which(name)
            if path:
                return name, path
        return "podman", None
    if wanted not in ENGINES:
        raise ContainerError("ray_container_engine must be auto, podman or docker, got %r" % (wanted,))
    return wanted, which(wanted)


def image_id(text: str | None) -> str | None:
    """The image ID (64 hex characters, no ``sha256:``) in an engine's answer or an archive's config name."""
    match = _HEX64.match(str(text or "").strip())
    return match.group(1) if match else None


def archive_image(path: str) -> dict[str, Any]:
    """``{"id", "tags"}`` of the one image in a ``docker save`` / ``podman save`` archive (docker-archive: its
    manifest.json names the config blob, whose sha256 is the image ID), read without unpacking the layers."""
    try:
        with tarfile.open(path, "r:*") as tar:
            member = tar.getmember("manifest.json")
            if member.size > _MAX_MANIFEST:
                raise ContainerError("%s: its manifest.json is %d bytes; is it an image archive?" % (path, member.size))
            manifest = json.loads(cast(IO[bytes], tar.extractfile(member)).read().decode("utf-8"))
    except KeyError:
        raise ContainerError(
            "%s has no manifest.json: make it with `podman save -o FILE IMAGE` or `docker save -o FILE "
            "IMAGE` (docker-archive format)" % path
        ) from None
    except FileNotFoundError:
        raise ContainerError(
            "ray_container_image_archive %s does not exist on this node: put the archive on the "
            "shared volume (podman save -o FILE IMAGE) or fix the path" % path
        ) from None
    except (OSError, tarfile.TarError, ValueError) as exc:
        raise ContainerError(
            "%s cannot be read as an image archive (%s): is the file whole? Save it again with "
            "`podman save -o FILE IMAGE`" % (path, exc.__class__.__name__)
        ) from exc
    if not isinstance(manifest, list) or len(manifest) != 1 or not isinstance(manifest[0], dict):
        raise ContainerError(
            "%s holds %s images; save exactly one image into the archive"
            % (path, len(manifest) if isinstance(manifest, list) else "no readable")
        )
    config = str(manifest[0].get("Config") or "")
    found = image_id(os.path.basename(config).rsplit(".json", 1)[0])
    if not found:
        raise ContainerError("%s: its manifest names no image config (%r); save it again" % (path, config[:80]))
    tags = [str(t) for t in manifest[0].get("RepoTags") or [] if isinstance(t, str)]
    return {"id": found, "tags": tags}


def inspect(run: _Run, engine_path: str | list[str] | tuple[str, ...], ref: str) -> dict[str, Any] | None:
    """``{"id", "digests"}`` of an image the engine holds, or None when it holds none by that name. ``engine_path``:
    the engine, or an argument list that starts the engine's command line (the shared store's writer)."""
    prefix = list(engine_path) if isinstance(engine_path, (list, tuple)) else [engine_path]
    rc, out, dummy = run(prefix + ["image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}", ref])
    if rc != 0:
        return None
    first, dummy, rest = out.strip().splitlines()[0].partition(" ") if out.strip() else ("", "", "")
    found = image_id(first)
    if not found:
        return None
    try:
        digests = [str(d) for d in json.loads(rest or "[]") or []]
    except ValueError:
        digests = []
    return {"id": found, "digests": sorted(digests)}


def registry_of(ref: str) -> str:
    """The registry part of a reference (``docker.io`` when it names none), for a login."""
    first = ref.split("/", 1)[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


# The shared image store (``ray_container_image_store``, podman only): one node loads or pulls the image into a
# store on the shared volume, and every node's podman lists that store in ``additionalimagestores`` and runs the image
# from it, read-only - the cluster loads an image once, not once per node. The store is written through podman's own
# ``--root`` with a run directory of its own (not the node's), one node at a time (a lock file in the store).
STORAGE_CONF = "/etc/containers/storage.conf"
STORE_HEADER = (
    "# rlinfra.verl: written by rlinfra.verl.ray_container (ray_container_image_store); teardown.yml's purge "
    "removes it\n"
)
STORE_RUNROOT = "/run/rlinfra-image-store"
STORE_LOCK = ".rlinfra-load.lock"


def storage_info(run: _Run, engine_path: str) -> dict[str, str]:
    """``{"driver", "graphroot", "runroot"}`` of the node's own podman store, as ``podman info`` reports it."""
    rc, out, err = run([engine_path, "info", "--format", "json"])
    try:
        store: Any = json.loads(out)["store"] if rc == 0 else None  # None: TypeError below, caught
        info = {"driver": store["graphDriverName"], "graphroot": store["graphRoot"], "runroot": store["runRoot"]}
    except (ValueError, KeyError, TypeError):
        raise ContainerError(
            "podman info did not say where its store is (%s); check that podman works on this node "
            "(podman info); nothing was changed" % _last(err or out)
        ) from None
    if not all(isinstance(v, str) and v for v in info.values()):
        raise ContainerError(
            "podman info named no store driver or root; check podman on this node; nothing was changed"
        )
    return info


def store_info(run: _Run, engine_path: str, current_conf: str | None) -> dict[str, str]:
    """The node's own store (storage_info's answer): read back from the collection's own storage.conf when the node
    has it (what podman read it from - no ``podman info`` on a converged node, which costs a second), else asked."""
    if current_conf and current_conf.startswith(STORE_HEADER):
        found = dict(re.findall(r'^(driver|graphroot|runroot) = ("(?:[^"\\]|\\.)*")$', current_conf, re.M))
        try:
            info: dict[str, Any] | None = {key: json.loads(found[key]) for key in ("driver", "graphroot", "runroot")}
        except (KeyError, ValueError):
            info = None
        if info and all(isinstance(v, str) and v for v in info.values()):
            return info
    return storage_info(run, engine_path)


def storage_conf(store: str, info: Mapping[str, str]) -> str:
    """The node's storage.conf listing ``store`` as a read-only image store, beside the node's own store unchanged
    (its driver and roots as podman reported them, so no image or container of the node's is lost)."""

    def q(value: object) -> str:
        return json.dumps(str(value))

    return (
        STORE_HEADER + "[storage]\ndriver = %s\ngraphroot = %s\nrunroot = %s\n\n[storage.options]\n"
        "additionalimagestores = [%s]\n" % (q(info["driver"]), q(info["graphroot"]), q(info["runroot"]), q(store))
    )


def storage_conf_plan(current: str | None, wanted: str, store: str, path: str = STORAGE_CONF) -> bool:
    """Whether ``path`` must be (re)written: False when it holds ``wanted``, True when it is missing or the
    collection's own (its header), ContainerError when it is the node's own file (a person's settings are not
    rewritten): then it must list the store already."""
    if current is None or current == wanted:
        return current is None
    if current.startswith(STORE_HEADER):
        return True
    listed = re.search(r"^\s*additionalimagestores\s*=.*%s" % re.escape(json.dumps(store)), current, re.M)
    if listed:
        return False
    raise ContainerError(
        "%s is this node's own (it was not written by rlinfra): add %s to its additionalimagestores "
        "under [storage.options], or unset ray_container_image_store; nothing was changed" % (path, store)
    )


def check_store(store: str, graphroot: str) -> None:
    """ContainerError (one line) when ``store`` cannot be the shared image store: the node's own store, inside it,
    or a link (what podman writes would land where the link points)."""
    own = normpath(graphroot)
    norm = normpath(store)
    if norm in owned.SYSTEM:
        raise ContainerError(
            "ray_container_image_store %s is a system directory: give a directory of its own on the "
            "shared volume (e.g. /data/rlinfra-images); nothing was changed" % store
        )
    if norm == own or norm.startswith(own + "/") or own.startswith(norm + "/"):
        raise ContainerError(
            "ray_container_image_store %s overlaps the node's own podman store %s: give a directory of "
            "its own on the shared volume; nothing was changed" % (store, graphroot)
        )
    if os.path.islink(store):
        raise ContainerError(
            "ray_container_image_store %s is a symbolic link: give the directory itself; nothing was changed" % store
        )


def use_store(
    run: _Run,
    engine_path: str,
    store: str,
    info: Mapping[str, str],
    current_conf: str | None,
    write_conf: Callable[[str], Any] | None,
    check: bool = False,
) -> bool:
    """Make the node's podman list ``store``: the store's layout made (podman's own, through its writer) before any
    storage.conf names it - podman refuses a listed store that is not one - then the node's storage.conf written
    when it must be (storage_conf_plan). ``info``: storage_info's answer, the store already checked (check_store);
    ``current_conf``: storage.conf's text or None; ``write_conf(text)`` writes it. True when something changed (or
    would)."""
    wanted = storage_conf(store, info)
    must_write = storage_conf_plan(current_conf, wanted, store)
    made = not os.path.isdir(os.path.join(store, "%s-images" % info["driver"]))
    if check:
        return must_write or made
    if made:
        files.makedirs(store, 0o755)
        rc, out, err = run(store_writer(engine_path, store) + ["images", "--quiet"])
        if rc != 0:
            raise ContainerError(
                "podman cannot make its image store in %s: %s; give a directory on the shared volume "
                "that root can write, or unset ray_container_image_store; nothing else was changed"
                % (store, _last(err or out))
            )
    if must_write:
        write_conf(wanted)  # type: ignore[misc]  # None only in check mode, which returned above
    return must_write or made


def store_writer(engine_path: str, store: str) -> list[str]:
    """podman writing into the shared store (its own root and run directory), not the node's."""
    return [engine_path, "--root", store, "--runroot", STORE_RUNROOT]


def ensure_image(
    run: _Run,
    engine: str,
    engine_path: str,
    ref: str,
    archive: str = "",
    credentials: Mapping[str, Any] | None = None,
    auth_dir: str = "",
    check: bool = False,
    store: str = "",
) -> dict[str, Any]:
    """Make sure the engine holds the image; ``{"id", "digests", "loaded", "pulled"}``.
    From ``archive`` when given: loaded only when its image ID is not there yet (a re-run loads nothing), then tagged
    ``ref`` when the archive does not carry that name. Else ``ref`` is pulled only when missing - a tag is resolved
    once and its ID recorded; a new image is a new reference or a new archive, never a silent re-pull.
    ``credentials``: ``{"username", "password"}`` for the pull; the password goes to ``login --password-stdin``
    and the login lands in a file under ``auth_dir`` (root only), never in an argument list or a message.
    ``store``: the shared image store, which the engine already lists (use_store): a missing image is loaded or
    pulled into it, and the other nodes find it there. The caller holds the store's lock (one node at a time): the
    first node to take it loads, the others wait and load nothing."""
    result = {"loaded": False, "pulled": False, "tagged": False}
    writer = store_writer(engine_path, store) if store else [engine_path]
    if archive:
        wanted = archive_image(archive)
        have = inspect(run, engine_path, wanted["id"])
        if have is None:
            result["loaded"] = True
            if check:
                return dict(result, id=wanted["id"], digests=[])
            rc, out, err = run(writer + ["load", "-i", archive])
            if rc != 0:
                raise ContainerError(
                    "%s load of %s%s failed: %s; nothing else was changed"
                    % (engine, archive, " into the shared image store %s" % store if store else "", _last(err or out))
                )
            have = inspect(run, engine_path, wanted["id"])
            if have is None:
                raise ContainerError(
                    "%s loaded %s but holds no image %s afterwards; save the archive again"
                    % (engine, archive, wanted["id"][:12])
                )
        if ref and inspect(run, engine_path, ref) != have:
            result["tagged"] = True
            if not check:
                # An image in the shared store is tagged there (the node's view of it is read-only).
                tagger = writer if store and inspect(run, writer, wanted["id"]) else [engine_path]
                rc, out, err = run(tagger + ["tag", wanted["id"], ref])
                if rc != 0:
                    raise ContainerError(
                        "%s tag %s %s failed: %s" % (engine, wanted["id"][:12], ref, _last(err or out))
                    )
        return dict(result, **have)
    have = inspect(run, engine_path, ref)
    if have is not None:
        return dict(result, **have)
    result["pulled"] = True
    if check:
        return dict(result, id=None, digests=[])
    if credentials and credentials.get("username"):
        rc, out, err = _pull_logged_in(run, engine, writer, ref, credentials, auth_dir)
    else:
        rc, out, err = run(writer + ["pull", ref])
    if rc != 0:
        raise ContainerError("%s pull %s failed: %s; nothing else was changed" % (engine, ref, _last(err or out)))
    have = inspect(run, engine_path, ref)
    if have is None:
        raise ContainerError("%s pulled %s but does not hold it afterwards" % (engine, ref))
    return dict(result, **have)


def _pull_logged_in(
    run: _Run, engine: str, writer: list[str], ref: str, credentials: Mapping[str, Any], auth_dir: str
) -> tuple[int, str, str]:
    """Log in through stdin into a directory of this call's own under ``auth_dir`` (root only, never a link), pull,
    and remove the login: a registry credential lives on the node for one pull, not for the cluster's life.
    ``(rc, out, err)`` of the pull."""
    existed = os.path.isdir(auth_dir)
    try:
        files.private_dir(auth_dir)
    except OSError as e:
        raise ContainerError(
            "the registry login's directory %s cannot be used: %s; nothing was changed" % (auth_dir, e.strerror or e)
        ) from e
    session = tempfile.mkdtemp(dir=auth_dir, prefix="login-")
    try:
        registry = registry_of(ref)
        if engine == "docker":
            login = writer + [
                "--config",
                session,
                "login",
                "--username",
                credentials["username"],
                "--password-stdin",
                registry,
            ]
            pull = writer + ["--config", session, "pull", ref]
        else:
            auth = os.path.join(session, "auth.json")
            login = writer + [
                "login",
                "--authfile",
                auth,
                "--username",
                credentials["username"],
                "--password-stdin",
                registry,
            ]
            pull = writer + ["pull", "--authfile", auth, ref]
        rc, out, err = run(login, data=credentials.get("password") or "")
        if rc != 0:
            raise ContainerError(
                "%s login to %s as %s was refused: %s; check ray_container_registry_username and "
                "ray_container_registry_password; nothing was changed"
                % (engine, registry, credentials["username"], _last(err or out))
            )
        return run(pull)
    finally:
        shutil.rmtree(session, ignore_errors=True)  # made by this call (mkdtemp): no one else's
        if not existed:
            try:
                os.rmdir(auth_dir)
            except OSError:
                pass


def _last(text: object) -> str:
    lines = [line.strip() for line in str(text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"


def fingerprint(found: Mapping[str, Any]) -> str:
    return FINGERPRINT_PREFIX + found["id"]


def gpu_args(engine: str, vendor: str, count: int | str | None) -> list[str]:
    """What passes the node's GPUs into the container: NVIDIA through CDI (podman; ``nvidia-ctk cdi generate`` on the
    node) or ``--gpus`` (docker); AMD through its device nodes and the video group (ROCm's own instructions)."""
    if not count or str(count) == "0":
        return []
    if vendor == "amd":
        return [
            "--device",
            "/dev/kfd",
            "--device",
            "/dev/dri",
            "--group-add",
            "video",
            "--security-opt",
            "seccomp=unconfined",
        ]
    if vendor == "nvidia":
        return ["--device", "nvidia.com/gpu=all"] if engine == "podman" else ["--gpus", "all"]
    return []


# Where the node's own part of the run line goes: the unit is rendered on the controller, but the GPUs and the
# environment's names (the AMD presets included) are known on the node (rlinfra.verl.ray_node fills it in).
ARGS_PLACEHOLDER = "@CONTAINER_ARGS@"


def node_args(engine: str, vendor: str, count: int | str | None, env_names: Iterable[str]) -> str:
    """The node's part of the run line: each environment variable by name only (``--env NAME``: the engine takes the
    value from its own environment, which the unit's EnvironmentFile gave it, so no value - no secret - is ever an
    argument), then the GPUs."""
    argv = []
    for name in sorted(set(env_names)):
        argv += ["--env", name]
    return " ".join(shlex.quote(a) for a in argv + gpu_args(engine, vendor, count))


def run_prefix(
    engine: str,
    engine_path: str,
    name: str,
    mounts: Iterable[str],
    read_only: Iterable[str],
    env_names: Iterable[str] = (),
    nofile: int | str | None = None,
) -> str:
    """The start of the Ray unit's ``<engine> run`` line, up to the node's part (ARGS_PLACEHOLDER) and the image:
    host network and IPC (Ray's object store and NCCL's shared memory are the host's), ``--init`` to reap Ray's
    children, every mount at the same path inside as outside (so every path the collection computes holds inside).
    Docker's containers do not inherit the unit's limits (its daemon starts them), so they are passed; podman's
    process is the unit's own and its containers inherit them."""
    if engine not in ENGINES:
        raise ContainerError("the container engine must be podman or docker, got %r" % (engine,))
    argv = [engine_path, "run", "--rm", "--name", name, "--network", "host", "--ipc", "host", "--init"]
    if engine == "docker":
        argv += ["--ulimit", "memlock=-1:-1"]
        if nofile and str(nofile) != "infinity":
            argv += ["--ulimit", "nofile=%s:%s" % (nofile, nofile)]
    for path in mounts:
        argv += ["--volume", "%s:%s" % (path, path)]
    for path in read_only:
        argv += ["--volume", "%s:%s:ro" % (path, path)]
    for env in sorted(set(env_names)):
        argv += ["--env", env]
    return " ".join(shlex.quote(str(a)) for a in argv) + " " + ARGS_PLACEHOLDER


def state_content(found: Mapping[str, Any], ref: str, engine: str, store: str = "") -> str:
    """The record ray_node and ray_node_state read (its ``fingerprint``), as python_env_sync writes one for a venv;
    ``image_store`` when the image is the shared store's (a purge then leaves it to the other nodes)."""
    record = {
        "fingerprint": fingerprint(found),
        "image": ref,
        "image_id": found["id"],
        "digests": found.get("digests") or [],
        "engine": engine,
    }
    if store:
        record["image_store"] = store
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


# Commands in a node's running container (``<engine> exec``): what runs with the image's Python on the node, e.g.
# verl's model merger on the head (rlinfra.verl.verl_merge), so that it is the verl the jobs trained with.


def exec_prefix(engine_path: str, name: str, env_names: Iterable[str] = (), interactive: bool = True) -> list[str]:
    """The start of ``<engine> exec [-i] [--env NAME ...] <name>``, the command to follow. Each environment variable
    by name only: the engine takes the value from the exec's own environment, so no value - no secret - is ever an
    argument. ``interactive`` (``-i``) keeps the command's standard input open, how a token reaches it."""
    argv = [engine_path, "exec"] + (["-i"] if interactive else [])
    for env in sorted(set(env_names)):
        argv += ["--env", env]
    return argv + [name]


def python_command(
    args: Iterable[str], env: Mapping[str, str], venv: str = "", container: Mapping[str, Any] | None = None
) -> tuple[list[str], dict[str, str]]:
    """``(argv, environment)`` running ``python <args>`` with verl: from ``venv``, or - in container mode
    (``container``: ray_client.fact_container's answer) - inside the node's running Ray container with the image's
    ``python3``, the verl the jobs trained with. ``env``: what the command needs besides; in the container each is
    named on the exec line and valued in the exec's own environment (exec_prefix), never an argument."""
    environment = dict(os.environ, **env)
    if container:
        prefix = exec_prefix(container["engine_path"], container["name"], env)
        return prefix + ["python3"] + list(args), environment
    return [os.path.join(venv, "bin", "python")] + list(args), environment


def check_running(run: _Run, engine_path: str, name: str, role: str = "head") -> None:
    """ContainerError (one line) unless the engine runs the container ``name`` (Ray's unit started it)."""
    rc, out, dummy = run([engine_path, "container", "inspect", "--format", "{{.State.Running}}", name])
    if rc != 0 or out.strip().lower() != "true":
        raise ContainerError("the %s's container %s is not running: run site.yml" % (role, name))


def check_visible(run: _Run, engine_path: str, name: str, paths: Iterable[tuple[str, str]], role: str = "head") -> None:
    """ContainerError (one line) for the first directory not seen inside the container at its own path.
    ``paths``: ``(shown, tested)`` pairs - the path the message names and the one tested (e.g. a directory of this
    run's own beside it, which no image can hold by chance as it can hold ``/tmp``). The volumes are mounted at the
    same path inside as outside (run_prefix), so a path outside every volume is the one to name."""
    for shown, tested in paths:
        rc, dummy, dummy2 = run(exec_prefix(engine_path, name, interactive=False) + ["test", "-d", tested])
        if rc != 0:
            raise ContainerError(
                "%s is not visible inside the %s's container %s: add its volume to "
                "ray_container_mounts and run site.yml" % (shown, role, name)
            )
