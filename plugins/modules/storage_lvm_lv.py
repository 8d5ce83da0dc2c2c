#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_lvm_lv
short_description: Create the scratch logical volume over all of its volume group, or grow it over new space
version_added: 0.3.0
description:
  - A step of the C(rlinfra.verl.storage_lvm) role, after the volume group. The LV takes all the space of the
    volume group. Striped - each step stripes over every physical volume that still has free extents, with the
    same number of extents on each; a device added later makes a new segment (striped over the new devices, or
    linear when only one is new). Linear - one C(-l +100%FREE).
  - A re-run on a full volume group changes nothing. An LVM error is one line naming the command.
author:
  - rlinfra maintainers (@rlinfra)
options:
  vg:
    description: The volume group.
    type: str
    required: true
  lv:
    description: The logical volume.
    type: str
    required: true
  layout:
    description: The layout.
    type: str
    default: striped
    choices: [striped, linear]
  stripe_size:
    description: C(lvcreate -I) value; empty for LVM's default.
    type: str
    default: ""
  planned:
    description: In check mode, the physical volumes the volume group step would have added, with their sizes in bytes.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Lists the commands it would run.
  diff_mode:
    support: none
    description: Nothing to diff.
"""

EXAMPLES = r"""
- name: Create the logical volume over all the space
  rlinfra.verl.storage_lvm_lv:
    vg: vg_scratch
    lv: lv_scratch
"""

RETURN = r"""
commands:
  description: The lvcreate/lvextend commands run (in check mode, that would be run).
  returned: always
  type: list
  elements: str
lv_path:
  description: The LV's device path.
  returned: always
  type: str
segments:
  description: The LV's segments after the run.
  returned: always
  type: list
  elements: dict
existed:
  description: Whether the LV existed before the run.
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_args import lvm_name
from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_lv import lv_module

ARGS = vocabulary.Args(
    vg=lvm_name(required=True),
    lv=lvm_name(required=True),
    layout=vocabulary.Choice(("striped", "linear"), default="striped"),
    stripe_size=vocabulary.Text(
        max_len=16, pattern=r"^[0-9]+[kKmM]?$", what="empty or a size such as 256k", default=""
    ),
    # The lvg step's new physical volumes, each with its size in bytes (check mode counts their space). Block devices
    # under /dev (the role's settings check them as such), not directories: "reads" confines nothing here.
    planned=vocabulary.MapOf(vocabulary.AbsPath("reads"), vocabulary.Int(0, unit="bytes", nullable=False), default={}),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, lv_module)


if __name__ == "__main__":
    main()
