# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_job_wait``: wait for a Ray job in short chunks of
``rlinfra.verl.ray_job state=finished`` (run on the target host, like any module) and print one
progress line per chunk: status, elapsed time, the latest verl step and its key metrics.
Documentation: plugins/modules/ray_job_wait.py."""

from __future__ import annotations

import math
import time

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
DEFAULT_METRICS = ["critic/score/mean", "critic/rewards/mean", "reward/mean", "actor/pg_loss", "pg_loss",
                   "actor/entropy", "response_length/mean", "timing_s/step"]
ARGUMENT_SPEC = dict(
    address=dict(type="str", required=True),
    auth_token=dict(type="str", no_log=True),
    submission_id=dict(type="str", required=True),
    timeout=dict(type="int", default=86400),
    progress_interval=dict(type="int", default=60),
    poll_interval=dict(type="float", default=5.0),
    stop_on_timeout=dict(type="bool", default=False),
    logs_tail_lines=dict(type="int", default=50),
    runtime_env=dict(type="dict", no_log=True),
    validate_certs=dict(type="bool", default=True),
    label=dict(type="str", default=""),
    metrics=dict(type="list", elements="str", default=DEFAULT_METRICS),
    max_metrics=dict(type="int", default=5),
)
RESULT_KEYS = ("submission_id", "status", "message", "start_time", "end_time", "duration_s", "driver_exit_code",
               "logs_tail", "last_step", "last_metrics", "dashboard_url")


def hms(seconds):
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def fmt_metric(value):
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return ("%.4g" % value) if abs(value) < 1e5 else ("%.3e" % value)
    return str(value)


def progress_line(label, res, preferred, limit):
    parts = ["%s%s" % ("%s: " % label if label else "", res.get("status") or "UNKNOWN"), hms(res.get("duration_s"))]
    step = res.get("last_step")
    metrics = res.get("last_metrics") or {}
    if step is None:
        parts.append("no step yet")
    else:
        chosen = [k for k in preferred if k in metrics][:limit]
        if not chosen:
            chosen = list(metrics)[:min(limit, 4)]
        parts.append(" - ".join(["step:%s" % step] + ["%s:%s" % (k, fmt_metric(metrics[k])) for k in chosen]))
    return ", ".join(parts)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if args["progress_interval"] <= 0 or args["timeout"] <= 0 or args["poll_interval"] <= 0:
            return dict(result, failed=True, msg="timeout, progress_interval and poll_interval must be positive")
        label = args["label"] or args["submission_id"]
        base = dict(address=args["address"], auth_token=args["auth_token"], submission_id=args["submission_id"],
                    validate_certs=args["validate_certs"], logs_tail_lines=args["logs_tail_lines"])
        if args["runtime_env"]:
            base["runtime_env"] = args["runtime_env"]  # only so that ray_job masks secret values in log tails
        started = time.monotonic()
        deadline = started + args["timeout"]
        chunks = 0
        changed = False
        res = {}
        try:
            while True:
                remaining = deadline - time.monotonic()
                chunk = max(1, min(args["progress_interval"], int(math.ceil(remaining))))
                module_args = dict(base, state="finished", wait_timeout=chunk, stop_on_timeout=False,
                                   poll_interval=min(args["poll_interval"], float(chunk)))
                res = self._execute_module(module_name="rlinfra.verl.ray_job", module_args=module_args,
                                           task_vars=task_vars)
                chunks += 1
                status = res.get("status")
                if status is None:  # not a status but an error: unknown job, bad token, unreachable...
                    return dict(result, failed=True, msg=res.get("msg") or "ray_job returned no status",
                                chunks=chunks, **{k: res.get(k) for k in RESULT_KEYS})
                display.display(progress_line(label, res, args["metrics"], args["max_metrics"]))
                if status in TERMINAL or self._task.check_mode:
                    break
                if time.monotonic() >= deadline:
                    break
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

        out = {k: res.get(k) for k in RESULT_KEYS}
        timed_out = out["status"] not in TERMINAL and not self._task.check_mode
        if timed_out and args["stop_on_timeout"]:
            stop = self._execute_module(module_name="rlinfra.verl.ray_job",
                                        module_args=dict(base, state="stopped", wait_timeout=120), task_vars=task_vars)
            changed = bool(stop.get("changed"))
            out.update({k: stop.get(k) for k in RESULT_KEYS if stop.get(k) is not None})
        out.update(changed=changed, chunks=chunks, timed_out=timed_out,
                   waited_s=round(time.monotonic() - started, 1))
        if out["status"] != "SUCCEEDED" and not self._task.check_mode:
            out["failed"] = True
            if timed_out:
                out["msg"] = "Ray job %s is still %s after %ss%s; %s" % (
                    args["submission_id"], res.get("status"), args["timeout"],
                    " (verl step %s)" % res.get("last_step") if res.get("last_step") is not None else "",
                    "stopped it (stop_on_timeout)" if args["stop_on_timeout"] else "it keeps running")
            else:
                out["msg"] = res.get("msg") or "Ray job %s ended %s" % (args["submission_id"], out["status"])
        result.update(out)
        return result
