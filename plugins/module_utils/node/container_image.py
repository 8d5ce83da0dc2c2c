# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.ray_container``'s work on a node: its container engine found (podman installed where allowed), the
Ray image loaded or pulled (into the shared image store when one is set) and recorded, or removed again. The image's
rules are module_utils/node/container.py's. Standard library only."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container

# How long a node waits for another to finish loading into the shared store before it says so: a large image over
# a slow volume takes minutes, never an hour.
STORE_WAIT = 3600


def find_engine(module: Any) -> tuple[str, str | None]:
    """``(engine, path or None)`` as O(engine) asks (the argument spec has refused any other choice)."""
    return container.choose_engine(module.params["engine"], module.get_bin_path)


def engine_ready(module: Any) -> tuple[str, str, bool]:
    """``(engine, path, installed)``; installs podman with apt where allowed and needed."""
    p = module.params
    engine, path = find_engine(module)
    if path:
        return engine, path, False
    apt = module.get_bin_path("apt-get")
    if engine != "podman" or not p["install"] or not apt:
        module.fail_json(
            msg="%s is not installed on this node%s: install it, or set ray_container_engine to an engine the "
            "node has; nothing was changed" % (engine, "" if apt else " and it has no apt-get to install it with"),
            changed=False,
        )
    if module.check_mode:
        return engine, "/usr/bin/podman", True
    rc, out, err = module.run_command(
        [apt, "install", "-y", "-q", "--no-install-recommends", "podman", "catatonit"],
        environ_update={"DEBIAN_FRONTEND": "noninteractive"},
    )
    path = module.get_bin_path("podman")
    if rc != 0 or not path:
        module.fail_json(
            msg="podman could not be installed with apt-get: %s; install it (apt-get install podman) and "
            "run again" % ((err or out).strip().splitlines() or ["no output"])[-1][:300]
        )
    return engine, path, True


def remove(module: Any) -> None:
    """The image the record names out of the engine, and the record; a second run finds nothing. Without a record the
    image is left: the reference alone does not prove the image is the collection's (the node may have had it, and
    may use it, before and besides Ray)."""
    p = module.params
    engine, path = find_engine(module)
    recorded, store = None, ""
    try:
        with open(p["state_path"], encoding="utf-8") as f:
            record = json.load(f)
        recorded = container.image_id(record.get("image_id"))
        store = str(record.get("image_store") or "")
    except (OSError, ValueError, AttributeError):
        pass
    removed = False
    if path and recorded and not store:  # the shared store's image stays: other nodes and clusters run it
        found = container.inspect(lambda argv, data=None: module.run_command(argv), path, recorded)
        if found:
            removed = True
            if not module.check_mode:
                rc, out, err = module.run_command([path, "rmi", found["id"]])
                if rc != 0:
                    module.fail_json(
                        msg="%s rmi %s failed: %s (a container may still use it: stop Ray first)"
                        % (engine, found["id"][:12], ((err or out).strip().splitlines() or ["no output"])[-1][:300])
                    )
    had_record = os.path.exists(p["state_path"])
    if had_record and not module.check_mode:
        os.unlink(p["state_path"])
    conf = own_storage_conf() is not None
    if conf and not module.check_mode:
        os.unlink(container.STORAGE_CONF)
    module.exit_json(
        changed=removed or had_record or conf,
        engine=engine,
        engine_path=path or "",
        image_id=recorded,
        digests=[],
        fingerprint=None,
        loaded=False,
        pulled=False,
        installed=False,
        removed=removed,
        image_store=store,
    )


def read_storage_conf(module: Any) -> str | None:
    """The node's storage.conf, or None when it has none; never read through a link (one line, nothing changed)."""
    try:
        with open(container.STORAGE_CONF, encoding="utf-8", opener=files.no_follow) as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            module.fail_json(
                msg="%s is a symbolic link: ray_container_image_store writes that file only when it is the "
                "node's own file or missing; nothing was changed" % container.STORAGE_CONF,
                changed=False,
            )
        module.fail_json(
            msg="%s cannot be read: %s; nothing was changed" % (container.STORAGE_CONF, e.strerror or e), changed=False
        )
        return None  # not reached: fail_json exits


def own_storage_conf() -> str | None:
    """The node's storage.conf when it is the collection's own (its first line), else None."""
    try:
        with open(container.STORAGE_CONF, encoding="utf-8", opener=files.no_follow) as f:
            text = f.read()
    except OSError:
        return None
    return text if text.startswith(container.STORE_HEADER) else None


