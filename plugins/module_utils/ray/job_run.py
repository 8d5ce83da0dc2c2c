# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Submit, wait for, stop or delete a Ray job: module ``rlinfra.verl.ray_job`` (the documentation and the options) and
the same code as a plain script on the target (its action, through plugin_utils/node_script.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import env_secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.attempts import newest_attempt
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    MIN_POLL_INTERVAL,
    TERMINAL_STATUSES,
    RayError,
    check_entrypoint,
    check_resources,
    check_runtime_env,
    check_seconds,
    check_submission_id,
    check_tail_lines,
    client_from_module,
    ms_to_iso,
    string_values,
    tail_lines,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.log import last_progress

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient


class Finished(Exception):
    """The task's result is known (success or failure): JobTask's steps end the run from wherever they are."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


# Full logs can be large; while waiting they are only re-read this often (seconds).
PROGRESS_REFRESH = 60.0


class JobTask:
    def __init__(self, module: Any, client: RayClient) -> None:
        self.module = module
        self.client = client
        self.p = module.params
        self.sid = self.p["submission_id"]
        if self.p["run"]:
            # The run's newest attempt (recoveries submit <id>-aN), whichever still runs.
            newest = newest_attempt(client.list_jobs(), self.sid)
            self.sid = newest["submission_id"] if newest else self.sid
        self.changed = False
        self.progress: tuple[int | None, dict[str, float]] = (None, {})
        self._progress_at: float | None = None

    def finish(self, **result: Any) -> NoReturn:
        raise Finished(result)

    def fail(self, msg: str, **result: Any) -> NoReturn:
        raise Finished(dict(result, failed=True, msg=msg))

    def result(self, job: dict[str, Any] | None, logs: str | None = None, **extra: Any) -> dict[str, Any]:
        job = job or {}
        start, end = job.get("start_time"), job.get("end_time")
        duration = None
        if start:
            duration = round(((end or time.time() * 1000) - start) / 1000.0, 3)
        if logs is None:
            logs = self.logs(job)
        if logs:
            self.progress = last_progress(logs)
        out = dict(
            changed=self.changed,
            submission_id=self.sid,
            found=bool(job),
            status=job.get("status"),
            message=job.get("message"),
            start_time=ms_to_iso(start),
            end_time=ms_to_iso(end),
            duration_s=duration,
            driver_exit_code=job.get("driver_exit_code"),
            logs_tail=tail_lines(logs, self.p["logs_tail_lines"]),
            last_step=self.progress[0],
            last_metrics=self.progress[1],
            dashboard_url=self.client.job_url(self.sid),
        )
        out.update(extra)
        return out

    def logs(self, job: dict[str, Any] | None) -> str:
        if not job or self.p["logs_tail_lines"] <= 0:
            return ""
        try:
            return self.client.get_logs(self.sid)
        except RayError as e:
            # The status is what the task is about; missing logs only deserve a warning.
            self.module.warn("could not read the logs of Ray job %s: %s" % (self.sid, e))
            return ""

    def on_poll(self, job: dict[str, Any]) -> None:
        """Keep the newest verl progress while waiting, so a timeout or a lost head still reports it."""
        now = time.monotonic()
        if job.get("status") in TERMINAL_STATUSES or self.p["logs_tail_lines"] <= 0:
            return  # the final result reads the logs anyway
        if self._progress_at is None or now - self._progress_at >= PROGRESS_REFRESH:
            self._progress_at = now
            step, metrics = last_progress(self.logs(job))
            if step is not None:
                self.progress = (step, metrics)

    def wait(
        self, timeout: float, on_poll: Callable[[dict[str, Any]], Any] | None = None
    ) -> tuple[dict[str, Any], bool]:
        return self.client.wait_for_job(self.sid, timeout, self.p["poll_interval"], on_poll=on_poll)

    def ensure_submitted(self, job: dict[str, Any] | None) -> dict[str, Any] | None:
        if job is not None:
            wanted = self.p["entrypoint"]
            if wanted and job.get("entrypoint") != wanted:
                self.module.warn(
                    "Ray job %s already exists with a different entrypoint; it was left as is "
                    "(use a new submission_id to run the new command)" % self.sid
                )
            return job
        if not self.p["entrypoint"]:
            self.fail(
                "Ray job %s does not exist and no entrypoint was given to create it" % self.sid,
                **self.result(None, logs=""),
            )
        self.changed = True
        if self.module.check_mode:
            return None
        created = self.client.submit_job(
            self.sid,
            self.p["entrypoint"],
            runtime_env=self.p["runtime_env"],
            metadata=self.p["metadata"] or None,
            entrypoint_num_cpus=self.p["entrypoint_num_cpus"],
            entrypoint_num_gpus=self.p["entrypoint_num_gpus"],
            entrypoint_memory=self.p["entrypoint_memory"],
            entrypoint_resources=self.p["entrypoint_resources"],
        )
        # False means another client submitted the same id between our GET and POST.
        self.changed = created
        return self.client.get_job(self.sid)

    def stop_and_wait(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        if job.get("status") in TERMINAL_STATUSES:
            return job
        self.changed = True
        if self.module.check_mode:
            return job
        self.client.stop_job(self.sid)
        job, timed_out = self.wait(timeout)
        if timed_out:
            self.fail(
                "Ray job %s was asked to stop but is still %s after %ss" % (self.sid, job.get("status"), timeout),
                **self.result(job),
            )
        return job

    def run(self) -> None:
        state = self.p["state"]
        job = self.client.get_job(self.sid)
        if state == "absent":
            if job is None:
                self.finish(**self.result(None, logs=""))
            job = self.stop_and_wait(job, self.p["wait_timeout"])
            self.changed = True
            if not self.module.check_mode:
                self.client.delete_job(self.sid)
            self.finish(**self.result(job, logs=""))
        if state == "stopped":
            if job is not None:
                job = self.stop_and_wait(job, self.p["wait_timeout"])
            self.finish(**self.result(job))

        job = self.ensure_submitted(job)
        if state == "submitted" or job is None:
            self.finish(**self.result(job))

        status = job.get("status")
        if status not in TERMINAL_STATUSES:
            if self.module.check_mode:
                self.finish(**self.result(job, timed_out=False))
            job, timed_out = self.wait(self.p["wait_timeout"], on_poll=self.on_poll)
            if timed_out:
                self.on_timeout(job)
        status = job.get("status")
        if status != "SUCCEEDED":
            res = self.result(job, timed_out=False)
            msg = "Ray job %s ended %s%s: %s" % (self.sid, status, self.step_note(), first_line(job.get("message")))
            self.fail(msg, **res)
        self.finish(**self.result(job, timed_out=False))

    def step_note(self) -> str:
        return " at verl step %s" % self.progress[0] if self.progress[0] is not None else ""

    def on_timeout(self, job: dict[str, Any]) -> NoReturn:
        if self.p["stop_on_timeout"]:
            self.client.stop_job(self.sid)
            self.changed = True
            # Ray sends SIGTERM, then SIGKILL after RAY_JOB_STOP_WAIT_TIME_S (3 s by default).
            job, still = self.wait(max(60.0, 10 * self.p["poll_interval"]))
            action = (
                "asked Ray to stop it but it is still %s" % job.get("status")
                if still
                else "stopped it (now %s) as stop_on_timeout is true" % job.get("status")
            )
        else:
            action = "left it running as stop_on_timeout is false"
        res = self.result(job, timed_out=True)
        self.fail(
            "Ray job %s did not finish within %ss%s; %s" % (self.sid, self.p["wait_timeout"], self.step_note(), action),
            **res,
        )


def first_line(text: str | None) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    return lines[0].strip() if lines else ""


def check_options(p: dict[str, Any]) -> list[str]:
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
    problems += check_resources(
        p["entrypoint_num_cpus"], p["entrypoint_num_gpus"], p["entrypoint_memory"], p["entrypoint_resources"]
    )
    problems += check_seconds("wait_timeout", p["wait_timeout"], 1, hint=" (use state=submitted not to wait)")
    problems += check_seconds("poll_interval", p["poll_interval"], MIN_POLL_INTERVAL)
    problems += check_tail_lines(p["logs_tail_lines"])
    if p["run"] and p["state"] != "stopped":
        problems.append(
            "run=true applies to state=stopped only (it stops the run's newest attempt), got state=%s" % p["state"]
        )
    return problems


def run_job(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's result (``failed`` and ``msg`` when it failed). ``params`` is what node_script passes; the code reads
    ``module.params`` (the same values), whose runtime_env and metadata check_options normalizes for JobTask."""
    p = module.params
    env_vars = (p["runtime_env"] or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(env_secret_values(env_vars))
    problems = check_options(p)
    if problems:
        return dict(failed=True, msg="\n".join(problems), submission_id=p["submission_id"], changed=False)
    task = None
    try:
        task = JobTask(module, client_from_module(module))
        task.run()
    except Finished as done:
        return done.result
    except RayError as e:
        return dict(
            e.details(), failed=True, msg=str(e), submission_id=p["submission_id"], changed=bool(task and task.changed)
        )
    raise AssertionError("JobTask.run ended without a result")
