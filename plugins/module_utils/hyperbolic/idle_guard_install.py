# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.idle_guard``'s work on the head: the idle guard (module_utils/hyperbolic/idle_guard.py, installed by
the role ray_head's templates) removed - its timer and service, its configuration, its program's directory. Standard
library only."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned

NAME = "rlinfra-idle-guard"
# What marks the guard's directory as the collection's, so a root set to a directory of other things is refused, not
# emptied: the program the role ray_head copies there (roles/ray_head/tasks/idle_guard.yml), or the package tree
# earlier versions copied.
ROOT_MARKERS = ("idle-guard.py", "ansible_collections")


def systemctl(module: Any, *args: str) -> None:
    """``systemctl ARGS``; a failure fails the module, in one line."""
    rc, out, err = module.run_command([module.get_bin_path("systemctl", required=True)] + list(args))
    if rc != 0:
        module.fail_json(msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | ")))


def absent(module: Any, p: Mapping[str, Any]) -> list[str]:
    """The guard's units, configuration and code removed (its code directory only when it is its own); what went."""
    if os.path.isdir(p["root"]):
        try:
            owned.check(p["root"], ROOT_MARKERS, what="idle guard's code directory", verb="remove")
        except owned.NotOurs as e:
            module.fail_json(msg=str(e), changed=False)
    paths = [
        os.path.join(p["unit_dir"], NAME + ".timer"),
        os.path.join(p["unit_dir"], NAME + ".service"),
        p["config_path"],
    ]
    there = [x for x in paths if os.path.exists(x)] + ([p["root"]] if os.path.isdir(p["root"]) else [])
    config_dir = os.path.dirname(p["config_path"])
    if not there and os.path.isdir(config_dir) and not os.listdir(config_dir):
        # left empty without the guard (teardown.yml -e release=true removed the rentals' record from it): rmdir only
        # ever removes an empty directory
        if not module.check_mode:
            os.rmdir(config_dir)
        return [config_dir]
    if module.check_mode or not there:
        return there
    if os.path.exists(paths[0]):
        module.run_command([module.get_bin_path("systemctl", required=True), "disable", "--now", NAME + ".timer"])
    for path in there:
        if path == p["root"]:
            owned.remove(path, ROOT_MARKERS, what="idle guard's code directory")
        else:
            os.unlink(path)
    if os.path.isdir(config_dir) and not os.listdir(config_dir):
        os.rmdir(config_dir)
    systemctl(module, "daemon-reload")
    return there


def remove(module: Any) -> None:
    """The module's work, with its AnsibleModule (``state=absent``, its only state): exits through ``module``."""
    files = absent(module, module.params)
    module.exit_json(changed=bool(files), files=files)
