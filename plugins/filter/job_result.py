# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``{{ rendered | rlinfra.verl.job_result(submitted, waited, tail_lines) }}``: what submit.yml reports of one run
(``verl_job_result``, and its summary ``lines``), from the results of verl_experiment, verl_submit and
ray_job_wait. Everything was decided by those; this only puts it together."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.run_cost import (
    cost_line,
    node_prices,
    run_cost,
    run_seconds,
)

NOT_WAITED = "status:        not waited for (wait disabled): run status.yml for the experiment"
NOT_FOLLOWED = (
    "status:        not followed (wait disabled); the run's supervisor %s recovers it on the head: run "
    "status.yml for the experiment"
)


def job_result(rendered, submitted, waited=None, tail_lines=30, hosts=None, hostvars=None):
    rendered, submitted, waited = dict(rendered or {}), dict(submitted or {}), dict(waited or {})
    experiment = rendered.get("experiment") or {}
    code = rendered.get("code")
    was_waited = bool(waited) and not waited.get("skipped")
    # The wait's task sets failed_when false (so that the summary is printed): `succeeded` is its verdict.
    failed = was_waited and not waited.get("succeeded", False)
    out = dict(
        experiment=experiment.get("name"),
        cluster=rendered.get("cluster"),
        submission_id=waited.get("submission_id") or submitted.get("submission_id") or rendered.get("submission_id"),
        submitted=bool(submitted.get("submitted")),
        waited=was_waited,
        status=waited.get("status"),
        failed=failed,
        msg=waited.get("msg") or "the wait ended without a result (see above)",
        attempts=waited.get("attempts") or [],
        lost_nodes=waited.get("lost_nodes") or [],
        log_path=waited.get("log_path") or "",
        checkpoint_dir=rendered.get("checkpoint_dir"),
        code_commit=(code or {}).get("commit"),
    )
    out["cost"] = run_cost(node_prices(hosts, hostvars or {}), run_seconds(waited)) if was_waited and hosts else None
    priced = cost_line(out["cost"])
    head = "experiment:    %s (%s) on Ray cluster %s - %s" % (
        out["experiment"],
        experiment.get("framework"),
        out["cluster"],
        experiment.get("path"),
    )
    out["lines"] = (
        [head]
        + (
            list(waited.get("summary") or [])
            if was_waited
            else [NOT_FOLLOWED % waited["supervisor"]]
            if waited.get("supervisor")
            else [NOT_WAITED]
        )
        + ([priced] if priced else [])
        + (["code:          %s@%s (ref %s)" % (code["repo"], code["commit"], code["ref"])] if code else [])
        + [
            "checkpoints:   %s" % out["checkpoint_dir"],
            "artifacts:     %s" % (rendered.get("run_artifacts_dir") or ""),
            "dashboard:     %s" % (waited.get("dashboard_url") or ""),
        ]
    )
    tail = (waited.get("logs_tail") or "").splitlines()[-int(tail_lines) :] if failed and int(tail_lines) > 0 else []
    if tail:
        out["lines"] += ["end of the log of %s:" % out["submission_id"]] + tail
    return out


class FilterModule:
    def filters(self):
        return {"job_result": job_result}
