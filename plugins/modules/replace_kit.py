#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: replace_kit
short_description: Put on a Ray head what its run's supervisor needs to replace a machine (recovery.replace)
version_added: 0.14.0
description:
  - Keeps the replace kit in O(path), a root-only directory (0700, its files 0600) that the run's supervisor reads
    (module_utils/hyperbolic/replace.py) - C(ssh_key), the dedicated private key (O(ssh_key), read on the controller);
    C(inventory.json), the cluster's inventory as the controller sees it (O(inventory)); C(settings.json), what a
    replacement is rented with (O(settings)); and C(collections/ansible_collections/rlinfra/verl), this collection at the
    controller's version, which the supervisor's converges run (its ansible-core, C(ansible/), is
    M(rlinfra.verl.python_env_sync)'s).
  - Runs on the controller (an action plugin of the same name) - reads the key, packs the collection into a
    reproducible archive (the same collection is the same bytes) and copies it to the head - then on the head - each
    file written only when it differs, the collection unpacked (into a new directory, swapped in whole) only when its
    archive differs from the one last unpacked (C(collection.sha256)). A second run changes nothing.
author:
  - rlinfra maintainers (@rlinfra)
options:
  path:
    description: The kit's directory on the head (C(/var/lib/rlinfra/cluster/<cluster>); a teardown removes it).
    type: path
    required: true
  ssh_key:
    description: The private key (on the controller) of the SSH key the account's new machines accept, kept for this
      (C(hyperbolic_replace_ssh_key); never your own key - it goes to the head).
    type: path
    required: true
  inventory:
    description: The cluster's inventory (filter P(rlinfra.verl.replace_inventory#filter)).
    type: dict
    required: true
  settings:
    description: What a replacement is rented with - C(min_hours), C(daily_budget), C(ssh_public_key) (the
      C(hyperbolic_*) settings, checked by M(rlinfra.verl.check_settings) first).
    type: dict
    required: true
  ssh_key_content:
    description: Set by the action (the key's text, read from O(ssh_key)); leave unset.
    type: str
    default: ""
  archive:
    description: Set by the action (where the collection's archive was copied on the head); leave unset.
    type: path
    default: ""
  archive_sha256:
    description: Set by the action (the digest of the collection's archive); leave unset.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Says what would be written; copies and writes nothing.
  diff_mode:
    support: none
    description: The key is never shown.
"""

EXAMPLES = r"""
- name: Put on the head what replacing a machine needs
  rlinfra.verl.replace_kit:
    path: /var/lib/rlinfra/cluster/prov
    ssh_key: /home/me/.ssh/rlinfra-replace
    inventory: "{{ cluster_hosts | rlinfra.verl.replace_inventory(hostvars, groups, inventory_hostname) }}"
    settings: {min_hours: 1, daily_budget: null, ssh_public_key: ""}
"""

RETURN = r"""
written:
  description: What was (in check mode, would be) written - a directory, C(ssh_key), C(inventory.json),
    C(settings.json), C(the collection).
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.replace_kit import write

ARGS = vocabulary.Args(
    path=vocabulary.AbsPath("owns", required=True),
    ssh_key=vocabulary.AbsPath("reads", required=True),
    inventory=vocabulary.Raw(
        "the cluster's inventory, as filter rlinfra.verl.replace_inventory makes it",
        ansible="dict",
        required=True,
        sample={"all": {}},
    ),
    settings=vocabulary.Raw(
        "the hyperbolic_* settings, checked by check_settings before", ansible="dict", required=True, sample={}
    ),
    ssh_key_content=vocabulary.Secret(multiline=True, default=""),
    archive=vocabulary.AbsPath("reads", empty=True, default=""),
    archive_sha256=vocabulary.Text(max_len=64, pattern=r"^([0-9a-f]{64})?$", what="a sha256 hex digest", default=""),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, write)


if __name__ == "__main__":
    main()
