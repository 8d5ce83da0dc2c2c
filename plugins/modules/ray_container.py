#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_container
short_description: Make a node ready to run Ray inside a container image - the engine, the image, its fingerprint
version_added: 0.12.0
description:
  - Container mode of the ray roles (C(ray_container_image)). Chooses the engine (O(engine) - C(auto) takes podman
    where both exist), installs podman with apt on Debian or Ubuntu where no engine is there and O(install) allows it,
    and makes sure the engine holds the image.
  - With O(archive) (an image archive on the shared volume, from C(podman save) or C(docker save)) the image is loaded
    only when the engine does not hold the archive's image ID yet - a re-run loads nothing - and tagged O(image) when
    the archive does not carry that name. Without it O(image) is pulled only when missing; a tag is resolved once and
    its image ID recorded, a new image is a new reference or a new archive, never a silent re-pull.
  - Registry credentials (O(registry_username), O(registry_password)) go to the engine's C(login --password-stdin);
    the login lands in O(auth_dir) (mode 0700, root only). The password is never an argument or in a message.
  - Writes O(state_path) - the image ID as the fingerprint M(rlinfra.verl.ray_node) and M(rlinfra.verl.ray_node_state)
    compare, as a venv's record for them - so that a new image restarts Ray, with the same refusal under a running job.
  - Every path of O(mounts) must exist on the node (the unit mounts each at the same path inside); the missing ones
    are named in one line before anything changes.
author:
  - rlinfra maintainers (@rlinfra)
