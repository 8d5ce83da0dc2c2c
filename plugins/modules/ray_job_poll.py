#!/usr/bin/python
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
  log_offset:
    description:
      - Read the driver log from this byte offset on - the RV(log_offset) of the previous call; V(0) for the start. Only
        the new whole lines come back, in RV(log_chunk) (at most 8 MiB a call; call again while RV(log_offset) is below
        RV(log_size)), so a poll costs the same at hour 72 as at hour 1. RV(logs_tail) is then read back from the
        log's end and RV(last_step) is the newest step of RV(log_chunk); O(full_log_at_end) is not used.
      - On the head (its C(rlinfra_ray) local fact names this dashboard and Ray's temp dir) the file
        C(session_latest/logs/job-driver-<submission_id>.log) is read directly; elsewhere the log comes whole from
        Ray's API and only its new part is returned (RV(log_source) says which).
      - Not set - the log's tail only, read whole (the default).
    type: int
  log_file_id:
    description:
      - The RV(log_file_id) of the previous call with O(log_offset); when the log is another file now (a new session,
        the job submitted again) or shorter than O(log_offset), it is read from 0 again (RV(log_reset)).
    type: str
    default: ""
seealso:
  - module: rlinfra.verl.ray_job_wait
  - module: rlinfra.verl.ray_job
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
  - rlinfra.verl.attributes.read_only
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
runtime:
  description:
    - How the target ran the code - V(script) (the module's code as a plain Python script through the connection, without
      Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself - the
      local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run - no
      pipelining, a path to expand on the target, an option the module refuses).
  returned: always
  type: str
  sample: script
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
log_chunk:
  description:
    - With O(log_offset) - the log's whole lines after it (secrets masked); a line still being written waits for the
      next call, except once the job has ended.
  returned: when log_offset is set
  type: str
log_offset:
  description: With O(log_offset) - where the next call reads from (the byte after RV(log_chunk)).
  returned: when log_offset is set
  type: int
log_size:
  description: With O(log_offset) - the log's size in bytes now; RV(log_offset) below it means more to read.
  returned: when log_offset is set
  type: int
log_file_id:
  description: With O(log_offset) - which file was read, for the next call's O(log_file_id).
  returned: when log_offset is set
  type: str
log_reset:
  description: With O(log_offset) - the log was read from 0 again (another file, or a shorter one than the offset).
  returned: when log_offset is set
  type: bool
log_source:
  description:
    - With O(log_offset) - V(file) (the driver log file on this host, read from the offset), V(ray_api) (Ray's API,
      the whole log read on the head) or V(none) (the job is unknown).
  returned: when log_offset is set
  type: str
last_step:
  description: Newest verl step in the log (with O(log_offset), in RV(log_chunk)), or null.
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    DASHBOARD_ARGS,
    MIN_POLL_INTERVAL,
    check_runtime_env,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.job_poll import concealed, poll

ARGS = vocabulary.Args(
    submission_id=vocabulary.SubmissionId(required=True),
    timeout=vocabulary.Seconds(0, integer=True, default=0),
    poll_interval=vocabulary.Seconds(MIN_POLL_INTERVAL, default=2.0),
    # No upper bound: ray_job_wait reads the whole log through it, to save it.
    logs_tail_lines=vocabulary.Int(0, default=50, hint=" (0 does not read the log)"),
    # The job's runtime_env, by ray_job's rule. Not no_log: Ansible would then mask every value in it
    # (PYTHONUNBUFFERED's "1" too) wherever it appears in the result; the secret values are added to
    # no_log_values by name (module_utils/ray/job_poll.py: concealed, poll).
    runtime_env=vocabulary.Custom(
        "dict",
        vocabulary.Custom.lines(lambda v: check_runtime_env(v)[1]),
        [{"env_vars": ["A=1"]}, {"env_vars": {"A=B": "1"}}, {"env_vars": {"X": "a\0b"}}, {"working_dir": ""}],
        {},
    ),
    secret_names=vocabulary.ListOf(vocabulary.EnvName(), default=[], no_log=False),  # names; their values are masked
    run=vocabulary.Switch(default=False),
    full_log_at_end=vocabulary.Switch(default=False),
    # Incremental reading (ray_job_wait keeps both per attempt): unset reads the tail the old way.
    log_offset=vocabulary.Int(0),
    log_file_id=vocabulary.Text(
        default="",
        max_len=200,
        pattern=r"^[A-Za-z0-9_.:@-]*$",
        what="a log_file_id that ray_job_poll returned (letters, digits, _ . : @ -)",
    ),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, poll, concealed=concealed)


if __name__ == "__main__":
    main()
