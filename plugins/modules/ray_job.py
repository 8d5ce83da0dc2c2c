#!/usr/bin/python
# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_job
short_description: Submit, wait for, stop or delete a Ray job
version_added: 0.1.0
description:
  - Talks to the Ray Jobs REST API of a Ray head's dashboard over plain HTTP(S); needs only the
    Python standard library (no C(ray) package) on the host that runs it.
  - The O(submission_id) is the idempotency key. Submitting an id that already exists reports the
    existing job and changes nothing, including when another client wins a submit race.
  - With O(state=finished) the task fails when the job ends C(FAILED) or C(STOPPED), and the tail of
    its log is in the result. The newest verl progress line (C(step:N - key:value - ...)) found in the
    log is returned as RV(last_step) and RV(last_metrics).
author:
  - rlinfra maintainers (@rlinfra)
options:
  submission_id:
    description:
      - Unique id of the job; the idempotency key.
      - 1-200 letters, digits, C(_), C(.) or C(-), starting with a letter or digit; other ids are refused before
        any request (Ray can create a job whose id has a C(/), but never read, stop nor delete it).
    type: str
    required: true
  entrypoint:
    description:
      - Shell command that runs the job's driver.
      - Required to create a job; not needed to wait for, stop or delete an existing one.
      - Must not be empty or blank, and at most 131071 bytes, Linux's limit for one argument (Ray runs it
        with C(/bin/sh -c)).
    type: str
  runtime_env:
    description:
      - Ray runtime environment of the job (C(working_dir), C(env_vars), C(pip), ...).
      - Values of C(env_vars) in O(runtime_env) whose names look secret (containing C(TOKEN), C(KEY),
        C(SECRET), C(PASSWORD), C(CREDENTIAL) or C(AUTH)) are masked in the module's output.
      - C(env_vars) must be a mapping of names (without C(=)) to strings; numbers are turned into strings,
        booleans, nulls, lists and mappings are refused.
    type: dict
  metadata:
    description:
      - String key/value pairs attached to the job; numbers are converted to strings, booleans, nulls,
        lists and mappings are refused.
    type: dict
  entrypoint_num_cpus:
    description:
      - CPUs reserved for the driver (entrypoint) process.
    type: float
  entrypoint_num_gpus:
    description:
      - GPUs reserved for the driver (entrypoint) process.
    type: float
  entrypoint_memory:
    description:
      - Memory in bytes reserved for the driver (entrypoint) process.
    type: int
  entrypoint_resources:
    description:
      - Custom resources reserved for the driver (entrypoint) process, name to quantity.
      - C(CPU), C(GPU) and C(memory) are refused here; use O(entrypoint_num_cpus), O(entrypoint_num_gpus)
        and O(entrypoint_memory).
      - Every quantity (here and in the three options above) must be finite, not negative, and 0 or at
        least V(0.0001) (Ray's precision).
    type: dict
  state:
    description:
      - V(submitted) creates the job when that id does not exist yet, without waiting.
      - V(finished) does the same, then waits until the job is C(SUCCEEDED), C(FAILED) or C(STOPPED);
        the last two fail the task.
      - V(stopped) stops the job if it is pending or running and waits until it has ended.
      - V(absent) deletes the job's record; a job that is still running is stopped first.
    type: str
    choices: [submitted, finished, stopped, absent]
    default: submitted
  wait_timeout:
    description:
      - Seconds to wait for the job to end with O(state=finished), or to stop with O(state=stopped)
        and O(state=absent); at least V(1).
    type: int
    default: 3600
  stop_on_timeout:
    description:
      - With O(state=finished), stop the job when O(wait_timeout) passes; the task fails either way.
    type: bool
    default: true
  poll_interval:
    description:
      - Longest pause in seconds between two status polls while waiting; at least V(0.1).
      - Polls start 0.1 s after the submission and each pause is about a tenth of the time waited so far, up to
        this, so a short job's end is seen within a fraction of its run time.
    type: float
    default: 5
  logs_tail_lines:
    description:
      - Number of lines at the end of the job's log returned in RV(logs_tail), at most V(10000);
        V(0) skips fetching logs.
    type: int
    default: 50
  run:
    description:
      - With O(state=stopped) - O(submission_id) names a run (its first attempt); stop the run's newest attempt
        (C(<id>-aN), submitted by a recovery). RV(submission_id) names the attempt stopped.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Reports what would change; never submits, stops, deletes nor waits.
  diff_mode:
    support: none
    description: Nothing to diff; the module reports the job or cluster state instead.
notes:
  - Module-side connection errors and HTTP 5xx on reads are retried with backoff; a dashboard that is
    away for less than two minutes while waiting (for example a restarting head) does not fail the task.
  - An HTTP 401 or 403 from the dashboard fails at once with a message saying the token was rejected.
seealso:
  - module: rlinfra.verl.ray_cluster_info
  - name: Ray Jobs REST API
    description: The API this module speaks.
    link: https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
"""

EXAMPLES = r"""
- name: Submit a verl run and wait up to 6 hours for it
  rlinfra.verl.ray_job:
    address: "http://{{ ray_private_ip }}:8265"
    auth_token: "{{ ray_auth_token }}"
    submission_id: gsm8k-ppo-default
    entrypoint: python3 -m verl.trainer.main_ppo trainer.total_epochs=15
    runtime_env:
      working_dir: /data/code/verl-recipes
      env_vars:
        WANDB_API_KEY: "{{ wandb_api_key }}"
    entrypoint_num_cpus: 1
    state: finished
    wait_timeout: 21600
    poll_interval: 30
  register: run

- name: Show how far it got
  ansible.builtin.debug:
    msg: "step {{ run.last_step }}, score {{ run.last_metrics['critic/score/mean'] | default('n/a') }}"

- name: Submit without waiting (token from RAY_AUTH_TOKEN)
  rlinfra.verl.ray_job:
    address: http://10.0.0.5:8265
    submission_id: smoke-test
    entrypoint: python -c "import ray; ray.init(); print(ray.cluster_resources())"

- name: Stop a job
  rlinfra.verl.ray_job:
    address: http://10.0.0.5:8265
    submission_id: gsm8k-ppo-default
    state: stopped

- name: Forget a finished job so that its id can be submitted again
  rlinfra.verl.ray_job:
    address: http://10.0.0.5:8265
    submission_id: gsm8k-ppo-default
    state: absent
"""

RETURN = r"""
runtime:
  description:
    - How the target ran the code - V(script) (the module's code as a plain Python script through the connection, without
      Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself - the
      local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run - no
      pipelining, a path to expand on the target, an option the module refuses).
  returned: unless the task is async
  type: str
  sample: script
submission_id:
  description: The job's submission id.
  returned: always
  type: str
  sample: gsm8k-ppo-default
found:
  description: Whether the job exists on the cluster.
  returned: success
  type: bool
status:
  description:
    - Ray job status (C(PENDING), C(RUNNING), C(SUCCEEDED), C(FAILED), C(STOPPED)).
    - V(null) when the job does not exist (or would only be created, in check mode).
  returned: always
  type: str
  sample: SUCCEEDED
message:
  description: Ray's message about the job status.
  returned: always
  type: str
  sample: Job finished successfully.
start_time:
  description: When the job started, ISO 8601 in UTC.
  returned: always
  type: str
  sample: "2026-11-21T13:07:59.122Z"
end_time:
  description: When the job ended, ISO 8601 in UTC; V(null) while it runs.
  returned: always
  type: str
  sample: "2026-11-21T13:08:04.647Z"
duration_s:
  description: Seconds from start to end (or to now while the job runs).
  returned: always
  type: float
  sample: 5.525
driver_exit_code:
  description: Exit code of the entrypoint process once it has ended, else V(null).
  returned: always
  type: int
  sample: 0
logs_tail:
  description: The last O(logs_tail_lines) lines of the job's driver log, newline separated.
  returned: always
  type: str
  sample: "Running entrypoint for job smoke-test: echo hi\nhi"
last_step:
  description: Step number of the newest verl progress line in the log, V(null) if none.
  returned: always
  type: int
  sample: 120
last_metrics:
  description: Metrics on that progress line, as floats.
  returned: always
  type: dict
  sample: {"actor/pg_loss": -0.012, "critic/score/mean": 0.61}
dashboard_url:
  description: Link to the job's page in the Ray dashboard.
  returned: always
  type: str
  sample: http://10.0.0.5:8265/#/jobs/gsm8k-ppo-default
timed_out:
  description: True when O(wait_timeout) passed before the job ended.
  returned: when state is finished
  type: bool
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    DASHBOARD_ARGS,
    MAX_ARG_BYTES,
    MAX_LOGS_TAIL_LINES,
    MIN_POLL_INTERVAL,
    check_entrypoint,
    check_resources,
    check_runtime_env,
    string_values,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.job_run import run_job

ARGS = vocabulary.Args(
    submission_id=vocabulary.SubmissionId(required=True),
    entrypoint=vocabulary.Custom(
        "str",
        vocabulary.Custom.lines(check_entrypoint),
        [" \t ", "echo a\0b", "echo " + "x" * MAX_ARG_BYTES],
        "echo hi",
    ),
    runtime_env=vocabulary.Custom(
        "dict",
        vocabulary.Custom.lines(lambda v: check_runtime_env(v)[1]),
        [{"env_vars": ["A=1"]}, {"env_vars": {"A=B": "1"}}, {"env_vars": {"X": "a\0b"}}],
        {},
    ),
    metadata=vocabulary.Custom(
        "dict", vocabulary.Custom.lines(lambda v: string_values("metadata", v)[1]), [{"x": {"a": 1}}, {"x": None}], {}
    ),
    entrypoint_num_cpus=vocabulary.Number(0),
    entrypoint_num_gpus=vocabulary.Number(0),
    entrypoint_memory=vocabulary.Int(0),
    entrypoint_resources=vocabulary.Custom(
        "dict", vocabulary.Custom.lines(lambda v: check_resources(custom=v)), [{"GPU": 1}, {"accel": "lots"}], {}
    ),
    state=vocabulary.Choice(("submitted", "finished", "stopped", "absent"), default="submitted"),
    wait_timeout=vocabulary.Seconds(1, integer=True, default=3600, hint=" (use state=submitted not to wait)"),
    stop_on_timeout=vocabulary.Switch(default=True),
    poll_interval=vocabulary.Seconds(MIN_POLL_INTERVAL, default=5.0),
    logs_tail_lines=vocabulary.Int(0, MAX_LOGS_TAIL_LINES, default=50),
    run=vocabulary.Switch(default=False),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, run_job)


if __name__ == "__main__":
    main()
