#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: storage_lvm_probe
short_description: Choose the scratch volume's block devices and refuse any that hold data or are in use
version_added: 0.3.0
description:
  - The read-only first step of the C(rlinfra.verl.storage_lvm) role. Classifies every listed device (or, with
    O(devices=auto), every whole disk matching O(discover_pattern)) as new, already a member of O(vg_name), this
    role's plain filesystem, to wipe (O(force)), skipped or refused, and fails with one line naming the device and
    the reason when one holds data (a filesystem, RAID or LVM signature, a partition table) or is in use (mounted,
    swap, held by device-mapper or md, the root disk, opened exclusively).
  - Never writes to a device. The only state it may change is loading the C(dm_mod) kernel module when an LVM
    layout needs device-mapper. Needs root.
author:
  - rlinfra maintainers (@rlinfra)
options:
  devices:
    description: Block devices (C(/dev/...)), or the string C(auto) to discover them.
    type: raw
    required: true
  layout:
    description: The volume's layout.
    type: str
    default: striped
    choices: [striped, linear, plain]
  vg_name:
    description: The volume group (its members are this role's own).
    type: str
    default: vg_scratch
  lv_name:
    description: The logical volume.
    type: str
    default: lv_scratch
  mount_point:
    description: Where the volume is mounted (an absolute path).
    type: path
    default: /workspace
  force:
    description: Take listed devices that hold data (they are wiped later); devices in use are never taken.
    type: bool
    default: false
  stop_after:
    description: Where the role stops (C(discover), C(vg)); empty for the whole volume.
    type: str
    default: ""
    choices: ["", discover, vg]
  fallback_plain:
    description: A single device without LVM tools or device-mapper becomes a plain filesystem.
    type: bool
    default: true
  discover_pattern:
    description: Kernel names of the disks that O(devices=auto) considers.
    type: str
    default: "^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+|xvd[a-z]+)$"
  discover_exclude:
    description: Devices O(devices=auto) never takes.
    type: list
    elements: str
    default: []
  discover_min_size:
    description: Smallest disk O(devices=auto) takes, in bytes.
    type: int
    default: 0
attributes:
  check_mode:
    support: full
    description: Only reads (it may load C(dm_mod)).
  diff_mode:
    support: none
    description: Nothing to diff.
"""

EXAMPLES = r"""
- name: Choose the devices and refuse any that hold data
  rlinfra.verl.storage_lvm_probe:
    devices: [/dev/nvme1n1, /dev/nvme2n1]
  register: probe
"""

RETURN = r"""
layout:
  description: The layout the role builds (C(plain) when it fell back).
  returned: always
  type: str
selected:
  description: The devices the volume is made of.
  returned: always
  type: list
  elements: str
new:
  description: Selected devices that are not in the volume group yet.
  returned: always
  type: list
  elements: str
candidates:
  description: Every device looked at, with its size, state and reason.
  returned: always
  type: list
  elements: dict
not_taken:
  description: The devices looked at but not taken, each with the reason (named so, not C(skipped), which Ansible reserves).
  returned: always
  type: list
  elements: dict
nothing:
  description: True when no device is selected (discovery found no free disk).
  returned: always
  type: bool
report:
  description: One line per device, for the run's output.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_args import (
    DEFAULT_PATTERN,
    devices,
    disk,
    lvm_name,
    pattern,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_probe import probe_module

ARGS = vocabulary.Args(
    devices=vocabulary.Custom(
        "raw",
        devices,
        [
            ("word", "sdb"),
            ("not_dev", ["sdb"]),
            ("dotdot", ["/dev/../etc/passwd"]),
            ("space", ["/dev/sd b"]),
            ("number", [5]),
            ("upper_auto", "AUTO"),
            ("mapping", {"/dev/sdb": 1}),
        ],
        "auto",
        required=True,
    ),
    layout=vocabulary.Choice(("striped", "linear", "plain"), default="striped"),
    vg_name=lvm_name(default="vg_scratch"),
    lv_name=lvm_name(default="lv_scratch"),
    mount_point=vocabulary.AbsPath("writes", default="/workspace"),
    force=vocabulary.Switch(default=False),
    stop_after=vocabulary.Choice(("", "discover", "vg"), default=""),
    fallback_plain=vocabulary.Switch(default=True),
    discover_pattern=vocabulary.Custom(
        "str",
        pattern,
        [("unbalanced", "(nvme"), ("newline", "sd[a-z]+\nx"), ("repeat", "*sd")],
        DEFAULT_PATTERN,
        default=DEFAULT_PATTERN,
    ),
    discover_exclude=vocabulary.ListOf(
        vocabulary.Custom(
            "str",
            disk,
            [
                ("relative", "dev/sda"),
                ("dotdot", "/dev/../etc"),
                ("dotdot_name", ".."),
                ("empty", ""),
                ("newline", "sda\n"),
            ],
            "nvme0n1",
        ),
        default=[],
    ),
    discover_min_size=vocabulary.Int(0, unit="bytes", default=0),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, probe_module)


if __name__ == "__main__":
    main()
