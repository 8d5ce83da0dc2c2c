# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter of teardown.yml: ``rlinfra.verl.ray_teardown_refusal`` (whether running jobs forbid the teardown, as one
line). What a purge may remove is rlinfra.verl.owned_dir's rule (module_utils/common/owned.py).

    {{ heads | rlinfra.verl.ray_teardown_refusal(hostvars, stop_jobs) }}
"""

from __future__ import annotations

CHECK_FACT = "ray_teardown__check"


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
    return (
        "refusing to tear down Ray: %s; stop them first (stop.yml -e exp=NAME) or re-run with "
        "-e teardown_stop_jobs=true to stop them" % "; ".join(parts)
    )


class FilterModule:
    def filters(self):
        return {"ray_teardown_refusal": ray_teardown_refusal}
