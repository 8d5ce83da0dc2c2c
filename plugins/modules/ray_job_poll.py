#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_job_poll
short_description: Read a Ray job and the cluster's nodes, watching them for a while
version_added: 0.2.0
description:
  - Reads a Ray job (status, newest verl step and metrics, log tail) and every node the cluster knows,
    in one call on the host that can reach the dashboard. With O(timeout), keeps polling until the job
    ends, disappears, a node that was alive stops being alive, the dashboard stops answering, or
    O(timeout) seconds pass, whichever comes first.
  - Never fails because the job is unknown or the dashboard is unreachable; it says so in
    RV(found) and RV(reachable) so that a watcher (M(rlinfra.verl.ray_job_wait)) can decide. It fails
    when the token is rejected.
  - The building block of M(rlinfra.verl.ray_job_wait)'s watchdog.
author:
  - rlinfra maintainers (@rlinfra)
options:
  submission_id:
    description:
      - The job to read; 1-200 letters, digits, C(_), C(.) or C(-), starting with a letter or digit.
    type: str
    required: true
  timeout:
    description: Seconds to keep watching, not negative; V(0) reads once.
    type: int
    default: 0
  poll_interval:
    description:
      - Longest pause in seconds between two reads while watching; at least V(0.1).
      - The pause is about a tenth of the job's age so far (0.1 s at its start) up to this, so a short job's end is seen at once.
    type: float
    default: 2
  logs_tail_lines:
    description: Lines of the driver log returned in RV(logs_tail), not negative; V(0) does not read the log.
    type: int
    default: 50
  runtime_env:
    description:
      - The job's runtime_env; only the values of its C(env_vars) with secret-looking names (or named in
        O(secret_names)) are used, to mask them in everything returned (the invocation included).
    type: dict
  secret_names:
    description: Names of C(env_vars) of O(runtime_env) whose values are masked whatever their names look like.
    type: list
    elements: str
    default: []
  run:
    description:
      - O(submission_id) names a run - its first attempt. Read the run's newest attempt (C(<id>-aN), submitted by a
        recovery) and return RV(attempts); a run with no attempt returns RV(found=false) and an empty RV(attempts).
    type: bool
    default: false
  full_log_at_end:
    description:
      - When the job has ended, also return its whole driver log in RV(full_log), read in the same call (a watcher
        that keeps the log needs no second call).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Nothing to diff.
seealso:
  - module: rlinfra.verl.ray_job_wait
  - module: rlinfra.verl.ray_job
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
"""

EXAMPLES = r"""
- name: Read the job and the nodes once
  rlinfra.verl.ray_job_poll:
    address: http://10.0.0.5:8265
    submission_id: rlinfra-smoke-default
  register: poll

- name: The same on the head, with the dashboard and token of its rlinfra_ray local fact
  rlinfra.verl.ray_job_poll:
    submission_id: rlinfra-smoke-default
  become: true

- name: Watch it for up to a minute (returns early when a node leaves or the job ends)
  rlinfra.verl.ray_job_poll:
    address: http://10.0.0.5:8265
    submission_id: rlinfra-smoke-default
    timeout: 60
"""

RETURN = r"""
attempts:
  description: With O(run) - the run's attempts, oldest first, each with C(attempt), C(submission_id), C(status) and a C(line) to print.
  returned: when run is true
  type: list
  elements: dict
found:
  description: Whether the dashboard knows the job (false also when it was unreachable).
  returned: always
  type: bool
reachable:
  description: Whether the dashboard answered.
  returned: always
  type: bool
error:
  description: Why the dashboard could not be read, when RV(reachable) is false.
  returned: always
  type: str
status:
  description: Ray job status, or V(null) when the job was not found.
  returned: always
  type: str
  sample: RUNNING
message:
  description: Ray's message about the job.
  returned: always
  type: str
job_id:
  description: Ray's hex job id (names the job's worker log files).
  returned: always
  type: str
  sample: "02000000"
metadata:
  description: The job's metadata.
  returned: always
  type: dict
start_time:
  description: Start of the job, ISO 8601 UTC.
  returned: always
  type: str
end_time:
  description: End of the job, ISO 8601 UTC, or null.
  returned: always
  type: str
duration_s:
  description: Seconds the job has run.
  returned: always
  type: float
driver_exit_code:
  description: Exit code of the entrypoint once it ended.
  returned: always
  type: int
logs_tail:
  description: End of the driver log, secrets masked.
  returned: always
  type: str
full_log:
  description: The whole driver log, secrets masked; only when O(full_log_at_end) is set and the job has ended.
  returned: when the job ended and O(full_log_at_end=true)
  type: str
last_step:
  description: Newest verl step in the log, or null.
  returned: always
  type: int
last_metrics:
  description: Metrics of that step.
  returned: always
  type: dict
nodes:
  description: Every node the cluster knows, dead ones included (node_id, node_ip, node_name, is_head, state, resources).
  returned: always
  type: list
  elements: dict
dashboard_url:
  description: Link to the job in the dashboard.
  returned: always
  type: str
