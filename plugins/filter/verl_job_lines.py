# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the verl_job role: what it refuses before a submit, and what stop, status and the per-node logs print,
each from the results the role's modules registered (the modules decided; these put the lines together).

    {{ rendered | rlinfra.verl.on_end_refusal(on_end, api_key) }}                       run.yml: '' or the line
    {{ rendered | rlinfra.verl.replace_refusal(record_exists, api_key, ssh_key) }}      replace_kit.yml: '' or the line
    {{ stopped | rlinfra.verl.stop_line(submission_id, check_mode) }}                   stop.yml
    {{ polled | rlinfra.verl.status_lines(supervisor, fitness_lines, loaded, name) }}   status.yml
    {{ report | rlinfra.verl.node_logs_lines(submission_id, bundle, causes, amended, check_mode) }}   node_logs.yml
    {{ rendered | rlinfra.verl.preflight_lines(cluster, name, dry_run) }}              main.yml: the cluster, the checks
    {{ verl_job_result | rlinfra.verl.failure_line(causes, bundle) }}                  run.yml: why the run failed
    {{ merged | rlinfra.verl.merge_result(experiment, check_mode) }}                   merge.yml: verl_job_merge_result
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NOT_SUBMITTED = "status:        NOT SUBMITTED (no job %s on Ray cluster %s): ansible-playbook submit.yml -e exp=%s"
NO_API_KEY = "neither HYPERBOLIC_API_KEY (the controller's environment) nor verl_job_hyperbolic_api_key is set"


def _supervised(rendered: Mapping[str, Any]) -> bool:
    """Whether the run's supervisor watches it on the head (wait.supervise: cluster, the default)."""
    return (rendered.get("wait") or {}).get("supervise", "cluster") == "cluster"


def on_end_refusal(rendered: Mapping[str, Any], on_end: str, api_key: str = "") -> str:
    """'' when the run can give its machines back as ``on_end`` says (``keep`` always can), else the line refusing the
    submit: the supervisor gives them back, with the Hyperbolic API key."""
    if on_end == "keep":
        return ""
    if not _supervised(rendered):
        return (
            "on_end: %s needs the run's supervisor on the head (wait.supervise: cluster), which gives the machines back "
            "when the run ends; set wait.supervise: cluster or on_end: keep; nothing was submitted" % on_end
        )
    if not api_key:
        return (
            "on_end: %s gives the rentals back through the Hyperbolic API, and %s: set one, or -e on_end=keep; nothing "
            "was submitted" % (on_end, NO_API_KEY)
        )
    return ""


def replace_refusal(rendered: Mapping[str, Any], record_exists: bool, api_key: str = "", ssh_key: str = "") -> str:
    """'' when recovery.replace can work, else one line with every reason it cannot: the supervisor replaces machines,
    rented by provision.yml (the head holds the label's record), with the API key and a dedicated SSH key."""
    cluster = rendered.get("cluster")
    reasons = [
        "the run's supervisor on the head replaces machines: set wait.supervise: cluster"
        if not _supervised(rendered)
        else "",
        "cluster %s was not rented by provision.yml (the head has no /etc/rlinfra/hyperbolic-%s.json): on SSH hosts and "
        "Slurm, bring a lost machine back by hand (site.yml --limit)" % (cluster, cluster)
        if not record_exists
        else "",
        NO_API_KEY if not api_key else "",
        "hyperbolic_replace_ssh_key is not set: name the private key (on the controller) of an SSH key the account's "
        "machines accept, kept for this (never your own key: it goes to the head)"
        if not ssh_key
        else "",
    ]
    reasons = [r for r in reasons if r]
    return "recovery.replace: %s; nothing was submitted" % "; ".join(reasons) if reasons else ""


def stop_line(stopped: Mapping[str, Any], submission_id: str, check_mode: bool = False) -> str:
    """What stop.yml says of the result of rlinfra.verl.ray_job (state=stopped, run=true)."""
    if not stopped.get("found"):
        return "job %s does not exist (not submitted, or deleted)" % submission_id
    sid, status = stopped.get("submission_id"), stopped.get("status")
    if stopped.get("changed") and check_mode:
        return "check mode: %s is %s and would be stopped; nothing was stopped" % (sid, status)
    if stopped.get("changed"):
        return "stopped %s, now %s; a resubmission (-e run=N) resumes from the last checkpoint" % (sid, status)
    return "job %s was not running (%s)" % (sid, status)


