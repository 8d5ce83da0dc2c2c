# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a teardown (roles/ray/tasks/teardown.yml) takes off a node that no other module of the collection owns:

* :func:`units_absent` (module ``rlinfra.verl.systemd_units``): systemd units stopped, disabled, their files removed,
  systemd told, and their failed state cleared (``ray stop``, Ray's ExecStop, ends ``ray start --block`` with an error
  status, which systemd would remember as "failed" for a unit that no longer exists);
* :func:`config_absent` (module ``rlinfra.verl.ray_config_dir``): the collection's files in Ray's configuration
  directory (:data:`OURS`), then the directory itself when nothing of anyone else's is left in it.

Each looks before it acts, so a node whose Ray is gone already reports nothing changed; in check mode each says what
would go. Standard library only (plugin_utils/node_script.py)."""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from collections.abc import Mapping
from typing import Any

UNIT_DIR = "/etc/systemd/system"
# systemctl is-active: a unit in one of these states is stopped before it goes.
RUNNING = ("active", "activating", "reloading")
# The collection's own entries of ray_config_dir: the token, the environment files, the registry's credentials and every
# rlinfra-* record (rlinfra-state.json, ...). Anything else (a user's TLS certificates, say) stays, and so does the
# directory then.
OURS = re.compile(r"^(auth_token|ray\.env|ray-secrets\.env|registry|rlinfra-.*)$")


def matching_units(names: list[str], unit_dir: str = UNIT_DIR) -> list[str]:
    """The unit files of ``unit_dir`` that ``names`` (file names or shell patterns) name, in that order, each once."""
    try:
        present = sorted(os.listdir(unit_dir))
    except OSError:
        return []
    out: list[str] = []
    for name in names:
        for found in fnmatch.filter(present, name):
            if found not in out and os.path.lexists(os.path.join(unit_dir, found)):
                out.append(found)
    return out


def _systemctl(module: Any, path: str, *args: str) -> tuple[int, str]:
    rc, out, err = module.run_command([path] + list(args))
    return rc, (out if rc == 0 else (err or out)).strip()


def units_absent(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``systemd_units`` module's work (``state=absent``): each unit ``names`` finds in ``unit_dir`` stopped when it
    runs, disabled when enabled, its file removed; then one daemon-reload and a reset-failed of each removed unit."""
    unit_dir = params.get("unit_dir") or UNIT_DIR
    units = matching_units(list(params["names"]), unit_dir)
    result: dict[str, Any] = dict(changed=bool(units), removed=units, stopped=[], disabled=[])
    if not units:
        return result
    systemctl = module.get_bin_path("systemctl", required=True)
    for unit in units:
        if _systemctl(module, systemctl, "is-active", unit)[1] in RUNNING:
            result["stopped"].append(unit)
            if not module.check_mode:
                rc, said = _systemctl(module, systemctl, "stop", unit)
                if rc != 0:
                    return dict(result, failed=True, msg="Unable to stop service %s: %s" % (unit, said))
        # As systemd_service reads it: is-enabled answers 0 for a unit that starts at boot.
        if _systemctl(module, systemctl, "is-enabled", unit)[0] == 0:
            result["disabled"].append(unit)
            if not module.check_mode:
                rc, said = _systemctl(module, systemctl, "disable", unit)
                if rc != 0:
                    return dict(result, failed=True, msg="Unable to disable service %s: %s" % (unit, said))
    if module.check_mode:
        return result
    for unit in units:
        os.unlink(os.path.join(unit_dir, unit))
    # Before the reset-failed: systemd forgets a removed unit only once it has reloaded.
    rc, said = _systemctl(module, systemctl, "daemon-reload")
    if rc != 0:
        return dict(result, failed=True, msg="systemctl daemon-reload failed: %s" % said)
    for unit in units:
        _systemctl(module, systemctl, "reset-failed", unit)  # nothing to clear is no fault
    return result


def sort_config(path: str) -> tuple[list[str], list[str]]:
    """``(ours, others)``: the full paths of the entries of the directory ``path`` that :data:`OURS` names, and the
    rest; both empty when it is not a directory."""
    if not os.path.isdir(path):
        return [], []
    ours: list[str] = []
    others: list[str] = []
    for name in sorted(os.listdir(path)):
        (ours if OURS.match(name) else others).append(os.path.join(path, name))
    return ours, others


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def config_absent(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``ray_config_dir`` module's work (``state=absent``): the collection's entries of ``path`` and each of
    ``files`` removed, then ``path`` itself when nothing else is in it; ``kept``: what else it holds."""
    path = params["path"]
    ours, kept = sort_config(path)
    gone = ours + [f for f in params.get("files") or [] if os.path.lexists(f)]
    whole = os.path.isdir(path) and not kept
    result = dict(changed=bool(gone) or whole, removed=gone + ([path] if whole else []), kept=kept)
    if module.check_mode:
        return result
    try:
        for entry in gone:
            _remove(entry)
        if whole:
            os.rmdir(path)
    except OSError as e:
        return dict(result, failed=True, msg="%s could not be removed: %s" % (e.filename or path, e.strerror or e))
    return result
