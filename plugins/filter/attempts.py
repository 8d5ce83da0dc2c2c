# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters over a cluster's job list (``ray_cluster_info`` with ``jobs: true``):

    {{ jobs | rlinfra.verl.newest_attempt(base_id) }}          the run's newest attempt, or none
    {{ jobs | rlinfra.verl.attempts_of(base_id) }}             the run's attempts, each with a line
    {{ jobs | rlinfra.verl.checkpoint_holder(dir, base_id) }}  an active job of another run writing dir
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.attempts import attempt_number, attempts_of, newest_attempt
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import ACTIVE_STATUSES


def attempts_with_lines(jobs, base):
    """The run's attempts, oldest first, each with a ``line`` to print."""
    out = []
    for job in attempts_of(jobs, base):
        why = (job.get("metadata") or {}).get("rlinfra_recovered_from")
        job["line"] = "attempt %d: %s %s, started %s, ended %s%s" % (
            job["attempt"], job["submission_id"], job.get("status"), job.get("start_time") or "-",
            job.get("end_time") or "-", " (resubmitted after %s)" % why.replace("_", " ") if why else "")
        out.append(job)
    return out


def checkpoint_holder(jobs, checkpoint_dir, base):
    """The first PENDING/RUNNING job that is not an attempt of ``base`` but writes ``checkpoint_dir``
    (its ``rlinfra_checkpoint_dir`` metadata), or None."""
    want = str(checkpoint_dir or "").rstrip("/")
    for job in jobs or []:
        meta = job.get("metadata") or {}
        if job.get("status") in ACTIVE_STATUSES and attempt_number(job.get("submission_id"), base) is None \
                and str(meta.get("rlinfra_checkpoint_dir") or "").rstrip("/") == want and want:
            return job
    return None


class FilterModule:
    def filters(self):
        return {"newest_attempt": newest_attempt, "checkpoint_holder": checkpoint_holder,
                "attempts_of": attempts_with_lines}
