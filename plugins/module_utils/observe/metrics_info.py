# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.ray_metrics_info on one node: what the role ray_metrics must know of the node
before its templates and services (docs/OBSERVABILITY.md), read in one call that changes nothing - the programs'
paths and the packages to install, whether apt-get and NVIDIA's DCGM exporter are there, the users the services run
as, the bcrypt hash each web config gets (the one it holds while it still verifies: a hash is salted, so a new one
each run would rewrite the file and restart the service every run), which of the collection's units exist (check mode
on a fresh node: nothing to restart) and already run enabled, which of the distribution's services are masked or
running, whether Prometheus's data directory is (or would be made) the collection's own, and what each of the
files the role writes holds (its digest, mode and owner: the role skips its templates when all are in place).

A ``SCRIPTED`` function (plugin_utils/node_script.py): ``(params, module)`` in, a dict out; standard library only."""

from __future__ import annotations

import grp
import hashlib
import os
import pwd
import stat
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeError):
        return ""


def _user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _name(getter: Any, number: int) -> str:
    try:
        return str(getter(number)[0])
    except KeyError:
        return str(number)


def file_state(path: str) -> dict[str, str] | None:
    """What ``path`` is (``file`` or ``directory``), its mode (``0644``), owner and group, and a file's SHA-1 (what
    Ansible's ``hash('sha1')`` gives of the content the role would write); None when it does not exist or is something
    else (a link included: the role's file tasks would replace it)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None
    found = dict(
        type="directory" if stat.S_ISDIR(st.st_mode) else "file",
        mode="%04o" % stat.S_IMODE(st.st_mode),
        owner=_name(pwd.getpwuid, st.st_uid),
        group=_name(grp.getgrgid, st.st_gid),
    )
    if found["type"] == "file":
        digest = hashlib.sha1()
        try:
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 16), b""):
                    digest.update(block)
        except OSError:
            return None
        found["sha1"] = digest.hexdigest()
    return found


def info(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """What this node has and needs for its metrics (node_exporter; with ``prometheus``, the head's Prometheus too)."""
    kinds = ["exporter"] + (["prometheus"] if params["prometheus"] else [])
    directory = os.path.join(params["config_dir"], "metrics")
    binaries = {kind: module.get_bin_path(metrics.BINARIES[kind]) or "" for kind in kinds}
    if params["prometheus"] and not _user(params["prometheus_user"]):
        return dict(failed=True, msg="user %s does not exist on this node" % params["prometheus_user"])
    bcrypt = metrics.Bcrypt()
    try:
        hashes = {
            kind: metrics.kept_hash(
                _read(os.path.join(directory, metrics.WEB_CONFIGS[kind])), params["password"], bcrypt
            )
            for kind in kinds
        }
    except metrics.MetricsError as e:
        return dict(failed=True, msg="the metrics password cannot be hashed here: %s" % e)
    systemctl = module.get_bin_path("systemctl")

    def state(verb: str, unit: str) -> str:
        return module.run_command([systemctl, verb, unit])[1].strip() if systemctl else ""

    distro = [unit for kind in kinds for unit in metrics.DISTRO_UNITS[kind]]
    units = {"exporter": metrics.EXPORTER_UNIT, "prometheus": metrics.PROMETHEUS_UNIT}
    return dict(
        changed=False,
        binaries=binaries,
        missing=[metrics.PACKAGES[kind] for kind in kinds if not binaries[kind]],
        apt=bool(module.get_bin_path("apt-get")),
        dcgm=bool(module.get_bin_path(metrics.BINARIES["dcgm"])),
        # The Debian package makes the user; root where the node has none (yet: read again after an install).
        exporter_user=params["exporter_user"] if _user(params["exporter_user"]) else "root",
        hashes=hashes,
        units={kind: os.path.exists(os.path.join(params["unit_dir"], units[kind])) for kind in kinds},
        # Already as the role leaves them: their tasks are skipped (a converge that changes nothing asks systemd once).
        running={
            kind: state("is-active", units[kind]) == "active" and state("is-enabled", units[kind]) == "enabled"
            for kind in kinds
        },
        distro_masked=[unit for unit in distro if state("is-enabled", unit) == "masked"],
        distro_active=[unit for unit in distro if state("is-active", unit) == "active"],
        # Made by the collection when missing or empty (and so removed by a purge); someone else's otherwise.
        storage_ours=bool(params["storage_dir"]) and owned.claim(params["storage_dir"], check_mode=True),
        files={path: file_state(path) for path in params["files"]},
    )