def status_lines(
    polled: Mapping[str, Any],
    supervisor: Mapping[str, Any],
    fitness_lines: Sequence[str],
    loaded: Mapping[str, Any],
    experiment: str,
) -> list[str]:
    """What status.yml prints: the fitness lines, then the run's summary, its attempts, what its supervisor said and the
    log's tail (rlinfra.verl.ray_job_poll with run=true, rlinfra.verl.ray_run_supervisor state=read); or how to submit
    it when it never was."""
    lines = list(fitness_lines or [])
    if not polled.get("attempts"):
        return lines + [NOT_SUBMITTED % (loaded.get("submission_id"), loaded.get("cluster"), experiment)]
    return (
        lines
        + list(polled.get("summary") or [])
        + [a.get("line") for a in polled["attempts"]]
        + list(supervisor.get("report") or [])
        + ["log tail of %s:" % polled.get("submission_id")]
        + str(polled.get("logs_tail") or "").splitlines()
    )


def node_logs_lines(
    report: Mapping[str, Any],
    submission_id: str,
    bundle: str,
    causes: Sequence[str] = (),
    amended: Mapping[str, Any] | None = None,
    check_mode: bool = False,
) -> list[str]:
    """What node_logs.yml prints: where the bundles went, a line per node (rlinfra.verl.node_logs_report), what the
    logs say (rlinfra.verl.run_causes) and the run report that rlinfra.verl.run_report amended."""
    job = " (Ray job %s)" % report["job_id"] if report.get("job_id") else ""
    lines = [
        "Per-node logs of %s%s: %s/<host>/%s"
        % (submission_id, job, bundle, " (check mode: nothing fetched)" if check_mode else "")
    ]
    lines += list(report.get("lines") or [])
    if causes:
        lines += ["what the logs say:"] + ["  " + c for c in causes]
    if (amended or {}).get("changed"):
        lines.append(
            "report: %s (%d kernel event(s) of the run added)" % (amended["path"], len(amended.get("events") or []))
        )
    return lines


def preflight_lines(
    rendered: Mapping[str, Any], cluster: Mapping[str, Any] | None, name: str = "", dry_run: bool = False
) -> list[str]:
    """Cluster ``name`` as rlinfra.verl.ray_cluster_info found it (not in a dry run, which never contacts it), then the
    preflight's lines (rlinfra.verl.verl_experiment_render)."""
    head = []
    if not dry_run:
        cluster = cluster or {}
        head = [
            "Ray cluster %s at %s: %s alive node(s), %s GPU(s), %s CPU(s)"
            % (
                name,
                cluster.get("address"),
                cluster.get("alive_nodes"),
                cluster.get("total_gpus"),
                cluster.get("total_cpus"),
            )
        ]
    return head + list((rendered.get("preflight") or {}).get("lines") or [])


def failure_line(result: Mapping[str, Any], causes: Sequence[str] | None = None, bundle: str | None = None) -> str:
    """Why a run failed, in one line: the wait's own line (filter rlinfra.verl.job_result), what the logs say
    (rlinfra.verl.run_causes), then where its driver log and the nodes' logs are."""
    line = str(result.get("msg"))
    if causes:
        line += ": " + "; ".join(causes)
    if result.get("log_path"):
        line += " - driver log: %s" % result["log_path"]
    if bundle is not None:
        line += " - node logs: %s" % bundle
    return line


def merge_result(merged: Mapping[str, Any], experiment: str, check_mode: bool = False) -> dict[str, Any]:
    """``verl_job_merge_result`` from the result of rlinfra.verl.verl_merge: ``merged`` is false in check mode."""
    return dict(
        experiment=experiment,
        step=merged.get("step"),
        source=merged.get("source"),
        target=merged.get("target"),
        merged=bool(merged.get("merged")) and not check_mode,
        uploaded_to=merged.get("uploaded_to"),
    )


class FilterModule:
    def filters(self):
        return {
            "on_end_refusal": on_end_refusal,
            "replace_refusal": replace_refusal,
            "stop_line": stop_line,
            "status_lines": status_lines,
            "node_logs_lines": node_logs_lines,
            "preflight_lines": preflight_lines,
            "failure_line": failure_line,
            "merge_result": merge_result,
        }
