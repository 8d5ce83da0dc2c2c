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

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.storage_probe import Probe

DEFAULT_PATTERN = "^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+|xvd[a-z]+)$"
_DEVICE = re.compile(r"^/dev/[A-Za-z0-9/_.:-]+$")


def _devices(value):
    """auto, or a list of block devices under /dev (the role's storage_lvm_devices rule, module_utils/common/settings.py)."""
    if value == "auto":
        return value
    if not isinstance(value, list):
        raise vocabulary.Bad("be auto or a list of block devices (for example [/dev/nvme1n1])")
    for item in value:
        if not isinstance(item, str) or not _DEVICE.match(item) or ".." in item.split("/"):
            raise vocabulary.Bad(
                "be a list of block devices under /dev; %s is not one"
                % (repr(item) if isinstance(item, str) else vocabulary.type_word(item))
            )
    return value


def _pattern(value):
    vocabulary.one_line(value, "a regular expression")
    try:
        re.compile(value)
    except re.error as e:
        raise vocabulary.Bad("be a regular expression (%s)" % e) from e
    return value


def _disk(value):
    """A disk that discovery never takes: its kernel name (nvme0n1) or a path to its device node."""
    if isinstance(value, str) and value.startswith("/"):
        return vocabulary.AbsPath("reads").check(value)
    try:
        return vocabulary.Name(max_len=255).check(value)
    except vocabulary.Bad:
        raise vocabulary.Bad("be a disk's kernel name (nvme0n1) or the absolute path of its device node") from None


def _lvm_name(**kw):
    """A volume group's or logical volume's name, as the role's settings check it (module_utils/common/settings.py)."""
    return vocabulary.Text(
        empty=False,
        max_len=128,
        pattern=r"^(?!\.\.?$)[A-Za-z0-9+_.][A-Za-z0-9+_.-]{0,127}$",
        what="an LVM name (letters, digits, + _ . -, not starting with -)",
        **kw,
    )


ARGS = vocabulary.Args(
    devices=vocabulary.Custom(
        "raw",
        _devices,
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
    vg_name=_lvm_name(default="vg_scratch"),
    lv_name=_lvm_name(default="lv_scratch"),
    mount_point=vocabulary.AbsPath("writes", default="/workspace"),
    force=vocabulary.Switch(default=False),
    stop_after=vocabulary.Choice(("", "discover", "vg"), default=""),
    fallback_plain=vocabulary.Switch(default=True),
    discover_pattern=vocabulary.Custom(
        "str",
        _pattern,
        [("unbalanced", "(nvme"), ("newline", "sd[a-z]+\nx"), ("repeat", "*sd")],
        DEFAULT_PATTERN,
        default=DEFAULT_PATTERN,
    ),
    discover_exclude=vocabulary.ListOf(
        vocabulary.Custom(
            "str",
            _disk,
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
    module = ARGS.new_module(AnsibleModule)
    if os.geteuid() != 0:
        module.fail_json(msg="storage_lvm: the device probe needs root (become: true)")
    out = Probe(module.params).decide()
    error = out.pop("error", "")
    if error:
        module.fail_json(msg=error, **out)
    module.exit_json(changed=False, **out)


if __name__ == "__main__":
    main()
