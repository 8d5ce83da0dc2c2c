# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The argument types of ``rlinfra.verl.storage_lvm_probe`` and ``rlinfra.verl.storage_lvm_lv`` (the storage_lvm
role's modules) beyond the vocabulary's own: LVM names, the device list, the discovery pattern, an excluded disk.
The role's settings check holds the same rules (module_utils/common/settings.py)."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary

DEFAULT_PATTERN = "^(nvme[0-9]+n[0-9]+|sd[a-z]+|vd[a-z]+|xvd[a-z]+)$"
_DEVICE = re.compile(r"^/dev/[A-Za-z0-9/_.:-]+$")


def lvm_name(**kw: Any) -> Any:
    """A volume group's or logical volume's name, as the role's settings check it (module_utils/common/settings.py)."""
    return vocabulary.Text(
        empty=False,
        max_len=128,
        pattern=r"^(?!\.\.?$)[A-Za-z0-9+_.][A-Za-z0-9+_.-]{0,127}$",
        what="an LVM name (letters, digits, + _ . -, not starting with -)",
        **kw,
    )


def devices(value: Any) -> Any:
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


def pattern(value: Any) -> Any:
    """A regular expression on one line (discovery's pattern of disk names)."""
    vocabulary.one_line(value, "a regular expression")
    try:
        re.compile(value)
    except re.error as e:
        raise vocabulary.Bad("be a regular expression (%s)" % e) from e
    return value


def disk(value: Any) -> Any:
    """A disk that discovery never takes: its kernel name (nvme0n1) or a path to its device node."""
    if isinstance(value, str) and value.startswith("/"):
        return vocabulary.AbsPath("reads").check(value)
    try:
        return vocabulary.Name(max_len=255).check(value)
    except vocabulary.Bad:
        raise vocabulary.Bad("be a disk's kernel name (nvme0n1) or the absolute path of its device node") from None
