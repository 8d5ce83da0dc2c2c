# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The job watchdog of ``rlinfra.verl.ray_job_wait`` as a state machine without I/O.

Why: the watchdog's rules (when a lost node ends an attempt, when the head took the job with it, when a
job is stalled, how long an outage is borne, when and how an attempt is resubmitted, and every line the
user reads about it) were woven into the action's polling loop, where only the sandbox could test them.
Here they run on answers alone, so a table of poll sequences tests them (tests/unit/test_watchdog.py).

:meth:`Watchdog.watch` is a generator. It yields requests, tuples whose first item names the I/O the
action must do, and receives ``(answer, now)`` for each: the answer (a module's result, or None) and the
controller's clock after it (any monotonic seconds). It returns ``(reason, line)`` when the watch is over:
``("succeeded", None)``, or why it ended and the one line that says so. The requests:

* ``("poll", seconds, tail)``: ``ray_job_poll`` for up to ``seconds``; ``tail`` None is the usual tail
  (and the whole log when the attempt ends), 0 no log. Answer: its result.
* ``("say", line)``: print the line. ``("progress", res)``: print the progress line of a poll's result
  (and refresh the metrics files).
* ``("sleep", seconds)``. ``("stop", submission_id)``: stop that job. ``("save_log", submission_id)``.
* ``("cluster", kwargs)``: ``ray_cluster_info`` with these options. Answer: its result.
* ``("checkpoint", path)``: ``verl_checkpoint_info``. ``("upload", package)``: ``ray_package``.
* ``("submit", submission_id, entrypoint, metadata, resources)``: ``ray_job`` submitting the next attempt.
* ``("replace", nodes)``: rent and converge machines in place of ``nodes`` (``{label, node_ip, head, name}``) gone for good
  (``recovery.replace``; the supervisor's, module_utils/hyperbolic/replace.py). Answer: ``{replaced: [{label, name,
  new_ip, rental, old_rental}], failed, msg, todo}``.

The action and the supervisor each do a request with their method of its name (:func:`do`).

The recovery of an ended attempt (stop what is left, wait for the nodes or replace them, check the checkpoint,
resubmit) is in module_utils/ray/_watchdog_recovery.py, the same machine's steps. The lower rules (which node left,
which events are recoverable, checkpoint shapes, the summary) are in module_utils/ray/recovery.py; attempt names in
module_utils/ray/attempts.py."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import _watchdog_recovery, attempts, recovery

if TYPE_CHECKING:
    from typing import Generator, Optional, TypeVar

    _T = TypeVar("_T")
    # The watch's generators: they yield a request, receive (answer, now) and return _T.
    Steps = Generator[tuple[Any, ...], tuple[Any, float], _T]
    # The end of a watch: (reason, the line that says it; None when it succeeded).
    End = tuple[str, Optional[str]]

# The requests Watchdog.watch yields, by their first item (the module's docstring says what each carries).
REQUESTS = frozenset(
    ("poll", "say", "progress", "sleep", "stop", "save_log", "cluster", "checkpoint", "upload", "submit", "replace")
)
# The result keys taken from the last poll of the job.
RESULT_KEYS = (
    "submission_id",
    "status",
    "message",
    "start_time",
    "end_time",
    "duration_s",
    "driver_exit_code",
    "logs_tail",
    "last_step",
    "last_metrics",
    "dashboard_url",
)
# The wait's options the machine reads, with ray_job_wait's defaults (a caller may give only some).
OPTIONS = dict(
    base_submission_id="",
    timeout=86400,
    progress_interval=60,
    poll_interval=5.0,
    stop_on_timeout=False,
    stall_timeout=0,
    outage_grace=300,
    recovery=None,
    job=None,
    checkpoint_dir="",
)


def do(doer: Any, request: Sequence[Any]) -> Any:
    """The answer to ``request``: ``doer``'s method of the request's name, given the request's other items. The wait on
    the controller (action/ray_job_wait.py) and the run's supervisor on the head (ray/supervisor.py) each have one
    method a request, so that what a request carries is unpacked in one place."""
    kind = request[0]
    if kind not in REQUESTS:
        raise ValueError("the watchdog asked for %r, which is none of its requests" % (kind,))
    return getattr(doer, kind)(*request[1:])


