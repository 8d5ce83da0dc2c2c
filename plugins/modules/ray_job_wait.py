#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# Documentation only: the work is done by plugins/action/ray_job_wait.py, which runs
# rlinfra.verl.ray_job on the target host once per progress interval.

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_job_wait
short_description: Wait for a Ray job, printing its progress (latest verl step and metrics) as it runs
version_added: 0.1.0
description:
  - Waits for an existing Ray job in chunks of O(progress_interval) seconds, each one a run of
    M(rlinfra.verl.ray_job) with C(state=finished), C(stop_on_timeout=false) on the target host (the head),
    and prints one line per chunk - status, elapsed time, the newest C(step:N) line of the log and its key
    metrics - instead of a silent wait or C(FAILED - RETRYING) lines.
  - Fails when the job ends C(FAILED) or C(STOPPED), or is still running after O(timeout) (it is then left
    running unless O(stop_on_timeout)); the result carries the last status, step, metrics and log tail either way.
author:
  - rlinfra maintainers (@rlinfra)
options:
  submission_id:
    description: The job to wait for.
    type: str
    required: true
  timeout:
    description: Seconds to wait in all.
    type: int
    default: 86400
  progress_interval:
    description: Seconds between two progress lines (the length of one wait chunk).
    type: int
    default: 60
  poll_interval:
    description: Seconds between two status polls inside a chunk.
    type: float
    default: 5
  stop_on_timeout:
    description: Stop the job when O(timeout) passes.
    type: bool
    default: false
  logs_tail_lines:
    description: Lines of the log returned in RV(logs_tail).
    type: int
    default: 50
  runtime_env:
    description:
      - The job's runtime_env, passed on to M(rlinfra.verl.ray_job) only so that it masks the values of secret
        environment variables in log tails. Never logged.
    type: dict
  label:
    description: Prefix of the progress lines (default the submission id).
    type: str
    default: ""
  metrics:
    description: Metric names to show, first found first.
    type: list
    elements: str
    default: [critic/score/mean, critic/rewards/mean, reward/mean, actor/pg_loss, pg_loss, actor/entropy, response_length/mean, timing_s/step]
  max_metrics:
    description: At most this many metrics per line.
    type: int
    default: 5
attributes:
  check_mode:
    support: full
    description: One status read, no waiting.
  diff_mode:
    support: none
    description: Nothing to diff.
  action:
    support: full
    description: Runs as an action plugin on the controller, which calls modules on the target as needed.
seealso:
  - module: rlinfra.verl.ray_job
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
"""

EXAMPLES = r"""
- name: Wait for the run, one progress line a minute
  rlinfra.verl.ray_job_wait:
    address: http://10.0.0.5:8265
    auth_token: "{{ ray_auth_token }}"
    submission_id: rlinfra-gsm8k_grpo_qwen05b-default
    timeout: 86400
    progress_interval: 60
  no_log: true
  register: waited
# prints e.g.: gsm8k_grpo_qwen05b: RUNNING, 0:42:10, step:120 - critic/score/mean:0.61 - actor/pg_loss:-0.012
"""

RETURN = r"""
status:
  description: Last Ray job status.
  returned: always
  type: str
  sample: SUCCEEDED
message:
  description: Ray's message about the job.
  returned: always
  type: str
last_step:
  description: Newest verl step found in the log, or null.
  returned: always
  type: int
last_metrics:
  description: Metrics of that step.
  returned: always
  type: dict
logs_tail:
  description: End of the driver log.
  returned: always
  type: str
duration_s:
  description: Seconds the job has run.
  returned: always
  type: float
start_time:
  description: Start of the job, ISO 8601 UTC.
  returned: always
  type: str
end_time:
  description: End of the job, ISO 8601 UTC, or null.
  returned: always
  type: str
driver_exit_code:
  description: Exit code of the entrypoint once it ended.
  returned: always
  type: int
dashboard_url:
  description: Link to the job in the Ray dashboard.
  returned: always
  type: str
timed_out:
  description: The job was still running when O(timeout) passed.
  returned: always
  type: bool
chunks:
  description: Number of wait chunks (progress lines).
  returned: always
  type: int
waited_s:
  description: Seconds spent waiting.
  returned: always
  type: float
"""
