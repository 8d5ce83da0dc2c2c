# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The run report ray_job_wait writes in the run's artifacts directory (module_utils/observe/report.py builds the
page): what the watch knows, the cost, the nodes' utilisation from the head's Prometheus, the links to the logs;
and the wait's result with the machines given back and the report's path. Part of the action's ``Watch``
(job_wait_state.py says how the parts stack)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.common.switches import switch_value
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.run_cost import node_prices, run_cost, run_seconds
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import report as run_report
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_source
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_state import WatchState


class WatchReport(WatchState):
    """The run report, and the wait's result."""

    def write_report(self, result: Mapping[str, Any] | None = None) -> None:
        """``report.html`` in the artifacts directory, from what the watch knows now; ``result`` (the wait's) makes it
        the final one. Like the metrics, a report that cannot be written never ends the wait."""
        if not self.args["log_dir"] or (self.copy is None and result is None) or not self.artifacts_dir():
            return
        run_dir = self.run_dir()
        try:
            files.private_dir(run_dir)
            try:
                before = run_report.load(run_dir)
            except ValueError:
                before = None  # not the report's data: it is rewritten whole
            self.report = run_report.write(run_dir, run_report.carried(before, self.report_run(result)))
        except OSError as e:
            self.say(files.cannot_write(experiment_source.ARTIFACTS_VAR, run_dir, "the run report", e))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            self.say("could not write the run report in %s: %s" % (run_dir, getattr(e, "strerror", None) or e))

    def run_dir(self) -> str:
        """``artifacts/<exp>/<submission>/``: the run's own directory (its first attempt's submission id), where
        logs.yml puts the nodes' logs too."""
        return os.path.join(self.args["log_dir"], self.args["base_submission_id"] or self.sid)

    def report_run(self, result: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The report's plain data (observe/report.py's ``build``): the run's masked state only, no env value."""
        final = result is not None
        rows = list(self.rows)
        if not final and self.res.get("submission_id") == self.sid:  # the attempt being watched
            rows.append(
                dict(
                    attempt=self.attempt,
                    submission_id=self.sid,
                    status=self.res.get("status"),
                    last_step=self.res.get("last_step"),
                    start_time=self.res.get("start_time"),
                )
            )
        numbers = dict((r["submission_id"], r["attempt"]) for r in rows)
        follows = list(self.past) + ([(self.copy.sid, self.copy.metrics)] if self.copy and self.copy.base else [])
        exp = self.args["experiment"] or {}
        hostvars = self.task_vars.get("hostvars") or {}
        cost = None
        if self.args["hosts"]:
            try:
                waited = dict(attempts=rows) if final else dict(duration_s=time.time() - self.started)
                cost = run_cost(node_prices(self.args["hosts"], hostvars), run_seconds(waited))
            except (AnsibleError, KeyError, TypeError, ValueError):
                cost = None
        utilisation, note = self.utilisation()
        return dict(
            experiment=self.label,
            submission_id=self.args["base_submission_id"] or self.sid,
            status=(result or {}).get("status") if final else self.res.get("status"),
            reason_line=(result or {}).get("reason_line"),
            attempts=rows,
            code=exp.get("code"),
            fingerprint=self.host_fact("python_env_fingerprint"),
            image=self.host_fact("ray_container_image"),
            nodes=list(self.args["hosts"]),
            left_out=list(self.args["left_out"]),
            gpus=self.gpus(exp),
            cost=cost,
            final=final,
            curves=[
                run_report.attempt_curves(
                    numbers.get(sid) or attempts.attempt_number(sid, self.dog.base) or 1, sid, follow
                )
                for sid, follow in follows
            ],
            utilisation=utilisation,
            utilisation_note=note,
            given_back=((result or {}).get("given_back") or {}).get("line"),
            events=run_report.events_from_watch(self.events, self.dog.marks, self.started, rows),
            logs=[(os.path.basename(p), os.path.relpath(p, self.run_dir())) for p in self.log_paths]
            or (
                [(os.path.basename(self.copy.path), os.path.relpath(self.copy.path, self.run_dir()))]
                if self.copy and self.copy.path
                else []
            ),
            node_logs=self.node_logs(rows),
            watch_started=self.started,
            checkpoint=self.newest_checkpoint,
            generated_at=time.time(),
        )

    def node_logs(self, rows: list[Any]) -> list[tuple[str, str]]:
        """Links to the nodes' logs logs.yml saved for each attempt (``<log_dir>/<submission id>/nodes/<host>/``),
        relative to the report's directory."""
        return run_report.node_log_rows(
            self.args["log_dir"],
            self.run_dir(),
            [r.get("submission_id") for r in rows if r.get("submission_id")] or [self.sid],
        )

    def utilisation(self) -> tuple[dict[str, Any], str]:
        """``(structure, why not)`` of the nodes' utilisation over the run (observe/prometheus.py's): read on the head
        from its Prometheus (rlinfra.verl.ray_metrics state=query; the password never leaves the head). Never ends the
        wait: an answer it cannot have is the report's one line saying why."""
        # The roles refused a ray_metrics that is neither true nor false; one left to template here is taken as on.
        if switch_value(self.task_vars.get("ray_metrics", True), "ray_metrics")[0] is False:
            return {}, "ray_metrics is false, so the cluster keeps no metrics"
        if getattr(getattr(self.action, "_task", None), "check_mode", False):
            return {}, "check mode: Prometheus was not read"
        names = dict((address, host) for address, host in self.dog.names.items() if address != host)
        try:
            res = self.action._execute_module(
                module_name="rlinfra.verl.ray_metrics",
                module_args=dict(state="query", start=self.run_start(), names=names),
                task_vars=self.task_vars,
            )
        except (AnsibleError, OSError) as e:
            return {}, "the head's Prometheus could not be read: %s" % e
        if res.get("failed"):
            return {}, "the head's Prometheus could not be read: %s" % (res.get("msg") or "no reason given")
        series = res.get("series") or {}
        if not series:
            return {}, "the head's Prometheus had no samples for this run yet%s" % (
                " (%s)" % "; ".join(res.get("problems") or []) if res.get("problems") else ""
            )
        return series, ""

    def run_start(self) -> float:
        """When the run began (its first attempt's start as Ray gave it, else when this wait began), epoch seconds."""
        for row in list(self.rows) + [self.res]:
            at = run_report.epoch(row.get("start_time")) if isinstance(row, dict) else None
            if at and at > 1e11:  # Ray's milliseconds
                at /= 1000.0
            if at:
                return min(at, self.started)
        return self.started

    def host_fact(self, name: str) -> str | None:
        """A host variable the nodes agree on (the environment's fingerprint, the image), else None."""
        values = set()
        hostvars = self.task_vars.get("hostvars") or {}
        for host in self.args["hosts"]:
            try:
                value = hostvars[host].get(name)
            except (KeyError, AnsibleError, AttributeError):
                continue
            if value and isinstance(value, str) and "{{" not in value:
                values.add(value)
        return values.pop() if len(values) == 1 else None

    def gpus(self, exp: Any) -> str | None:
        nodes, per_node = exp.get("nnodes"), exp.get("gpus_per_node")
        try:
            nodes, per_node = int(nodes), int(per_node)
        except (TypeError, ValueError):
            return None
        return "%d (%d node(s) x %d)" % (nodes * per_node, nodes, per_node) if nodes and per_node else None

    def result(self, reason: str, line: str | None) -> dict[str, Any]:
        out = self.dog.result(
            reason,
            line,
            self.clock(),
            job_url=self.job_url,
            log_paths=self.log_paths,
            metrics=self.metrics,
            artifacts_error=self.artifacts_error,
            preferred=self.args["metrics"],
        )
        released_at = self.given_back.get("released_at")
        if released_at:
            ids = self.given_back.get("released")
            out["given_back"] = dict(
                at=released_at,
                ids=ids,
                line="%s at %s (on_end: %s)"
                % (
                    ", ".join(ids) if ids else "the cluster's rentals" if ids is None else "nothing to give back",
                    time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(released_at)),
                    self.args["on_end"],
                ),
            )
            out["summary"].append("given back:    %s" % out["given_back"]["line"])
        if reason != "check_mode":
            self.write_report(out)
        out["report_path"] = self.report
        if self.report:
            out["summary"].append("report:        %s" % self.report)
        return out
