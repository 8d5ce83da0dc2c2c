# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.idle_guard``'s work on the head: the idle guard (module_utils/hyperbolic/idle_guard.py) installed -
its code below ``root``, its configuration, a systemd service and timer - or removed. Standard library only."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_if_changed

NAME = "rlinfra-idle-guard"
SERVICE = """[Unit]
Description=rlinfra.verl idle guard: release this cluster's Hyperbolic instances after %(after)ss without a Ray job
After=network-online.target

[Service]
Type=oneshot
Environment=PYTHONPATH=%(root)s
ExecStart=%(python)s -m ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.idle_guard %(config)s
"""
TIMER = """[Unit]
Description=rlinfra.verl idle guard, every %(every)ss

[Timer]
OnActiveSec=%(every)ss
OnUnitActiveSec=%(every)ss

[Install]
WantedBy=timers.target
"""


def systemctl(module: Any, *args: str) -> None:
    """``systemctl ARGS``; a failure fails the module, in one line."""
    rc, out, err = module.run_command([module.get_bin_path("systemctl", required=True)] + list(args))
    if rc != 0:
        module.fail_json(msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | ")))


def present(module: Any, p: Mapping[str, Any]) -> list[str]:
    """The guard's code, configuration and units written (as needed), its timer enabled; what changed."""
    missing = [n for n in ("label", "idle_release_after", "api_key", "dashboard_url", "files") if not p[n]]
    if missing:  # their values are checked by their types (ARGS)
        module.fail_json(
            msg="idle_guard: needs label, idle_release_after (seconds, from 1), api_key, dashboard_url and "
            "the code (files, from the action); missing: %s" % ", ".join(missing)
        )
    python = module.get_bin_path("python3", opt_dirs=["/usr/bin"])
    if not python:
        module.fail_json(msg="idle_guard: the head has no python3 to run the guard; install it (the OS package) first")
    written = []
    for rel, text in sorted(p["files"].items()):
        path = os.path.join(p["root"], rel)
        if not module.check_mode:
            makedirs(os.path.dirname(path), 0o755)
        if write_if_changed(path, text, 0o644, module.check_mode):
            written.append(path)
    config = dict(
        label=p["label"],
        idle_release_after=p["idle_release_after"],
        api_key=p["api_key"],
        api_url=p["api_url"],
        dashboard_url=p["dashboard_url"],
        token_path=p["token_path"],
    )
    if not module.check_mode:
        makedirs(os.path.dirname(p["config_path"]), 0o755)
    if write_if_changed(
        p["config_path"], json.dumps(config, sort_keys=True, indent=1) + "\n", 0o600, module.check_mode
    ):
        written.append(p["config_path"])
    values = dict(
        after=p["idle_release_after"], root=p["root"], python=python, config=p["config_path"], every=p["check_every"]
    )
    units = [
        (os.path.join(p["unit_dir"], NAME + ".service"), SERVICE % values),
        (os.path.join(p["unit_dir"], NAME + ".timer"), TIMER % values),
    ]
    unit_changed = [path for path, text in units if write_if_changed(path, text, 0o644, module.check_mode)]
    written += unit_changed
    if module.check_mode:
        return written
    if unit_changed:
        systemctl(module, "daemon-reload")
    rc, out, dummy = module.run_command(
        [module.get_bin_path("systemctl", required=True), "is-enabled", NAME + ".timer"]
    )
    if out.strip() != "enabled" or unit_changed:
        systemctl(module, "enable", "--now", NAME + ".timer")
        written.append(NAME + ".timer enabled")
    return written


# The guard's code directory holds the package tree the action sends (plugins/action/idle_guard.py's PACKAGE): what
# marks it as this module's, so a root set to a directory of other things is refused, not emptied.
ROOT_MARKER = "ansible_collections"


def absent(module: Any, p: Mapping[str, Any]) -> list[str]:
    """The guard's units, configuration and code removed (its code directory only when it is its own); what went."""
    if os.path.isdir(p["root"]):
        try:
            owned.check(p["root"], (ROOT_MARKER,), what="idle guard's code directory", verb="remove")
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
            owned.remove(path, (ROOT_MARKER,), what="idle guard's code directory")
        else:
            os.unlink(path)
    config_dir = os.path.dirname(p["config_path"])
    if os.path.isdir(config_dir) and not os.listdir(config_dir):
        os.rmdir(config_dir)
    systemctl(module, "daemon-reload")
    return there


def install(module: Any) -> None:
    """The module's work, with its AnsibleModule: :func:`present` or :func:`absent` by ``state``; exits through
    ``module``."""
    p = module.params
    files = present(module, p) if p["state"] == "present" else absent(module, p)
    module.exit_json(changed=bool(files), files=files)
