# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The state of ray_job_wait's watch and its plumbing (plugins/action/ray_job_wait.py's ``Watch`` is built on it): the
options, the watchdog (module_utils/ray/watchdog.py) and the names of its state, what the watch has saved so far, the
lines it prints, the modules it runs on the target, and the artifacts directory on the controller.

The watch's parts build on one another, each using only those below it: :class:`WatchState` here, then
job_wait_report.py (the run report and the wait's result), job_wait_log.py (one poll and the driver log's copy and
metrics), job_wait_supervisor.py (the run's supervisor on the head), then the action's ``Watch`` (the loop)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleError
from ansible.utils.display import Display

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import watchdog
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import progress_line
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_source
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy

display = Display()


class Done(Exception):
    """Ends the watch: ``reason`` names why, ``line`` says it to the user (None on success)."""

    def __init__(self, reason: str, line: str | None = None) -> None:
        super().__init__(line or reason)
        self.reason = reason
        self.line = line


class WatchState:
    """The watch's state and plumbing; what to do next is module_utils/ray/watchdog.py's (``self.dog``)."""

    def __init__(self, action: Any, args: dict[str, Any], task_vars: Mapping[str, Any]) -> None:
        self.action = action
        self.args = args
        self.task_vars = task_vars
        # A followed supervisor's times are the head's wall clock (they survive its restarts).
        self.clock = time.time if args["supervise"] == "cluster" else time.monotonic
        self.t0 = self.clock()
        # The wall-clock time of t0: the watchdog's events are seconds after it, the report puts them on the clock.
        self.started = time.time()
        self.label = args["label"] or args["base_submission_id"] or args["submission_id"]
        self.dog = watchdog.Watchdog(args, self.t0, names=self.node_names(args["hosts"]), wall=self.started)
        self.dash = dict(
            address=args["address"],
            auth_token=args["auth_token"],
            auth_token_path=args["auth_token_path"],
            validate_certs=args["validate_certs"],
        )
        # The job's link on the dashboard as ray_job_poll last gave it.
        self.job_url: str | None = None
        self.log_paths: list[str] = []
        self.artifacts_error = ""  # why the log or metrics could not be saved (the job's status is not affected)
        self.metrics: dict[str, Any] = {}  # the newest metrics files written (verl_metrics.write)
        self.metrics_at: float | None = None  # when they were last refreshed while the job ran
        self.copy: LogCopy | None = None  # the attempt's log as followed here (plugin_utils/log_copy.py)
        # (submission id, its metrics Follow) of the attempts before the current one
        self.past: list[tuple[str, Any]] = []
        self.report = ""  # the run report's path once written (observe/report.py)
        self.newest_checkpoint: dict[str, Any] | None = (
            None  # the newest checkpoint step the supervisor saw: {step, dir, at}
        )
        self.unit: str | None = None  # the run's supervisor on the head (supervise=cluster)
        self.given_back: dict[str, Any] = {}  # its end as it said it, with the machines given back (on_end)

    # The watch's state is the machine's; these read it (and poll/check mode set it) by the old names.
    sid = property(lambda self: self.dog.sid)
    attempt = property(lambda self: self.dog.attempt)
    restarts = property(lambda self: self.dog.restarts)
    rows = property(lambda self: self.dog.rows)
    lost = property(lambda self: self.dog.lost)
    events = property(lambda self: self.dog.events)
    res = property(lambda self: self.dog.res, lambda self, value: setattr(self.dog, "res", value))
    # The dashboard URL the modules on the target used (the option, or the target's local fact).
    address = property(lambda self: self.dog.address, lambda self, value: setattr(self.dog, "address", value))

    # --- plumbing ---------------------------------------------------------------------------

    def say(self, line: str) -> None:
        display.display("%s: %s" % (self.label, line))

    def module(self, name: str, args: Mapping[str, Any]) -> dict[str, Any]:
        if name in node_script.SCRIPTED:  # a plain script on the target when it can
            return node_script.call(self.action, self.task_vars, name, args)
        return self.action._execute_module(module_name=name, module_args=args, task_vars=self.task_vars)

    def node_names(self, hosts: Iterable[str]) -> dict[str, str]:
        """Address -> inventory host, for lines that name a node the way the user knows it."""
        names: dict[str, str] = {}
        hostvars = self.task_vars.get("hostvars") or {}
        for host in hosts:
            try:
                hv = hostvars[host]
                facts = (hv.get("ansible_local") or {}).get("rlinfra_ray") or {}
                candidates = (
                    hv.get("ray_node_ip"),
                    facts.get("node_ip"),
                    hv.get("ray_private_ip"),
                    hv.get("ansible_host"),
                )
            except (KeyError, AnsibleError, AttributeError):
                continue
            for value in candidates:
                if value and isinstance(value, str) and "{{" not in value:
                    names.setdefault(value, host)
            names.setdefault(host, host)
        return names

    def say_progress(self, res: Mapping[str, Any]) -> None:
        display.display(progress_line(self.label, res, self.args["metrics"], self.args["max_metrics"], self.attempt))

    def artifacts_dir(self) -> str | None:
        """The run's artifacts directory, made 0700 when missing; None (and one line, once) when it cannot be used:
        the job goes on, and its status is what the wait reports."""
        path = self.args["log_dir"]
        try:
            if os.path.islink(path):
                raise OSError(
                    errno.ELOOP,
                    "it is a symbolic link (to %s); artifacts are never written through one" % os.path.realpath(path),
                )
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        except OSError as e:
            self.artifact_failed(path, e, "the driver log and metrics")
            return None

    def artifact_failed(self, path: str, e: OSError, what: str) -> None:
        """Said once: the first failure names the setting to change; the job goes on whatever the disk does."""
        if not self.artifacts_error:
            self.artifacts_error = "%s; the job's status above is Ray's own" % files.cannot_write(
                experiment_source.ARTIFACTS_VAR, path, what, e
            )
            self.say(self.artifacts_error)
