#!/usr/bin/python
# -*- coding: utf-8 -*-
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

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.attempts import newest_attempt
from ansible_collections.rlinfra.verl.plugins.module_utils.secret_names import secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import (
    DASHBOARD_ARGUMENT_SPEC, MIN_POLL_INTERVAL, TERMINAL_STATUSES, RayError, check_entrypoint,
    check_resources, check_runtime_env, check_seconds, check_submission_id, check_tail_lines, client_from_module,
    ms_to_iso, string_values, tail_lines)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl_log import last_progress

# Full logs can be large; while waiting they are only re-read this often (seconds).
PROGRESS_REFRESH = 60.0

ARGUMENT_SPEC = dict(
    DASHBOARD_ARGUMENT_SPEC,
    submission_id=dict(type="str", required=True),
    entrypoint=dict(type="str"),
    runtime_env=dict(type="dict"),
    metadata=dict(type="dict"),
    entrypoint_num_cpus=dict(type="float"),
    entrypoint_num_gpus=dict(type="float"),
    entrypoint_memory=dict(type="int"),
    entrypoint_resources=dict(type="dict"),
    state=dict(type="str", default="submitted", choices=["submitted", "finished", "stopped", "absent"]),
    wait_timeout=dict(type="int", default=3600),
    stop_on_timeout=dict(type="bool", default=True),
    poll_interval=dict(type="float", default=5.0),
    logs_tail_lines=dict(type="int", default=50),
    run=dict(type="bool", default=False),
)


class JobTask:
    def __init__(self, module, client):
        self.module = module
        self.client = client
        self.p = module.params
        self.sid = self.p["submission_id"]
        if self.p["run"]:
            # The run's newest attempt (recoveries submit <id>-aN), whichever still runs.
            newest = newest_attempt(client.list_jobs(), self.sid)
            self.sid = newest["submission_id"] if newest else self.sid
        self.changed = False
        self.progress = (None, {})
        self._progress_at = None

    def result(self, job, logs=None, **extra):
        job = job or {}
        start, end = job.get("start_time"), job.get("end_time")
        duration = None
        if start:
            duration = round(((end or time.time() * 1000) - start) / 1000.0, 3)
        if logs is None:
            logs = self.logs(job)
        if logs:
            self.progress = last_progress(logs)
        out = dict(changed=self.changed, submission_id=self.sid, found=bool(job), status=job.get("status"),
                   message=job.get("message"), start_time=ms_to_iso(start), end_time=ms_to_iso(end),
                   duration_s=duration, driver_exit_code=job.get("driver_exit_code"),
                   logs_tail=tail_lines(logs, self.p["logs_tail_lines"]), last_step=self.progress[0],
                   last_metrics=self.progress[1], dashboard_url=self.client.job_url(self.sid))
        out.update(extra)
        return out

    def logs(self, job):
        if not job or self.p["logs_tail_lines"] <= 0:
            return ""
        try:
            return self.client.get_logs(self.sid)
        except RayError as e:
            # The status is what the task is about; missing logs only deserve a warning.
            self.module.warn("could not read the logs of Ray job %s: %s" % (self.sid, e))
            return ""

    def on_poll(self, job):
        """Keep the newest verl progress while waiting, so a timeout or a lost head still reports it."""
        now = time.monotonic()
        if job.get("status") in TERMINAL_STATUSES or self.p["logs_tail_lines"] <= 0:
            return  # the final result reads the logs anyway
        if self._progress_at is None or now - self._progress_at >= PROGRESS_REFRESH:
            self._progress_at = now
            step, metrics = last_progress(self.logs(job))
            if step is not None:
                self.progress = (step, metrics)

    def wait(self, timeout, on_poll=None):
        return self.client.wait_for_job(self.sid, timeout, self.p["poll_interval"], on_poll=on_poll)

    def ensure_submitted(self, job):
        if job is not None:
            wanted = self.p["entrypoint"]
            if wanted and job.get("entrypoint") != wanted:
                self.module.warn("Ray job %s already exists with a different entrypoint; it was left as is "
                                 "(use a new submission_id to run the new command)" % self.sid)
            return job
        if not self.p["entrypoint"]:
            self.module.fail_json(msg="Ray job %s does not exist and no entrypoint was given to create it" % self.sid,
                                  **self.result(None, logs=""))
        self.changed = True
        if self.module.check_mode:
            return None
        created = self.client.submit_job(
            self.sid, self.p["entrypoint"], runtime_env=self.p["runtime_env"], metadata=self.p["metadata"] or None,
            entrypoint_num_cpus=self.p["entrypoint_num_cpus"], entrypoint_num_gpus=self.p["entrypoint_num_gpus"],
            entrypoint_memory=self.p["entrypoint_memory"], entrypoint_resources=self.p["entrypoint_resources"])
        # False means another client submitted the same id between our GET and POST.
        self.changed = created
        return self.client.get_job(self.sid)

    def stop_and_wait(self, job, timeout):
        if job.get("status") in TERMINAL_STATUSES:
            return job
        self.changed = True
        if self.module.check_mode:
            return job
        self.client.stop_job(self.sid)
        job, timed_out = self.wait(timeout)
        if timed_out:
            self.module.fail_json(msg="Ray job %s was asked to stop but is still %s after %ss"
                                  % (self.sid, job.get("status"), timeout), **self.result(job))
        return job

    def run(self):
        state = self.p["state"]
        job = self.client.get_job(self.sid)
        if state == "absent":
            if job is None:
                self.module.exit_json(**self.result(None, logs=""))
            job = self.stop_and_wait(job, self.p["wait_timeout"])
            self.changed = True
            if not self.module.check_mode:
                self.client.delete_job(self.sid)
            self.module.exit_json(**self.result(job, logs=""))
        if state == "stopped":
            if job is not None:
                job = self.stop_and_wait(job, self.p["wait_timeout"])
            self.module.exit_json(**self.result(job))

        job = self.ensure_submitted(job)
        if state == "submitted" or job is None:
            self.module.exit_json(**self.result(job))

        status = job.get("status")
        if status not in TERMINAL_STATUSES:
            if self.module.check_mode:
                self.module.exit_json(**self.result(job, timed_out=False))
            job, timed_out = self.wait(self.p["wait_timeout"], on_poll=self.on_poll)
            if timed_out:
                self.on_timeout(job)
        status = job.get("status")
        if status != "SUCCEEDED":
            res = self.result(job, timed_out=False)
            msg = "Ray job %s ended %s%s: %s" % (self.sid, status, self.step_note(), first_line(job.get("message")))
            self.module.fail_json(msg=msg, **res)
        self.module.exit_json(**self.result(job, timed_out=False))

    def step_note(self):
        return " at verl step %s" % self.progress[0] if self.progress[0] is not None else ""

    def on_timeout(self, job):
        if self.p["stop_on_timeout"]:
            self.client.stop_job(self.sid)
            self.changed = True
            # Ray sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s by default).
            job, still = self.wait(max(60.0, 10 * self.p["poll_interval"]))
            action = ("asked Ray to stop it but it is still %s" % job.get("status") if still
                      else "stopped it (now %s) as stop_on_timeout is true" % job.get("status"))
        else:
            action = "left it running as stop_on_timeout is false"
        res = self.result(job, timed_out=True)
        self.module.fail_json(msg="Ray job %s did not finish within %ss%s; %s"
                              % (self.sid, self.p["wait_timeout"], self.step_note(), action), **res)


