# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One poll of the job by ray_job_wait (``rlinfra.verl.ray_job_poll`` on the target), and what it feeds on the
controller: the attempt's driver log copy (plugin_utils/log_copy.py, read on from its offset, caught up when the
log grew more than one call returns), the secrets masked out of it, the saved log and the metrics files. Part of the
action's ``Watch`` (job_wait_state.py says how the parts stack)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_report import WatchReport
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_state import Done
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy

# Calls of ray_job_poll one poll may add to read a log that grew more than one call returns (8 MiB each).
CATCH_UP_CALLS = 64


class WatchLog(WatchReport):
    """One poll, and the driver log and metrics it feeds."""

    def poll(self, seconds: float, tail: int | None = None) -> dict[str, Any]:
        copy = self.log_copy(self.sid)
        res = self.module("rlinfra.verl.ray_job_poll", self.poll_args(seconds, tail, copy))
        if res.get("failed"):  # a rejected token, a bad argument, no dashboard address: nothing a retry fixes
            raise Done("error", res.get("msg") or "ray_job_poll failed")
        self.address = res.get("address") or self.address
        self.job_url = res.get("dashboard_url") or self.job_url
        self.take_log(copy, res)
        return res

    def poll_args(self, seconds: float, tail: int | None, copy: LogCopy) -> dict[str, Any]:
        """ray_job_poll's arguments: it reads only the log's bytes after the copy's offset."""
        return dict(
            self.dash,
            submission_id=self.sid,
            timeout=int(seconds),
            poll_interval=self.args["poll_interval"],
            logs_tail_lines=self.args["logs_tail_lines"] if tail is None else tail,
            runtime_env=self.mask_env(),
            secret_names=self.args["secret_names"],
            **copy.poll_args(),
        )

    def log_copy(self, sid: str) -> LogCopy:
        """The attempt's log as followed here: a new one for a new attempt."""
        if self.copy is None or self.copy.sid != sid:
            if self.copy is not None and self.copy.base and all(s != self.copy.sid for s, dummy in self.past):
                self.past.append((self.copy.sid, self.copy.metrics))  # its curves stay in the run's report
            check_mode = getattr(getattr(self.action, "_task", None), "check_mode", False)  # writes nothing then
            self.copy = LogCopy(sid, "" if check_mode else self.args["log_dir"], self.mask_log)
        return self.copy

    def take_log(self, copy: LogCopy, res: dict[str, Any]) -> None:
        """Append what the poll read of the log to the copy and the metrics (more calls while the log has more than
        one call returns: a wait that comes to a long run catches up once); the newest step is the copy's, and so is the
        first (the attempt's first logged step, which proves or disproves a resume)."""
        if not res.get("found") or "log_offset" not in res:
            return
        if copy.path and not copy.checked:
            copy.checked = True
            if not self.artifacts_dir():
                copy.path = None
        more, calls = self.feed_log(copy, res), 0
        while more and calls < CATCH_UP_CALLS:
            calls += 1
            extra = self.module("rlinfra.verl.ray_job_poll", self.poll_args(0, 0, copy))
            if extra.get("failed") or not extra.get("found"):
                break
            more = self.feed_log(copy, extra)
        res["last_step"], res["last_metrics"] = copy.metrics.last[0], dict(copy.metrics.last[1])
        res["first_step"] = copy.metrics.first

    def feed_log(self, copy: LogCopy, res: Mapping[str, Any]) -> bool:
        try:
            return copy.take(res)
        except OSError as e:  # the copy stops; the metrics and the watch go on
            self.artifact_failed(self.args["log_dir"], e, "the driver log")
            return copy.behind

    def mask_env(self) -> dict[str, Any]:
        """What ray_job_poll masks by: the values of the runtime_env and the secret values."""
        env = dict((self.args["runtime_env"] or {}).get("env_vars") or {})
        env.update(("RLINFRA_SECRET_%d" % i, v) for i, v in enumerate(self.args["secret_values"]) if v)
        return {"env_vars": env}

    def mask_log(self, text: str) -> str:
        """The driver log's text with the secrets masked (by ray_job_poll, then by value here)."""
        if not text:
            return text
        for name in self.args["secret_names"]:
            value = ((self.args["runtime_env"] or {}).get("env_vars") or {}).get(name)
            if value:
                text = text.replace(str(value), masking.MASK)
        return masking.mask_values(text, self.args["secret_values"])

    def save_log(self, sid: str) -> None:
        """The attempt's log, 0600 on the controller (the copy appended to while it ran, read to its end now), and
        its metrics (CSV, PNG) beside it."""
        if not self.args["log_dir"]:
            return
        copy = self.log_copy(sid)
        if copy.behind and sid == self.sid:
            self.poll(0, tail=0)
        path = copy.finish() if copy.path else None
        if not path or not self.artifacts_dir():
            return
        self.log_paths.append(path)
        self.write_metrics(sid)

    def refresh_metrics(self, res: Mapping[str, Any]) -> None:
        """While the job runs: the metrics files again, at most once per progress interval, when a step is new."""
        if (
            not self.args["log_dir"]
            or res.get("last_step") is None
            or res.get("last_step") == self.metrics.get("last_step")
        ):
            return
        if self.metrics_at is not None and self.clock() - self.metrics_at < self.args["progress_interval"]:
            return
        self.metrics_at = self.clock()
        if self.artifacts_dir():
            self.write_metrics(self.sid, last_step=res.get("last_step"))

    def write_metrics(self, sid: str, last_step: int | None = None) -> None:
        """The metrics files from the lines followed so far: only the rows that are new are written."""
        try:
            written = self.log_copy(sid).metrics.write()
        except OSError as e:  # a full disk must not end the wait: the job goes on
            self.artifact_failed(self.args["log_dir"], e, "the metrics")
            return
        except ValueError as e:
            self.say("could not write the metrics of %s: %s" % (sid, e))
            return
        if written["csv"]:
            self.metrics = dict(written, last_step=last_step)
        self.write_report()