def write_storage_conf(text: str) -> None:
    """The collection's storage.conf written in place of the node's."""
    makedirs(os.path.dirname(container.STORAGE_CONF), 0o755)
    write_atomic(container.STORAGE_CONF, text, 0o644)


def store_ready(
    module: Any, run: Any, engine: str, path: str, store: str, info: Mapping[str, str], current: str | None
) -> bool:
    """True when the node lists the shared store and sees the image (tagged) already: nothing to write or load."""
    p = module.params
    if container.use_store(run, path, store, info, current, None, check=True):
        return False
    found = container.ensure_image(run, engine, path, p["image"], archive=p["archive"], check=True, store=store)
    return not (found["loaded"] or found["pulled"] or found["tagged"])


def converge(module: Any) -> None:
    """The image on the node (and the shared store used) as the options say; exits through ``module``."""
    p = module.params
    missing = [path for path in p["mounts"] if not os.path.exists(path)]
    if missing:
        module.fail_json(
            msg="the Ray container mounts %s, which %s not exist on this node: make %s (the shared volume "
            "mounted, nfs_mount) or remove %s from ray_container_mounts; nothing was changed"
            % (
                ", ".join(missing),
                "does" if len(missing) == 1 else "do",
                "it" if len(missing) == 1 else "them",
                "it" if len(missing) == 1 else "them",
            ),
            changed=False,
        )
    engine, path, installed = engine_ready(module)

    def run(argv: list[str], data: Any = None) -> tuple[int, str, str]:
        return module.run_command(argv, data=data, binary_data=data is not None)

    credentials = (
        dict(username=p["registry_username"], password=p["registry_password"]) if p["registry_username"] else None
    )
    store = p["image_store"]
    stored, info = False, None
    try:
        if store and engine != "podman":
            raise container.ContainerError(
                "ray_container_image_store needs podman (docker has no shared image store): "
                "set ray_container_engine: podman, or unset ray_container_image_store; nothing "
                "was changed"
            )
        lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if store:
            current = read_storage_conf(module)
            info = container.store_info(run, path, current)
            container.check_store(store, info["graphroot"])
            # The store's lock only when there is something to do: converged nodes do not queue behind each other.
            if not module.check_mode and not store_ready(module, run, engine, path, store, info, current):
                lock = files.BoundedLock(
                    os.path.join(store, container.STORE_LOCK),
                    STORE_WAIT,
                    "another node loading the image into the shared store",
                    container.ContainerError,
                )
        with lock:
            if store:
                if info is None:  # never: read above, with the store (for the type checker)
                    raise AssertionError("info is set here")
                stored = container.use_store(
                    run, path, store, info, read_storage_conf(module), write_storage_conf, check=module.check_mode
                )
            found = container.ensure_image(
                run,
                engine,
                path,
                p["image"],
                archive=p["archive"],
                credentials=credentials,
                auth_dir=p["auth_dir"],
                check=module.check_mode,
                store=store,
            )
    except container.ContainerError as exc:
        module.fail_json(msg=str(exc), changed=(installed or stored) and not module.check_mode)
    except OSError as exc:
        module.fail_json(
            msg="the shared image store %s cannot be used: %s; nothing else was changed" % (store, exc.strerror or exc),
            changed=(installed or stored) and not module.check_mode,
        )
    changed = installed or stored or found["loaded"] or found["pulled"] or found["tagged"]
    fingerprint = container.fingerprint(found) if found.get("id") else None
    if found.get("id"):
        content = container.state_content(found, p["image"], engine, store)
        try:
            with open(p["state_path"], encoding="utf-8") as f:
                same = f.read() == content
        except OSError:
            same = False
        if not same:
            changed = True
            if not module.check_mode:
                makedirs(os.path.dirname(p["state_path"]), 0o755)
                write_atomic(p["state_path"], content, 0o644)
    module.exit_json(
        changed=changed,
        engine=engine,
        engine_path=path,
        image_id=found.get("id"),
        digests=found.get("digests") or [],
        fingerprint=fingerprint,
        loaded=found["loaded"],
        pulled=found["pulled"],
        installed=installed,
        image_store=store,
    )


def image(module: Any) -> None:
    """The module's work, with its AnsibleModule: :func:`remove` for ``state=absent``, else :func:`converge`."""
    (remove if module.params["state"] == "absent" else converge)(module)