def first_line(text):
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[0].strip() if lines else ""


def check_options(p):
    """Every problem with the options, one line each, before any request: Ray accepts many bad
    values and then leaves a job that fails, never starts, or cannot be addressed again."""
    try:
        check_submission_id(p["submission_id"])
        problems = []
    except RayError as e:
        problems = [str(e)]
    problems += check_entrypoint(p["entrypoint"])
    p["runtime_env"], env_problems = check_runtime_env(p["runtime_env"])
    problems += env_problems
    if p["metadata"] is not None:
        p["metadata"], meta_problems = string_values("metadata", p["metadata"])
        problems += meta_problems
    problems += check_resources(p["entrypoint_num_cpus"], p["entrypoint_num_gpus"], p["entrypoint_memory"],
                                p["entrypoint_resources"])
    problems += check_seconds("wait_timeout", p["wait_timeout"], 1, hint=" (use state=submitted not to wait)")
    problems += check_seconds("poll_interval", p["poll_interval"], MIN_POLL_INTERVAL)
    problems += check_tail_lines(p["logs_tail_lines"])
    if p["run"] and p["state"] != "stopped":
        problems.append("run=true applies to state=stopped only (it stops the run's newest attempt), got state=%s"
                        % p["state"])
    return problems


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    env_vars = (p["runtime_env"] or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(secret_values(env_vars))
    problems = check_options(p)
    if problems:
        module.fail_json(msg="\n".join(problems), submission_id=p["submission_id"], changed=False)
    task = None
    try:
        task = JobTask(module, client_from_module(module))
        task.run()
    except RayError as e:
        module.fail_json(msg=str(e), submission_id=p["submission_id"], changed=bool(task and task.changed),
                         **e.details())


if __name__ == "__main__":
    main()