address:
  description: The dashboard URL the module talked to (O(address), or the C(rlinfra_ray) local fact's C(dashboard_url)).
  returned: success
  type: str
  sample: http://10.0.0.5:8265
summary:
  description: Status, submission id, duration, newest step and its key metrics, dashboard link - one line each, ready to print.
  returned: always
  type: list
  elements: str
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import (
    DASHBOARD_ARGUMENT_SPEC, MIN_POLL_INTERVAL, TERMINAL_STATUSES, RayAuthError, RayError, check_seconds,
    check_submission_id, check_tail_lines, client_from_module, ms_to_iso, poll_pauses, tail_lines)
from ansible_collections.rlinfra.verl.plugins.module_utils.attempts import with_lines
from ansible_collections.rlinfra.verl.plugins.module_utils.secret_names import secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.recovery import summary_lines
from ansible_collections.rlinfra.verl.plugins.module_utils.verl_log import last_progress

ARGUMENT_SPEC = dict(
    DASHBOARD_ARGUMENT_SPEC,
    submission_id=dict(type="str", required=True),
    timeout=dict(type="int", default=0),
    poll_interval=dict(type="float", default=2.0),
    logs_tail_lines=dict(type="int", default=50),
    # Not no_log: Ansible would then mask every value in it (PYTHONUNBUFFERED's "1" too) wherever it
    # appears in the result; the secret values are added to no_log_values by name in main().
    runtime_env=dict(type="dict"),
    secret_names=dict(type="list", elements="str", default=[], no_log=False),  # names; their values are masked
    run=dict(type="bool", default=False),
    full_log_at_end=dict(type="bool", default=False),
)


def read(client, sid):
    """(job or None, nodes, error): one look at the job and the nodes; error is set when the
    dashboard did not answer (the others are then empty)."""
    try:
        job = client.get_job(sid)
        nodes = client.list_nodes()
    except RayAuthError:
        raise
    except RayError as e:
        return None, [], str(e)
    return job, nodes, None


def alive_ids(nodes):
    return {n["node_id"] for n in nodes if n.get("state") == "ALIVE"}


def watch(client, sid, timeout, poll_interval, clock=time.monotonic, sleep=time.sleep):
    """Read until something a watcher must react to happens, or ``timeout`` passes."""
    deadline = clock() + max(0, timeout)
    job, nodes, error = read(client, sid)
    first_alive = alive_ids(nodes)
    # Each chunk of a long wait is a new module run: pick up the backoff where the job's age puts it.
    started = (job or {}).get("start_time")
    waited = time.time() - started / 1000.0 if isinstance(started, (int, float)) and started > 0 else 0.0
    pauses = poll_pauses(poll_interval, waited=waited)
    while error is None and job is not None and job.get("status") not in TERMINAL_STATUSES:
        if first_alive - alive_ids(nodes):
            break
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(next(pauses), remaining))
        job, nodes, error = read(client, sid)
    return job, nodes, error


def result(client, sid, job, nodes, error, tail, full_at_end=False):
    job = job or {}
    logs = ""
    full = full_at_end and job.get("status") in TERMINAL_STATUSES
    if job and (tail > 0 or full):
        try:
            logs = client.get_logs(sid)
        except RayError:
            logs = ""
    step, metrics = last_progress(logs)
    start, end = job.get("start_time"), job.get("end_time")
    duration = round(((end or time.time() * 1000) - start) / 1000.0, 3) if start else None
    out = dict(changed=False, submission_id=sid, found=bool(job), reachable=error is None, error=error or "",
               status=job.get("status"), message=job.get("message"), job_id=job.get("job_id"),
               metadata=job.get("metadata") or {}, start_time=ms_to_iso(start), end_time=ms_to_iso(end),
               duration_s=duration, driver_exit_code=job.get("driver_exit_code"), logs_tail=tail_lines(logs, tail),
               last_step=step, last_metrics=metrics, nodes=nodes, dashboard_url=client.job_url(sid),
               address=client.address)
    out["summary"] = summary_lines(dict(out, reason_line=(job.get("message") or "").strip().splitlines()[0][:300]
                                        if job.get("message") and job.get("status") != "SUCCEEDED" else ""))
    out["summary"].append("dashboard:     %s" % out["dashboard_url"])
    if full:
        out["full_log"] = logs
    return out


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    env_vars = (p["runtime_env"] or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(secret_values(env_vars, p["secret_names"]))
    problems = check_seconds("timeout", p["timeout"], 0)
    problems += check_seconds("poll_interval", p["poll_interval"], MIN_POLL_INTERVAL)
    problems += check_tail_lines(p["logs_tail_lines"], maximum=None)
    try:
        check_submission_id(p["submission_id"])
    except RayError as e:
        problems.insert(0, str(e))
    if problems:
        module.fail_json(msg="\n".join(problems), submission_id=p["submission_id"], changed=False)
    try:
        client = client_from_module(module, retries=1)
        sid, extra = p["submission_id"], {}
        if p["run"]:
            # The run's newest attempt (recoveries submit <id>-aN); a run never submitted has none.
            attempts = with_lines(client.list_jobs(), sid)
            if not attempts:
                module.exit_json(changed=False, submission_id=sid, found=False, attempts=[], summary=[], logs_tail="",
                                 address=client.address)
            sid, extra = attempts[-1]["submission_id"], dict(attempts=attempts)
        job, nodes, error = watch(client, sid, p["timeout"], p["poll_interval"])
        module.exit_json(**dict(result(client, sid, job, nodes, error, p["logs_tail_lines"], p["full_log_at_end"]), **extra))
    except RayError as e:
        module.fail_json(msg=str(e), submission_id=p["submission_id"], **e.details())


if __name__ == "__main__":
    main()