class Watchdog:
    """One run's watch: its attempts, the nodes it has seen, the faults and what was done about them."""

    def __init__(
        self, args: Mapping[str, Any], now: float, names: Mapping[str, str] | None = None, wall: float | None = None
    ):
        opts: dict[str, Any] = dict(OPTIONS)
        opts.update((k, v) for k, v in args.items() if k in OPTIONS or k == "submission_id")
        self.opts = opts
        self.settings = recovery.recovery_settings(opts["recovery"])
        self.base = opts["base_submission_id"] or opts["submission_id"]
        self.sid = opts["submission_id"]
        self.attempt = attempts.attempt_number(self.sid, self.base) or 1
        self.restarts = self.attempt - 1
        self.names = dict(names or {})  # address -> inventory host (a replaced machine's added)
        self.min_nodes = self.settings["min_nodes"]
        # The dashboard URL the modules on the target used; the action keeps it current from each poll.
        self.address = args.get("address")
        self.t0 = self.now = now
        self.known: dict[str, dict[str, Any]] = {}  # node_id -> node, alive when last seen
        self.head: str | None = None  # node_id of the alive head
        self.lost: list[dict[str, Any]] = []  # every node that left, for the summary
        self.rows: list[dict[str, Any]] = []  # one per ended attempt
        self.events: list[dict[str, Any]] = []  # timings of faults and recoveries
        # What the run report marks besides the events (a node back, the dashboard answering again): kept apart, the
        # result's ``events`` stay the faults and recoveries that the summary and users' playbooks read.
        self.marks: list[dict[str, Any]] = []
        self.res: dict[str, Any] = {}  # the job as the last poll that found it gave it
        self.expect_from: Any = None  # the checkpoint step a resubmitted attempt must go on from, until its first step
        # Why the recovery under way began (None between recoveries): a supervisor restarted in the middle of one
        # (module_utils/ray/supervisor.py) finishes it (:meth:`resume`) instead of reading its own stop as a user's.
        self.recovering: str | None = None
        # recovery.deadline on this watch's clock (``wall``: the epoch time of ``now`` when the clock is not the epoch)
        deadline = self.settings.get("deadline")
        self.deadline = vocabulary.epoch(deadline) - ((now if wall is None else wall) - now) if deadline else None
        self.total_steps = recovery.total_steps((self.opts["job"] or {}).get("job_template"))
        self.pace: list[float] | None = None  # [step, time, attempt]: the attempt's first step seen, for its pace
        self.deadline_said = 0  # the attempt whose pace against the deadline was said
        self.replaced = 0  # machines replaced (recovery.replace), against recovery.max_replacements
        self.new_attempt()

    # --- plumbing ---------------------------------------------------------------------------

    def new_attempt(self) -> None:
        self.step: int | None = None
        self.step_at = self.now
        self.lost_here: list[dict[str, Any]] = []
        self.seen = False

    def ask(self, *request: Any) -> Steps[Any]:
        """One request out, its answer in; the clock comes with every answer."""
        answer, self.now = yield request
        return answer

    def say(self, line: str) -> Steps[Any]:
        return self.ask("say", line)

    def elapsed(self) -> str:
        return recovery.hms(self.now - self.t0)

    def at_s(self) -> float:
        return round(self.now - self.t0, 1)

    def head_down(self) -> bool:
        return any(n["head"] for n in self.lost_here)

    def recoverable(self, event: str) -> bool:
        return recovery.can_recover(event, self.settings, self.restarts)[0]

    # --- the loop ---------------------------------------------------------------------------

    def watch(self, now: float | None = None) -> Steps[End]:
        """The watch until the job ends or is given up on (see the module's docstring)."""
        if now is not None:
            self.t0 = self.now = self.step_at = now
        deadline = self.t0 + self.opts["timeout"]
        outage = None
        while True:
            remaining = deadline - self.now
            if remaining <= 0:
                return (yield from self.on_timeout())
            chunk = max(1, min(self.opts["progress_interval"], int(math.ceil(remaining))))
            res = yield from self.ask("poll", chunk, None)
            if not res.get("reachable"):
                if outage is None:
                    outage = self.now
                    yield from self.say(
                        "the Ray dashboard does not answer (%s); waiting up to %ss for it"
                        % (res.get("error"), self.opts["outage_grace"])
                    )
                    self.events.append(dict(event="unreachable", at_s=self.at_s()))
                if self.now - outage > self.opts["outage_grace"]:
                    return (
                        "unreachable",
                        "the Ray dashboard at %s has not answered for %ds (%s): the state of job "
                        "%s is unknown. Check the head (systemctl status ray-head), then run status.yml for the "
                        "experiment" % (self.address or "?", self.now - outage, res.get("error"), self.sid),
                    )
                yield from self.ask("sleep", min(5.0, self.opts["poll_interval"] * 2))
                continue
            if outage is not None:
                yield from self.say("the Ray dashboard answers again after %ds" % (self.now - outage))
                self.marks.append(dict(event="reachable", at_s=self.at_s()))
                outage = None
            restarted = yield from self.watch_nodes(res.get("nodes") or [])
            if not res.get("found"):
                if self.seen or restarted:
                    self.res = dict(self.res, status=None)
                    self.events.append(dict(event="head_restart", at_s=self.at_s()))
                    yield from self.say(
                        "job %s is gone from the cluster at %s: the Ray head restarted (Ray keeps no "
                        "jobs across a head restart)" % (self.sid, self.elapsed())
                    )
                    end = yield from self.end_attempt("head_restart", self.res, save_log=False)
                    if end:
                        return end
                    continue
                return (
                    "missing",
                    "Ray job %s does not exist on the cluster at %s (deleted, or the head restarted "
                    "before this wait began); run submit.yml again to start it" % (self.sid, self.address or "?"),
                )
            self.seen = True
            self.res = res
            yield from self.ask("progress", res)
            self.note_step(res.get("last_step"))
            yield from self.check_deadline()
            status = res.get("status")
            if self.expect_from is not None:
                end = yield from self.check_resumed(res, status)
                if end:
                    return end
            if status in recovery.TERMINAL:
                end = yield from self.on_end(status, res)
                if end:
                    return end
                continue
            if self.lost_here:
                event = "head_restart" if self.head_down() else "node_lost"
                if self.recoverable(event):
                    if event == "node_lost":  # a head that went down took the job with it
                        yield from self.say(
                            "stopping attempt %d (%s): it lost a node and would hang or fail" % (self.attempt, self.sid)
                        )
                        yield from self.ask("stop", self.sid)
                    end = yield from self.end_attempt(event, res, stopped=event == "node_lost")
                    if end:
                        return end
                    continue
            stall = self.opts["stall_timeout"]
            if stall > 0 and status == "RUNNING" and self.now - self.step_at >= stall:
                self.events.append(dict(event="stalled", at_s=self.at_s()))
                yield from self.say(
                    "no new step for %ds (last step %s): job %s is stalled"
                    % (self.now - self.step_at, "-" if self.step is None else self.step, self.sid)
                )
                recover = self.recoverable("stalled")
                if recover:
                    yield from self.ask("stop", self.sid)
                end = yield from self.end_attempt("stalled", res, stopped=recover)
                if end:
                    return end

    def resume(self) -> Steps[End]:
        """:meth:`watch` for a watchdog whose state was restored (the head's supervisor after a restart): a recovery it
        was in the middle of is done again from its start (its stops and its wait are harmless twice; the next attempt's
        id is the same), then the watch goes on with the clock of the run's start."""
        if self.recovering:
            why, self.recovering = self.recovering, None
            self.restarts -= 1  # recover() counts it again
            yield from self.say(
                "the supervisor restarted during the recovery after %s: doing it again from its start"
                % why.replace("_", " ")
            )
            end = yield from self.recover_once(why, self.res)
            if end:
                return end
        return (yield from self.watch())

    def note_step(self, step: int | None) -> None:
        """A new step restarts the stall clock; the first one of a resubmitted attempt times the recovery."""
        if step == self.step:
            return
        if (
            self.step is None
            and step is not None
            and self.events
            and "first_step_s" not in self.events[-1]
            and self.events[-1].get("event") == "resubmitted"
        ):
            self.events[-1]["first_step_s"] = self.at_s()
        self.step, self.step_at = step, self.now

    def check_deadline(self) -> Steps[None]:
        """Once an attempt has a pace (two steps seen), say where the deadline cuts the run (or that it ends before)."""
        if self.deadline is None or self.step is None:
            return
        if self.pace is None or self.pace[2] != self.attempt or self.step < self.pace[0]:
            self.pace = [self.step, self.now, self.attempt]
            return
        if self.deadline_said == self.attempt or self.step == self.pace[0] or self.now <= self.pace[1]:
            return
        self.deadline_said = self.attempt
        per_step = (self.now - self.pace[1]) / float(self.step - self.pace[0])
        yield from self.say(
            recovery.deadline_line(
                self.settings["deadline"], self.deadline - self.now, self.step, per_step, self.total_steps
            )
        )

    def check_resumed(self, res: Mapping[str, Any], status: str | None) -> Steps[End | None]:
        """A resubmitted attempt's first logged step proves its resume (the checkpoint's step + 1), or shows it started
        over: then it is stopped at once and the watch ends with one line, no further attempt (it would start over too).
        None while the attempt has logged no step yet, or when it resumed."""
        first = res.get("first_step")
        first = self.step if first is None else first  # no copy of the log: the first step this wait saw
        if first is None:
            return None
        expected, self.expect_from = self.expect_from, None
        event: dict[str, Any] = next((e for e in reversed(self.events) if e.get("event") == "resubmitted"), {})
        event["first_logged_step"] = first
        if first > expected:
            event["resume_proven"] = True
            yield from self.say(
                # pylint: disable-next=bad-string-format-type  # expected is set here (check_resumed runs after a resubmit)
                "attempt %d (%s) resumed from checkpoint step %d: its first step seen is %d"
                % (self.attempt, self.sid, expected, first)
            )
            return None
        event["resume_proven"] = False
        self.events.append(
            dict(event="not_resumed", at_s=self.at_s(), attempt=self.attempt, first_step=first, resume_step=expected)
        )
        stop = status not in recovery.TERMINAL
        if stop:
            yield from self.ask("stop", self.sid)
        yield from self.ask("save_log", self.sid)
        self.rows.append(recovery.attempt_row(self.attempt, self.sid, res, "not_resumed", stopped=stop))
        return (
            "not_resumed",
            # pylint: disable-next=bad-string-format-type  # as above
            "attempt %d (%s) started over at step %d instead of resuming from checkpoint step %d%s; "
            "no further attempt (it would start over too): %s; then run submit.yml with -e run=NEW"
            % (
                self.attempt,
                self.sid,
                first,
                expected,
                ": stopped it" if stop else "",
                recovery.not_resumed_cause((self.opts["job"] or {}).get("job_template"), expected),
            ),
        )

    def on_end(self, status: str, res: Mapping[str, Any]) -> Steps[End | None]:
        """An attempt that Ray says has ended: why (a lost node or the head can be the cause while Ray
        names none), then the end of the watch, or None when the next attempt was submitted."""
        head_gone = False
        if status in ("FAILED", "STOPPED") and not self.lost_here:
            head_gone = yield from self.head_going_down()
        if (
            status == "FAILED"
            and not self.lost_here
            and not head_gone
            and recovery.looks_like_lost_node("%s\n%s" % (res.get("message"), res.get("logs_tail")))
        ):
            yield from self.settle_nodes()
        event = recovery.end_event(status, self.lost_here)
        if head_gone or (event == "node_lost" and self.head_down()):
            event = "head_restart"
        if event == "succeeded":
            yield from self.end_attempt("succeeded", res)
            return ("succeeded", None)
        if event is None:  # never: end_event gives None only to a stop of ours (for the type checker)
            raise AssertionError("event is set here")
        return (yield from self.end_attempt(event, res))

    def head_going_down(self) -> Steps[bool]:
        """A job can end STOPPED or FAILED just before its head goes down (``ray stop`` ends the drivers
        first): look again before putting the end on the job."""
        yield from self.ask("sleep", 2)
        res = yield from self.ask("poll", 0, 0)
        if not res.get("reachable"):
            yield from self.say(
                "the Ray dashboard stopped answering as job %s ended: the head is going down" % self.sid
            )
            return True
        yield from self.watch_nodes(res.get("nodes") or [])
        return self.head_down()

    def settle_nodes(self, seconds: float = 60) -> Steps[None]:
        """A failure that reads like a lost node: watch the nodes until Ray marks one dead (its
        health checks take up to ~30 s) or ``seconds`` pass."""
        deadline = self.now + seconds
        while not self.lost_here and self.now < deadline:
            info = yield from self.ask("cluster", dict(timeout=10))
            if info.get("failed"):
                return
            yield from self.watch_nodes(info.get("nodes") or [])
            if not self.lost_here:
                yield from self.ask("sleep", 3)

    def watch_nodes(self, nodes: list[dict[str, Any]]) -> Steps[bool]:
        """Name every node that left since the last look; True when the head restarted."""
        if recovery.registering(self.known, nodes):
            # A restarted head's nodes register again within seconds: the restart is named when its new node is seen.
            return False
        head_now = recovery.head_id(nodes)
        restarted = bool(self.head and head_now and head_now != self.head)
        if restarted:
            yield from self.say(
                "the Ray head restarted at %s (a new head node joined); every Ray node re-registers" % self.elapsed()
            )
            self.known = {}
        for node in recovery.lost_nodes(self.known, nodes):
            label = recovery.node_label(node, self.names)
            if node.get("is_head"):
                yield from self.say(
                    "the Ray head %s went down at %s (ray-head restarting, or the node is down); Ray "
                    "loses its jobs with it" % (label, self.elapsed())
                )
            else:
                yield from self.say("node %s left the cluster at %s" % (label, self.elapsed()))
            entry = dict(
                label=label,
                node_ip=node.get("node_ip"),
                at=self.elapsed(),
                attempt=self.attempt,
                head=bool(node.get("is_head")),
            )
            self.lost.append(entry)
            self.lost_here.append(entry)
            self.events.append(
                dict(event="head_restart" if entry["head"] else "node_lost", node=label, at_s=self.at_s())
            )
            self.known.pop(node["node_id"], None)
        alive = recovery.alive(nodes)
        gone = set(n["label"] for n in self.lost) - set(m["node"] for m in self.marks if m["event"] == "node_back")
        for node_id, node in alive.items():
            label = recovery.node_label(node, self.names)
            if node_id not in self.known and label in gone:  # a node that left is alive again (a new node id)
                self.marks.append(dict(event="node_back", node=label, at_s=self.at_s()))
                gone.discard(label)
        self.known.update(alive)
        self.head = head_now or self.head
        return restarted

    def on_timeout(self) -> Steps[End]:
        status = self.res.get("status")
        if self.opts["stop_on_timeout"] and status in recovery.ACTIVE:
            yield from self.ask("stop", self.sid)
            self.res = yield from self.ask("poll", 0, None)
        self.rows.append(recovery.attempt_row(self.attempt, self.sid, self.res, "timeout"))
        yield from self.ask("save_log", self.sid)
        return (
            "timeout",
            "Ray job %s is still %s after %ss%s; %s"
            % (
                self.sid,
                status,
                self.opts["timeout"],
                " (verl step %s)" % self.res.get("last_step") if self.res.get("last_step") is not None else "",
                "stopped it (stop_on_timeout)" if self.opts["stop_on_timeout"] else "it keeps running",
            ),
        )

    # --- an attempt's end, and recovery ---------------------------------------------------------

    def end_attempt(
        self, why: str, res: Mapping[str, Any], save_log: bool = True, stopped: bool = False
    ) -> Steps[End | None]:
        """Record the attempt's end and save its log; then the end of the watch, or None when it goes on
        (succeeded: the caller ends it; recovered: the next attempt is watched)."""
        row = recovery.attempt_row(self.attempt, self.sid, res, why, stopped=stopped)
        if save_log:
            yield from self.ask("save_log", self.sid)
        self.rows.append(row)
        if why == "succeeded":
            return None
        if why == "stopped":  # somebody meant it: never "recovered"
            return (
                why,
                "Ray job %s was stopped from outside this wait (stop.yml, the dashboard or `ray job stop`); "
                "not resubmitted. To go on from its checkpoint, submit a new run (submit.yml with -e run=NEW)"
                % self.sid,
            )
        ok, reason = recovery.can_recover(why, self.settings, self.restarts)
        if not ok:
            return (why, self.failure_line(why, res, reason))
        return (yield from self.recover_once(why, res))

    def recover_once(self, why: str, res: Mapping[str, Any]) -> Steps[End | None]:
        """The recovery (``_watchdog_recovery.recover``), marked as under way while it runs (``recovering``)."""
        self.recovering = why
        try:
            return (yield from _watchdog_recovery.recover(self, why, res))
        finally:
            self.recovering = None

    def failure_line(self, why: str, res: Mapping[str, Any] | None, reason: str) -> str:
        lost = "; lost: %s" % ", ".join(n["label"] for n in self.lost) if self.lost else ""
        # A log read as the head went down can miss the steps that the wait has already seen.
        last = (res or {}).get("last_step")
        last = self.step if last is None else last
        step = " at step %s" % last if last is not None else ""
        status = (res or {}).get("status")
        what = {
            "failed": "ended FAILED%s%s"
            % (
                step,
                " (driver exit code %s)" % res.get("driver_exit_code")
                if res and res.get("driver_exit_code") is not None
                else "",
            ),
            "node_lost": "ended %s%s after a node left the cluster" % (status or "FAILED", step),
            "head_restart": "is gone%s: the Ray head restarted and Ray keeps no jobs across a restart" % step,
            "stalled": "is stalled%s: no new step for %ss (wait.stall_timeout)" % (step, self.opts["stall_timeout"]),
        }.get(why, why)
        todo = (
            "run submit.yml with -e run=NEW to resume from the checkpoint"
            if why in ("node_lost", "head_restart")
            else "it is left running: stop.yml stops it, or set recovery.on to restart it"
            if why == "stalled" and status in recovery.ACTIVE
            else "see the log"
        )
        return "Ray job %s %s%s; %s; %s" % (self.sid, what, lost, reason, todo)

    # --- the result ------------------------------------------------------------------------------

    def result(
        self,
        reason: str,
        line: str | None,
        now: float,
        job_url: str | None = None,
        log_paths: Iterable[str] = (),
        metrics: Mapping[str, Any] | None = None,
        artifacts_error: str = "",
        preferred: Iterable[str] = tuple(recovery.DEFAULT_METRICS),
    ) -> dict[str, Any]:
        """The wait's result: the job as last seen, every attempt, lost node and event, the summary lines.
        The artifacts (log paths, metrics files, why they could not be saved) are the action's."""
        log_paths = list(log_paths)
        out = {k: self.res.get(k) for k in RESULT_KEYS}
        out["dashboard_url"] = out["dashboard_url"] or job_url
        out["address"] = self.address
        out.update(
            succeeded=reason == "succeeded",
            submission_id=self.sid,
            attempt=self.attempt,
            attempts=self.rows,
            lost_nodes=self.lost,
            events=self.events,
            reason=reason,
            log_paths=log_paths,
            metrics=metrics or {},
            log_path=log_paths[-1] if log_paths else "",
            timed_out=reason == "timeout",
            waited_s=round(now - self.t0, 1),
            job_id=self.res.get("job_id"),
            artifacts_error=artifacts_error,
        )
        if reason != "succeeded":
            out["status"] = out["status"] if reason not in ("head_restart",) else None
            out["reason_line"] = line
        out["summary"] = recovery.summary_lines(out, preferred)
        return out
