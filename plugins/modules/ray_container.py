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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.container_image import image

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


def main():
    image(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