options:
  image:
    description: The image reference (C([registry/]name[:tag][@sha256:digest])); credentials in it are refused.
    type: str
    required: true
  archive:
    description: An image archive on the node (the shared volume) to load the image from instead of pulling it.
    type: path
    default: ""
  engine:
    description: The container engine.
    type: str
    choices: [auto, podman, docker]
    default: auto
  install:
    description: Install podman (apt) when no engine is found (C(auto)) or the one named is missing.
    type: bool
    default: true
  registry_username:
    description: The registry user for the pull (empty - no login).
    type: str
    default: ""
  registry_password:
    description: The registry password or token for the pull. Never shown.
    type: str
    default: ""
  auth_dir:
    description: Where the login is kept (root only).
    type: path
    default: /etc/ray/registry
  image_store:
    description:
      - A directory on the shared volume that holds the image once for every node (podman only). The first node to
        take the store's lock loads the archive (or pulls the image) into it with C(podman --root); the others wait
        and load nothing. Each node's C(/etc/containers/storage.conf) lists it in C(additionalimagestores), and the
        nodes run the image from it, read-only.
      - The node's storage.conf is written only when it is missing or the collection's own (its first line says so);
        a node's own storage.conf must list the store already, or the task fails in one line and changes nothing.
      - Empty (the default) - each node loads or pulls the image into its own store.
    type: path
    default: ""
  mounts:
    description: Paths the Ray unit mounts into the container; each must exist.
    type: list
    elements: path
    default: []
  state_path:
    description: The record of the image the node runs (JSON with C(fingerprint)).
    type: path
    required: true
  state:
    description:
      - V(present) makes the image ready. V(absent) (teardown.yml's purge) removes the image the record names from the
        engine, and the record; without a record the image is left (O(image) alone does not show the collection put
        it there). Nothing is installed then, and a missing engine or image is nothing to do.
      - An image of the shared store (O(image_store)) is left in the store, which other nodes and clusters may use;
        the node's storage.conf is removed when it is the collection's own.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    description: Says whether it would install, load, tag or pull; changes nothing.
  diff_mode:
    support: none
    description: No diff (the record's fingerprint is returned).
seealso:
  - module: rlinfra.verl.ray_node
"""

EXAMPLES = r"""
- name: Load verl's image from the shared volume once per node
  rlinfra.verl.ray_container:
    image: docker.io/verlai/verl:app-verl0.5-vllm0.10.0-mcore0.13.0-te2.2
    archive: /data/images/verl.tar
    mounts: [/data, /workspace/ray]
    state_path: /etc/ray/rlinfra-image.json
  register: image
"""

RETURN = r"""
engine:
  description: The engine used (V(podman) or V(docker)).
  returned: always
  type: str
engine_path:
  description: Its absolute path on the node (what the Ray unit runs).
  returned: always
  type: str
image_id:
  description: The image ID (64 hex characters); null in check mode before a pull.
  returned: always
  type: str
digests:
  description: The image's repository digests (C(name@sha256:...)) when it came from a registry.
  returned: always
  type: list
  elements: str
fingerprint:
  description: C(image:<image_id>), what the record holds and the cluster's nodes must share.
  returned: always
  type: str
loaded:
  description: Whether the archive was (or in check mode would be) loaded.
  returned: always
  type: bool
pulled:
  description: Whether the image was (or would be) pulled.
  returned: always
  type: bool
installed:
  description: Whether podman was (or would be) installed.
  returned: always
  type: bool
removed:
  description: With O(state=absent), whether the image was (or would be) removed.
  returned: when O(state=absent)
  type: bool
image_store:
  description: The shared image store the node runs the image from (V("") - the node's own store).
  returned: always
  type: str
"""

import contextlib
import errno
import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container

ARGS = vocabulary.Args(
    image=vocabulary.ImageRef(required=True, empty=False),
    archive=vocabulary.AbsPath("reads", empty=True, default=""),
    engine=vocabulary.Choice(("auto", "podman", "docker"), default="auto"),
    install=vocabulary.Switch(default=True),
    registry_username=vocabulary.Text(
        max_len=256, pattern=r"^[^\s:]*$", what="a registry user name (no spaces or colons)", default=""
    ),
    registry_password=vocabulary.Secret(default=""),
    auth_dir=vocabulary.AbsPath("config", default="/etc/ray/registry"),
    image_store=vocabulary.AbsPath("owns", empty=True, default=""),
    mounts=vocabulary.ListOf(vocabulary.AbsPath("mounts"), unique=True, default=[]),
    state_path=vocabulary.AbsPath("config", required=True),
    state=vocabulary.Choice(("present", "absent"), default="present"),
)
ARGUMENT_SPEC = ARGS.spec
# How long a node waits for another to finish loading into the shared store before it says so: a large image over
# a slow volume takes minutes, never an hour.
STORE_WAIT = 3600


def find_engine(module):
    """``(engine, path or None)`` as O(engine) asks (the argument spec has refused any other choice)."""
    return container.choose_engine(module.params["engine"], module.get_bin_path)


def engine_ready(module):
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


def remove(module):
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


def read_storage_conf(module):
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


def own_storage_conf():
    """The node's storage.conf when it is the collection's own (its first line), else None."""
    try:
        with open(container.STORAGE_CONF, encoding="utf-8", opener=files.no_follow) as f:
            text = f.read()
    except OSError:
        return None
    return text if text.startswith(container.STORE_HEADER) else None


def write_storage_conf(text):
    makedirs(os.path.dirname(container.STORAGE_CONF), 0o755)
    write_atomic(container.STORAGE_CONF, text, 0o644)


def store_ready(module, run, engine, path, store, info, current):
    """True when the node lists the shared store and sees the image (tagged) already: nothing to write or load."""
    p = module.params
    if container.use_store(run, path, store, info, current, None, check=True):
        return False
    found = container.ensure_image(run, engine, path, p["image"], archive=p["archive"], check=True, store=store)
    return not (found["loaded"] or found["pulled"] or found["tagged"])


def converge(module):
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

    def run(argv, data=None):
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
        lock = contextlib.nullcontext()
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


def main():
    module = ARGS.new_module(AnsibleModule)
    (remove if module.params["state"] == "absent" else converge)(module)


if __name__ == "__main__":
    main()
