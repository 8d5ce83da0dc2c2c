# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of teardown.yml: ``rlinfra.verl.ray_teardown_refusal`` (whether running jobs forbid the
teardown, as one line) and ``rlinfra.verl.ray_teardown_unsafe_paths`` (paths a purge must never remove).

    {{ heads | rlinfra.verl.ray_teardown_refusal(hostvars, stop_jobs) }}
    {{ [ray_venv, ray_temp_dir] | rlinfra.verl.ray_teardown_unsafe_paths }}
"""

from __future__ import annotations

import posixpath

from ansible.errors import AnsibleFilterError

CHECK_FACT = "ray_teardown__check"
# The shared volume is kept by a teardown, and these hold far more than Ray.
KEEP = ("/data",)
SYSTEM = frozenset(("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt",
                    "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/workspace",
                    "/usr/local", "/var/lib", "/var/tmp", "/var/log", "/opt/rlinfra"))


def _checks(heads, hostvars):
    out = []
    for host in heads or []:
        try:
            check = hostvars[host].get(CHECK_FACT)
        except (KeyError, AttributeError):
            check = None
        out.append((host, check if isinstance(check, dict) else None))
    return out


def ray_teardown_refusal(heads, hostvars, stop_jobs=False):
    """'' when the teardown may go on; else one line naming the running jobs (or the clusters whose jobs
    could not be listed while Ray runs) and the switch that allows it."""
    if stop_jobs:
        return ""
    running, unknown = [], []
    for host, check in _checks(heads, hostvars):
        if not check:
            continue  # unreachable head: its cluster is gone or cut off; nothing to stop there
        cluster = check.get("cluster") or "default"
        if check.get("error"):
            unknown.append("%s (head %s: %s)" % (cluster, host, check["error"]))
        for job in check.get("running") or []:
            running.append("%s (%s, cluster %s)" % (job.get("submission_id"), job.get("status"), cluster))
    if not running and not unknown:
        return ""
    parts = []
    if running:
        parts.append("%d job(s) still running: %s" % (len(running), ", ".join(running)))
    if unknown:
        parts.append("the jobs of Ray cluster(s) %s could not be listed" % "; ".join(unknown))
    return ("refusing to tear down Ray: %s; stop them first (stop.yml -e exp=NAME) or re-run with "
            "-e teardown_stop_jobs=true to stop them" % "; ".join(parts))


def ray_teardown_unsafe_paths(paths, keep=KEEP):
    """One line per path a purge must not remove: relative, '..', a system directory, the shared volume."""
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, (list, tuple)):
        raise AnsibleFilterError("ray_teardown_unsafe_paths expects a list of paths")
    problems = []
    for raw in paths:
        path = str(raw or "")
        norm = posixpath.normpath(path) if path else ""
        if not path.startswith("/"):
            problems.append("%r is not an absolute path" % path)
        elif ".." in path.split("/"):
            problems.append("%r contains '..'" % path)
        elif any(norm == k.rstrip("/") or norm.startswith(k.rstrip("/") + "/") for k in keep):
            problems.append("%r is on the shared volume (%s), which a teardown keeps" % (path, ", ".join(keep)))
        elif norm in SYSTEM:
            problems.append("%r is a system directory" % path)
        elif norm.count("/") < 2:
            problems.append("%r is a top-level directory (remove it by hand if you mean it)" % path)
    return problems


class FilterModule:
    def filters(self):
        return {"ray_teardown_refusal": ray_teardown_refusal, "ray_teardown_unsafe_paths": ray_teardown_unsafe_paths}
