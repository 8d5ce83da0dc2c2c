"""Container mode's decisions (module_utils/node/container.py), driven with a stand-in for the engine's calls: the engine
chosen, an archive read and loaded only when its image is missing, a pull only when missing, the login through stdin,
the run line (no value of the environment in it, the GPUs per vendor and engine), the record, and one line for each
failure."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.container import container_run
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import mismatch

ID = "a" * 64
OTHER = "b" * 64
PODMAN = "/usr/bin/podman"


def archive(tmp_path, manifest, name="img.tar"):
    path = tmp_path / name
    with tarfile.open(path, "w") as tar:
        data = json.dumps(manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return str(path)


class Engine:
    """Answers ``image inspect`` from ``held`` ({ref or id: id}); records every call and what went to stdin."""

    def __init__(self, held=None, fail=()):
        self.held = dict(held or {})
        self.calls = []
        self.stdin = []
        self.fail = set(fail)
        self.roots = []

    def __call__(self, argv, data=None):
        self.calls.append(list(argv))
        self.stdin.append(data)
        if argv[1] == "--root":  # the shared store's writer: recorded, then answered as the engine
            self.roots.append(argv[2])
            argv = [argv[0]] + argv[5:]
        if argv[1] == "info":
            return (
                0,
                json.dumps(
                    {
                        "store": {
                            "graphDriverName": "overlay",
                            "graphRoot": "/var/lib/containers/storage",
                            "runRoot": "/run/containers/storage",
                        }
                    }
                ),
                "",
            )
        if argv[1] == "images":
            return 0, "", ""
        verb = argv[1] if argv[1] != "--config" else argv[3]
        if verb in self.fail:
            return 1, "", "Error: %s went wrong\n" % verb
        if argv[1:3] == ["image", "inspect"]:
            ref = argv[-1]
            found = self.held.get(ref)
            return (0, '%s ["x@sha256:%s"]\n' % (found, "c" * 64), "") if found else (125, "", "no such image")
        if verb == "load":
            self.held[ID] = ID
            self.held["localhost/rlinfra/ray-node:sandbox"] = ID
            return 0, "Loaded image: localhost/rlinfra/ray-node:sandbox\n", ""
        if verb == "tag":
            self.held[argv[-1]] = argv[-2]
            return 0, "", ""
        if verb == "pull":
            self.held[argv[-1]] = OTHER
            return 0, "", ""
        if verb == "login":
            return 0, "Login Succeeded!\n", ""
        raise AssertionError(argv)

    def verbs(self):
        return [c[1] if c[1] != "--config" else c[3] for c in self.calls if c[1:3] != ["image", "inspect"]]


@pytest.mark.parametrize(
    "wanted, have, expect",
    [
        ("auto", {"podman", "docker"}, ("podman", "/usr/bin/podman")),
        ("auto", {"docker"}, ("docker", "/usr/bin/docker")),
        ("auto", set(), ("podman", None)),
        ("docker", {"podman", "docker"}, ("docker", "/usr/bin/docker")),
        ("podman", {"docker"}, ("podman", None)),
    ],
)
def test_engine_choice(wanted, have, expect):
    assert container.choose_engine(wanted, lambda n: "/usr/bin/" + n if n in have else None) == expect


def test_engine_choice_refuses_an_unknown_engine():
    with pytest.raises(container.ContainerError, match="auto, podman or docker"):
        container.choose_engine("containerd", lambda n: None)


def test_archive_read_without_unpacking(tmp_path):
    path = archive(tmp_path, [{"Config": "%s.json" % ID, "RepoTags": ["rlinfra/ray-node:sandbox"], "Layers": []}])
    assert container.archive_image(path) == {"id": ID, "tags": ["rlinfra/ray-node:sandbox"]}
    oci = archive(tmp_path, [{"Config": "blobs/sha256/%s" % ID, "RepoTags": None}], "oci.tar")
    assert container.archive_image(oci) == {"id": ID, "tags": []}


@pytest.mark.parametrize(
    "manifest, words",
    [
        ([], "holds 0 images"),
        ([{"Config": "a.json"}, {"Config": "b.json"}], "holds 2 images"),
        ({"not": "a list"}, "no readable images"),
        ([{"Config": "nothex.json"}], "names no image config"),
    ],
)
def test_archive_problems_are_one_line(tmp_path, manifest, words):
    with pytest.raises(container.ContainerError, match=words) as err:
        container.archive_image(archive(tmp_path, manifest))
    assert "\n" not in str(err.value)


def test_archive_missing_half_written_or_not_an_archive(tmp_path):
    with pytest.raises(container.ContainerError, match="does not exist on this node"):
        container.archive_image(str(tmp_path / "none.tar"))
    whole = archive(tmp_path, [{"Config": "%s.json" % ID}])
    half = tmp_path / "half.tar"
    half.write_bytes(open(whole, "rb").read()[:700])
    with pytest.raises(container.ContainerError, match="is the file whole"):
        container.archive_image(str(half))
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        info = tarfile.TarInfo("etc/hosts")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(container.ContainerError, match="has no manifest.json"):
        container.archive_image(str(plain))


def test_archive_loaded_only_when_its_image_is_missing(tmp_path):
    path = archive(tmp_path, [{"Config": "%s.json" % ID, "RepoTags": ["localhost/rlinfra/ray-node:sandbox"]}])
    engine = Engine()
    got = container.ensure_image(engine, "podman", PODMAN, "rlinfra/ray-node:sandbox", archive=path)
    assert got["id"] == ID and got["loaded"] and engine.verbs() == ["load", "tag"]
    again = container.ensure_image(engine, "podman", PODMAN, "rlinfra/ray-node:sandbox", archive=path)
    assert not again["loaded"] and not again["tagged"] and engine.verbs() == ["load", "tag"]


def test_archive_in_check_mode_changes_nothing(tmp_path):
    path = archive(tmp_path, [{"Config": "%s.json" % ID}])
    engine = Engine()
    got = container.ensure_image(engine, "podman", PODMAN, "x:1", archive=path, check=True)
    assert got["loaded"] and got["id"] == ID and engine.verbs() == []


def test_a_failed_load_is_one_line(tmp_path):
    path = archive(tmp_path, [{"Config": "%s.json" % ID}])
    with pytest.raises(container.ContainerError, match="load of .* failed: Error: load went wrong; nothing else"):
        container.ensure_image(Engine(fail={"load"}), "podman", PODMAN, "x:1", archive=path)


def test_pull_only_when_missing_and_never_again():
    engine = Engine()
    got = container.ensure_image(engine, "podman", PODMAN, "registry.example/verl:1")
    assert got["pulled"] and got["id"] == OTHER and engine.verbs() == ["pull"]
    again = container.ensure_image(engine, "podman", PODMAN, "registry.example/verl:1")
    assert not again["pulled"] and engine.verbs() == ["pull"]


@pytest.mark.parametrize(
    "engine_name, login, pull",
    [
        (
            "podman",
            [
                "/e",
                "login",
                "--authfile",
                "{d}/auth.json",
                "--username",
                "u",
                "--password-stdin",
                "registry.example:5000",
            ],
            ["/e", "pull", "--authfile", "{d}/auth.json", "registry.example:5000/verl:1"],
        ),
        (
            "docker",
            ["/e", "--config", "{d}", "login", "--username", "u", "--password-stdin", "registry.example:5000"],
            ["/e", "--config", "{d}", "pull", "registry.example:5000/verl:1"],
        ),
    ],
)
def test_login_takes_the_password_on_stdin_only_and_lives_for_one_pull(tmp_path, engine_name, login, pull):
    seen = {}

    class Watching(Engine):
        def __call__(self, argv, data=None):
            if "pull" in argv:  # while the pull runs: the login's own directory, root only, inside auth_dir
                session = (
                    os.path.dirname(argv[argv.index("--authfile") + 1])
                    if "--authfile" in argv
                    else argv[argv.index("--config") + 1]
                )
                seen.update(
                    session=session,
                    modes=(os.stat(str(tmp_path / "registry")).st_mode & 0o777, os.stat(session).st_mode & 0o777),
                )
            return Engine.__call__(self, argv, data)

    engine = Watching()
    container.ensure_image(
        engine,
        engine_name,
        "/e",
        "registry.example:5000/verl:1",
        credentials={"username": "u", "password": "s3cr3t-pw"},
        auth_dir=str(tmp_path / "registry"),
    )
    session = seen["session"]
    assert os.path.dirname(session) == str(tmp_path / "registry") and seen["modes"] == (0o700, 0o700)
    assert engine.calls[1] == [a.format(d=session) for a in login]
    assert engine.calls[2] == [a.format(d=session) for a in pull]
    assert engine.stdin[1] == "s3cr3t-pw"
    assert not any("s3cr3t-pw" in " ".join(c) for c in engine.calls)
    assert not (tmp_path / "registry").exists()  # the login is gone with the pull, and the directory made for it


def test_refused_login_is_one_line_without_the_password(tmp_path):
    with pytest.raises(container.ContainerError) as err:
        container.ensure_image(
            Engine(fail={"login"}),
            "podman",
            PODMAN,
            "registry.example/verl:1",
            credentials={"username": "u", "password": "s3cr3t-pw"},
            auth_dir=str(tmp_path / "a"),
        )
    assert "login to registry.example as u was refused" in str(err.value) and "s3cr3t-pw" not in str(err.value)
    assert not (tmp_path / "a").exists()  # nothing was changed


def test_a_login_directory_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    """/etc/ray/registry made a link to /etc: it was made 0700 (every user locked out) and the login written there."""
    etc = tmp_path / "etc"
    etc.mkdir(mode=0o755)
    os.symlink(etc, tmp_path / "registry")
    engine = Engine()
    with pytest.raises(container.ContainerError) as err:
        container.ensure_image(
            engine,
            "podman",
            PODMAN,
            "registry.example/verl:1",
            credentials={"username": "u", "password": "s3cr3t-pw"},
            auth_dir=str(tmp_path / "registry"),
        )
    assert str(err.value) == (
        "the registry login's directory %s/registry cannot be used: it is a symbolic link (to %s); "
        "a private directory is never reached through one; nothing was changed" % (tmp_path, etc)
    )
    assert etc.stat().st_mode & 0o777 == 0o755 and os.listdir(etc) == [] and "login" not in engine.verbs()


@pytest.mark.parametrize(
    "ref, registry",
    [
        ("verlai/verl:1", "docker.io"),
        ("ubuntu", "docker.io"),
        ("nvcr.io/nvidia/nemo:25", "nvcr.io"),
        ("localhost/x:1", "localhost"),
        ("10.0.0.5:5000/x", "10.0.0.5:5000"),
    ],
)
def test_registry_of(ref, registry):
    assert container.registry_of(ref) == registry


@pytest.mark.parametrize(
    "engine, vendor, count, expect",
    [
        ("podman", "nvidia", 8, ["--device", "nvidia.com/gpu=all"]),
        ("docker", "nvidia", 8, ["--gpus", "all"]),
        (
            "podman",
            "amd",
            8,
            [
                "--device",
                "/dev/kfd",
                "--device",
                "/dev/dri",
                "--group-add",
                "video",
                "--security-opt",
                "seccomp=unconfined",
            ],
        ),
        (
            "docker",
            "amd",
            "2",
            [
                "--device",
                "/dev/kfd",
                "--device",
                "/dev/dri",
                "--group-add",
                "video",
                "--security-opt",
                "seccomp=unconfined",
            ],
        ),
        ("podman", "nvidia", 0, []),
        ("podman", "", 0, []),
    ],
)
def test_gpus_passed_per_vendor_and_engine(engine, vendor, count, expect):
    assert container.gpu_args(engine, vendor, count) == expect


def test_node_args_name_the_environment_never_its_values():
    text = container.node_args("podman", "amd", 2, ["RAY_AUTH_MODE", "HF_TOKEN", "HIP_VISIBLE_DEVICES", "HF_TOKEN"])
    assert text == (
        "--env HF_TOKEN --env HIP_VISIBLE_DEVICES --env RAY_AUTH_MODE --device /dev/kfd --device /dev/dri "
        "--group-add video --security-opt seccomp=unconfined"
    )


def test_run_prefix_podman_and_docker():
    podman = container_run(
        "podman",
        PODMAN,
        "rlinfra-ray-head",
        ["/workspace/ray", "/data"],
        ["/etc/ray"],
        ["AUTOSCALER_METRIC_PORT"],
        1048576,
    )
    assert podman == (
        "/usr/bin/podman run --rm --name rlinfra-ray-head --network host --ipc host --init "
        "--volume /workspace/ray:/workspace/ray --volume /data:/data --volume /etc/ray:/etc/ray:ro "
        "--env AUTOSCALER_METRIC_PORT @CONTAINER_ARGS@"
    )
    docker = container_run("docker", "/usr/bin/docker", "rlinfra-ray-worker", ["/data"], [], [], 65536)
    assert docker == (
        "/usr/bin/docker run --rm --name rlinfra-ray-worker --network host --ipc host --init "
        "--ulimit memlock=-1:-1 --ulimit nofile=65536:65536 --volume /data:/data @CONTAINER_ARGS@"
    )


def test_run_prefix_refuses_what_would_make_a_broken_unit():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="must be absolute"):
        container_run("podman", "", "n", ["/data"])
    with pytest.raises(AnsibleFilterError, match="mounts must be a list"):
        container_run("podman", PODMAN, "n", "/data")
    with pytest.raises(AnsibleFilterError, match="podman or docker"):
        container_run("lxc", PODMAN, "n", ["/data"])


def test_record_holds_the_image_as_the_fingerprint():
    record = json.loads(container.state_content({"id": ID, "digests": []}, "x:1", "podman"))
    assert record["fingerprint"] == "image:" + ID and record["image"] == "x:1" and record["engine"] == "podman"


def test_nodes_with_different_images_are_named_in_one_line():
    line = mismatch(
        "w1",
        {"fingerprint": "image:" + OTHER, "frozen": ["verl:2"]},
        "h",
        {"fingerprint": "image:" + ID, "frozen": ["verl:1"]},
    )
    assert line.startswith("w1 runs image %s (verl:2), head h runs image %s (verl:1)" % (OTHER[:12], ID[:12]))
    assert "\n" not in line
    mixed = mismatch(
        "w1", {"fingerprint": "f" * 64, "frozen": []}, "h", {"fingerprint": "image:" + ID, "frozen": ["v:1"]}
    )
    assert "w1 runs a venv (fingerprint ffffffffffff), head h runs image" in mixed
    assert mismatch("w1", {"fingerprint": "image:" + ID}, "h", {"fingerprint": "image:" + ID}) == ""


# The purge removes only the image the record names --------------------------------------------------------------


@pytest.mark.parametrize("recorded", [False, True])
def test_the_purge_removes_only_the_recorded_image(tmp_path, module_runner, monkeypatch, recorded):
    """Without a record the image was removed by its reference: an image the node had and used besides Ray."""
    from ansible.module_utils.basic import AnsibleModule

    from ansible_collections.rlinfra.verl.plugins.modules import ray_container

    engine = Engine(held={"docker.io/library/python:3.11": OTHER, ID: ID})
    monkeypatch.setattr(
        AnsibleModule, "get_bin_path", lambda self, name, *a, **kw: PODMAN if name == "podman" else None
    )
    monkeypatch.setattr(
        AnsibleModule,
        "run_command",
        lambda self, argv, **kw: (
            engine.calls.append(list(argv)) or (0, "", "") if argv[1] == "rmi" else engine(argv, kw.get("data"))
        ),
    )
    state = tmp_path / "rlinfra-image.json"
    if recorded:
        state.write_text(json.dumps({"image_id": ID}))
    out = module_runner(
        ray_container.main,
        {"state": "absent", "image": "docker.io/library/python:3.11", "engine": "podman", "state_path": str(state)},
    )
    rmi = [c for c in engine.calls if c[1] == "rmi"]
    assert rmi == ([[PODMAN, "rmi", ID]] if recorded else []) and out["removed"] == recorded, out
    assert not state.exists()


# Commands in the node's running container (verl_merge in container mode) --------------------------------------


def test_exec_prefix_names_the_environment_never_its_values():
    assert container.exec_prefix(PODMAN, "rlinfra-ray-head", {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1"}) == [
        PODMAN,
        "exec",
        "-i",
        "--env",
        "HF_HUB_OFFLINE",
        "--env",
        "PYTHONUNBUFFERED",
        "rlinfra-ray-head",
    ]
    assert container.exec_prefix(PODMAN, "c", interactive=False) == [PODMAN, "exec", "c"]


class Exec:
    """Answers ``container inspect`` (running or not) and ``exec NAME test -d P`` (P in ``seen``); records the calls."""

    def __init__(self, running="true", seen=()):
        self.running, self.seen, self.calls = running, set(seen), []

    def __call__(self, argv, data=None):
        self.calls.append(list(argv))
        if argv[1:3] == ["container", "inspect"]:
            return (0, self.running + "\n", "") if self.running else (125, "", "Error: no such container")
        if argv[1] == "exec" and argv[-3:-1] == ["test", "-d"]:
            return (0 if argv[-1] in self.seen else 1), "", ""
        raise AssertionError(argv)


@pytest.mark.parametrize("running", ["false", ""])
def test_a_container_not_running_is_one_line(running):
    with pytest.raises(container.ContainerError) as e:
        container.check_running(Exec(running), PODMAN, "rlinfra-ray-head")
    assert str(e.value) == "the head's container rlinfra-ray-head is not running: run site.yml"


def test_the_first_path_not_seen_inside_is_named_in_one_line():
    engine = Exec(seen={"/data/ckpt", "/data/models/.x.staging-1"})
    container.check_running(engine, PODMAN, "rlinfra-ray-head")
    container.check_visible(
        engine,
        PODMAN,
        "rlinfra-ray-head",
        [("/data/ckpt", "/data/ckpt"), ("/data/models", "/data/models/.x.staging-1")],
    )
    assert engine.calls[-1] == [PODMAN, "exec", "rlinfra-ray-head", "test", "-d", "/data/models/.x.staging-1"]
    with pytest.raises(container.ContainerError) as e:
        container.check_visible(
            engine, PODMAN, "rlinfra-ray-head", [("/data/ckpt", "/data/ckpt"), ("/scratch/models", "/scratch")]
        )
    assert str(e.value) == (
        "/scratch/models is not visible inside the head's container rlinfra-ray-head: add its "
        "volume to ray_container_mounts and run site.yml"
    )


def test_python_runs_from_the_venv_or_inside_the_container_with_values_out_of_the_arguments():
    argv, env = container.python_command(["-m", "x"], {"HF_HUB_OFFLINE": "1"}, venv="/opt/venv")
    assert argv == ["/opt/venv/bin/python", "-m", "x"] and env["HF_HUB_OFFLINE"] == "1"
    argv, env = container.python_command(
        ["-m", "x"], {"HF_HUB_OFFLINE": "1"}, container={"engine_path": PODMAN, "name": "rlinfra-ray-head"}
    )
    assert argv == [PODMAN, "exec", "-i", "--env", "HF_HUB_OFFLINE", "rlinfra-ray-head", "python3", "-m", "x"]
    assert env["HF_HUB_OFFLINE"] == "1"


# --- the shared image store (ray_container_image_store) -----------------------------------------------------------

STORE = "/data/rlinfra-images"
INFO = {"driver": "overlay", "graphroot": "/var/lib/containers/storage", "runroot": "/run/containers/storage"}


def test_store_load_goes_into_the_store_and_a_second_node_loads_nothing(tmp_path):
    path = archive(tmp_path, [{"Config": "%s.json" % ID, "RepoTags": ["localhost/rlinfra/ray-node:sandbox"]}])
    engine = Engine()
    first = container.ensure_image(
        engine, "podman", PODMAN, "localhost/rlinfra/ray-node:sandbox", archive=path, store=STORE
    )
    assert first["loaded"] and first["id"] == ID
    loads = [c for c in engine.calls if "load" in c]
    assert loads == [[PODMAN, "--root", STORE, "--runroot", container.STORE_RUNROOT, "load", "-i", path]]
    # The next node's engine lists the store, so it sees the image there: nothing is loaded or tagged.
    engine.calls.clear()
    second = container.ensure_image(
        engine, "podman", PODMAN, "localhost/rlinfra/ray-node:sandbox", archive=path, store=STORE
    )
    assert not second["loaded"] and not second["tagged"] and second["id"] == ID
    assert engine.verbs() == []


def test_store_pull_goes_into_the_store_with_the_login_through_stdin(tmp_path):
    engine = Engine()
    found = container.ensure_image(
        engine,
        "podman",
        PODMAN,
        "reg.example:5000/verl:1",
        store=STORE,
        credentials={"username": "u", "password": "s3cret"},
        auth_dir=str(tmp_path / "auth"),
    )
    assert found["pulled"] and engine.roots == [STORE, STORE]
    assert all("s3cret" not in " ".join(c) for c in engine.calls)
    assert "s3cret" in engine.stdin


@pytest.mark.parametrize(
    "current, expect",
    [
        (None, True),  # no storage.conf: written
        ("WANTED", False),  # already as wanted
        (
            container.STORE_HEADER + '[storage]\ndriver = "vfs"\n',
            True,
        ),  # the collection's own, another store: rewritten
        ('[storage]\ndriver = "overlay"\n[storage.options]\nadditionalimagestores = ["/data/rlinfra-images"]\n', False),
    ],
)
def test_storage_conf_plan(current, expect):
    wanted = container.storage_conf(STORE, INFO)
    assert container.storage_conf_plan(wanted if current == "WANTED" else current, wanted, STORE) is expect


def test_storage_conf_of_the_node_own_is_not_rewritten():
    mine = '[storage]\ndriver = "overlay"\n[storage.options]\nadditionalimagestores = ["/other"]\n'
    with pytest.raises(container.ContainerError) as e:
        container.storage_conf_plan(mine, container.storage_conf(STORE, INFO), STORE)
    assert str(e.value) == (
        "/etc/containers/storage.conf is this node's own (it was not written by rlinfra): add /data/rlinfra-images to "
        "its additionalimagestores under [storage.options], or unset ray_container_image_store; nothing was changed"
    )


def test_storage_conf_keeps_the_node_store_and_lists_the_shared_one():
    text = container.storage_conf(STORE, INFO)
    assert text.startswith(container.STORE_HEADER)
    assert 'driver = "overlay"' in text and 'graphroot = "/var/lib/containers/storage"' in text
    assert 'runroot = "/run/containers/storage"' in text
    assert 'additionalimagestores = ["/data/rlinfra-images"]' in text


@pytest.mark.parametrize(
    "store, line",
    [
        ("/var/lib/containers/storage", "overlaps the node's own podman store"),
        ("/var/lib/containers", "overlaps the node's own podman store"),
        ("/var/lib/containers/storage/x", "overlaps the node's own podman store"),
        ("/data", "is a system directory"),
        ("//data/", "is a system directory"),
    ],
)
def test_check_store_refuses(store, line):
    with pytest.raises(container.ContainerError) as e:
        container.check_store(store, INFO["graphroot"])
    assert line in str(e.value) and str(e.value).endswith("nothing was changed")


def test_check_store_refuses_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(container.ContainerError, match="is a symbolic link"):
        container.check_store(str(tmp_path / "link"), INFO["graphroot"])


def test_use_store_makes_the_store_before_storage_conf_names_it(tmp_path):
    store = str(tmp_path / "store")
    engine, written = Engine(), []

    def write(text):
        assert engine.roots == [store], "storage.conf written before the store was made"
        written.append(text)

    assert container.use_store(engine, PODMAN, store, INFO, None, write) is True
    assert written == [container.storage_conf(store, INFO)]
    # Check mode: says it would change, calls nothing and writes nothing.
    engine2, written2 = Engine(), []
    assert (
        container.use_store(engine2, PODMAN, str(tmp_path / "other"), INFO, None, written2.append, check=True) is True
    )
    assert engine2.calls == [] and written2 == []


def test_use_store_converged_changes_nothing(tmp_path):
    store = tmp_path / "store"
    (store / "overlay-images").mkdir(parents=True)
    engine = Engine()
    assert (
        container.use_store(
            engine,
            PODMAN,
            str(store),
            INFO,
            container.storage_conf(str(store), INFO),
            lambda text: pytest.fail("rewritten"),
        )
        is False
    )
    assert engine.calls == []


def test_storage_info_says_when_podman_does_not_answer():
    with pytest.raises(container.ContainerError, match="podman info did not say where its store is"):
        container.storage_info(lambda argv, data=None: (125, "", "Error: cannot open database\n"), PODMAN)


def test_record_names_the_store_only_when_there_is_one():
    found = {"id": ID, "digests": []}
    assert "image_store" not in json.loads(container.state_content(found, "img:1", "podman"))
    assert json.loads(container.state_content(found, "img:1", "podman", STORE))["image_store"] == STORE
