# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_job_wait``: watch a Ray job until it ends, and recover it.

Every chunk of ``progress_interval`` seconds runs ``rlinfra.verl.ray_job_poll`` on the target (the
head, which reaches the dashboard) and prints one progress line. Between chunks this watchdog names
every node that leaves the cluster, notices a head restart (the job vanishes) and a stall (no new
``step:N`` for ``stall_timeout`` seconds), and, when the experiment's ``recovery`` allows it, stops
what is left of the attempt, waits for the cluster to be whole again, checks that the latest
checkpoint fits the cluster's shape, re-uploads the working_dir and submits the next attempt
(``<id>-a2``, ...) which resumes from the checkpoint. The decisions are in module_utils/recovery.py;
the result is complete (attempts, lost nodes, summary lines), the playbook only prints it.
Documentation: plugins/modules/ray_job_wait.py."""

from __future__ import annotations

import errno
import math
import os
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.rlinfra.verl.plugins.module_utils import attempts as A
from ansible_collections.rlinfra.verl.plugins.module_utils import experiment as E
from ansible_collections.rlinfra.verl.plugins.module_utils import recovery as R
from ansible_collections.rlinfra.verl.plugins.module_utils import experiment_schema as ES
from ansible_collections.rlinfra.verl.plugins.module_utils import vocabulary as V
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import typed_args
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy

display = Display()

DEFAULT_METRICS = R.DEFAULT_METRICS
ARGS = V.Args(
    submission_id=V.SubmissionId(required=True),
    base_submission_id=V.SubmissionId(empty=True, default=""),
    timeout=V.Int(1, default=86400),
    progress_interval=V.Int(1, default=60),
    poll_interval=V.Number(ES.MIN_POLL_INTERVAL, default=5.0),
    stop_on_timeout=V.Switch(default=False),
    stall_timeout=V.Int(0, default=0, hint=" (0 is off)"),
    outage_grace=V.Int(1, default=300),
    logs_tail_lines=V.Int(0, 10000, default=50),
    runtime_env=V.Raw("the run's runtime_env as verl_experiment rendered it (checked there)", ansible="dict", no_log=True),
    secret_names=V.ListOf(V.EnvName(), default=[]),
    # The secrets' values, only to mask them in logs and results: they are not in runtime_env (submit.yml
    # sends them by the run's secrets file, docs/SECURITY.md), and never go to Ray from here.
    secret_values=V.ListOf(V.Secret(multiline=True), default=[]),
    label=V.Text(default="", max_len=200),
    metrics=V.ListOf(V.Text(empty=False, max_len=200), default=DEFAULT_METRICS),
    max_metrics=V.Int(0, 100, default=5),
    recovery=V.Section(ES.SECTIONS["recovery"].fields, default={}),
    job=V.Raw("what a recovery resubmits, as verl_experiment rendered it", ansible="dict", default={}),
    checkpoint_dir=V.AbsPath(empty=True, default="", ansible="str"),
    hosts=V.ListOf(V.Text(empty=False, max_len=253), default=[]),
    log_dir=V.AbsPath(relative=True, empty=True, default="", ansible="str"),
    experiment=V.Raw("rlinfra.verl.verl_experiment's render result", ansible="dict"),
    package_src=V.AbsPath(relative=True, empty=True, default="", ansible="str"),
    **DASHBOARD_ARGS
)
# An empty address goes on empty to the modules on the target, which read it from the target's
# rlinfra_ray local fact.
ARGUMENT_SPEC = ARGS.spec
# What an `experiment` (a verl_experiment render result) gives when the option itself is not set.
FROM_WAIT = ("timeout", "progress_interval", "poll_interval", "stop_on_timeout", "stall_timeout", "outage_grace")
RESULT_KEYS = ("submission_id", "status", "message", "start_time", "end_time", "duration_s", "driver_exit_code",
               "logs_tail", "last_step", "last_metrics", "dashboard_url")
# Calls of ray_job_poll one poll may add to read a log that grew more than one call returns (8 MiB each).
CATCH_UP_CALLS = 64


def from_experiment(args, given):
    """``args`` completed from ``args['experiment']`` (a verl_experiment render result): the run's id,
    its wait settings, runtime_env, recovery, what a recovery submits, its checkpoints and hosts.
    An option set on the task wins."""
    exp = args["experiment"]
    package = exp.get("package")
    derived = dict(
        base_submission_id=exp.get("submission_id") or "", runtime_env=exp.get("runtime_env"),
        label=(exp.get("experiment") or {}).get("name") or "", recovery=(exp.get("experiment") or {}).get("recovery") or {},
        job=dict(job_template=exp.get("job_template"), metadata=exp.get("metadata") or {},
                 resources=exp.get("resources") or {},
                 package=dict(uri=package["uri"], src=args["package_src"]) if package else None),
        checkpoint_dir=exp.get("checkpoint_dir") or "", hosts=exp.get("cluster_hosts") or [],
        secret_names=list((exp.get("secrets") or {}).get("present") or []),
        **{k: (exp.get("wait") or {})[k] for k in FROM_WAIT if k in (exp.get("wait") or {})})
    out = dict(args)
    out.update((k, v) for k, v in derived.items() if k not in given)
    return out


class Done(Exception):
    """Ends the watch: ``reason`` names why, ``line`` says it to the user (None on success)."""

    def __init__(self, reason, line=None):
        super().__init__(line or reason)
        self.reason = reason
        self.line = line


class Watch:
    def __init__(self, action, args, task_vars):
        self.action = action
        self.args = args
        self.task_vars = task_vars
        self.clock = time.monotonic
        self.t0 = self.clock()
        self.settings = R.recovery_settings(args["recovery"])
        self.base = args["base_submission_id"] or args["submission_id"]
        self.sid = args["submission_id"]
        self.attempt = A.attempt_number(self.sid, self.base) or 1
        self.restarts = self.attempt - 1
        self.label = args["label"] or self.base
        self.names = self.node_names(args["hosts"])
        self.dash = dict(address=args["address"], auth_token=args["auth_token"], auth_token_path=args["auth_token_path"],
                         validate_certs=args["validate_certs"])
        # The dashboard URL the modules on the target used (the option, or the target's local fact), and the
        # job's link there as ray_job_poll last gave it.
        self.address = args["address"]
        self.job_url = None
        self.known = {}          # node_id -> node, alive when last seen
        self.head = None         # node_id of the alive head
        self.lost = []           # every node that left, for the summary
        self.rows = []           # one per ended attempt
        self.events = []         # timings of faults and recoveries
        self.log_paths = []
        self.artifacts_error = ""  # why the log or metrics could not be saved (the job's status is not affected)
        self.metrics = {}        # the newest metrics files written (verl_metrics.write)
        self.metrics_at = None   # when they were last refreshed while the job ran
        self.res = {}
        self.copy = None         # the attempt's log as followed here (plugin_utils/log_copy.py)
        self.min_nodes = self.settings["min_nodes"]
        self.new_attempt()

    # --- plumbing ---------------------------------------------------------------------------

    def elapsed(self):
        return R.hms(self.clock() - self.t0)

    def say(self, line):
        display.display("%s: %s" % (self.label, line))

    def module(self, name, args):
        if name in node_script.SCRIPTED:  # a plain script on the target when it can
            return node_script.call(self.action, self.task_vars, name, args)
        return self.action._execute_module(module_name=name, module_args=args, task_vars=self.task_vars)

    def node_names(self, hosts):
        """Address -> inventory host, for lines that name a node the way the user knows it."""
        names = {}
        hostvars = self.task_vars.get("hostvars") or {}
        for host in hosts:
            try:
                hv = hostvars[host]
                facts = (hv.get("ansible_local") or {}).get("rlinfra_ray") or {}
                candidates = (hv.get("ray_node_ip"), facts.get("node_ip"), hv.get("ray_private_ip"), hv.get("ansible_host"))
            except (KeyError, AnsibleError, AttributeError):
                continue
            for value in candidates:
                if value and isinstance(value, str) and "{{" not in value:
                    names.setdefault(value, host)
            names.setdefault(host, host)
        return names

    def new_attempt(self):
        self.started = self.clock()
        self.step = None
        self.step_at = self.clock()
        self.lost_here = []
        self.seen = False

    # --- reading ----------------------------------------------------------------------------

    def poll(self, seconds, tail=None):
        copy = self.log_copy(self.sid)
        res = self.module("rlinfra.verl.ray_job_poll", self.poll_args(seconds, tail, copy))
        if res.get("failed"):  # a rejected token, a bad argument, no dashboard address: nothing a retry fixes
            raise Done("error", res.get("msg") or "ray_job_poll failed")
        self.address = res.get("address") or self.address
        self.job_url = res.get("dashboard_url") or self.job_url
        self.take_log(copy, res)
        return res

    def poll_args(self, seconds, tail, copy):
        """ray_job_poll's arguments: it reads only the log's bytes after the copy's offset."""
        return dict(
            self.dash, submission_id=self.sid, timeout=int(seconds), poll_interval=self.args["poll_interval"],
            logs_tail_lines=self.args["logs_tail_lines"] if tail is None else tail,
            runtime_env=self.mask_env(), secret_names=self.args["secret_names"], **copy.poll_args())

    def log_copy(self, sid):
        """The attempt's log as followed here: a new one for a new attempt."""
        if self.copy is None or self.copy.sid != sid:
            check_mode = getattr(getattr(self.action, "_task", None), "check_mode", False)  # writes nothing then
            self.copy = LogCopy(sid, "" if check_mode else self.args["log_dir"], self.mask_log)
        return self.copy

    def take_log(self, copy, res):
        """Append what the poll read of the log to the copy and the metrics (more calls while the log has more than
        one call returns: a wait that comes to a long run catches up once); the newest step is the copy's."""
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

    def feed_log(self, copy, res):
        try:
            return copy.take(res)
        except OSError as e:  # the copy stops; the metrics and the watch go on
            self.artifact_failed(self.args["log_dir"], e)
            return copy.behind

    def mask_env(self):
        """What ray_job_poll masks by: the values of the runtime_env and the secret values."""
        env = dict((self.args["runtime_env"] or {}).get("env_vars") or {})
        env.update(("RLINFRA_SECRET_%d" % i, v) for i, v in enumerate(self.args["secret_values"]) if v)
        return {"env_vars": env}

    def watch_nodes(self, nodes):
        """Name every node that left since the last look; True when the head restarted."""
        head_now = R.head_id(nodes)
        restarted = bool(self.head and head_now and head_now != self.head)
        if restarted:
            self.say("the Ray head restarted at %s (a new head node joined); every Ray node re-registers"
                     % self.elapsed())
            self.known = {}
        for node in R.lost_nodes(self.known, nodes):
            label = R.node_label(node, self.names)
            if node.get("is_head"):
                self.say("the Ray head %s went down at %s (ray-head restarting, or the node is down); Ray loses its "
                         "jobs with it" % (label, self.elapsed()))
            else:
                self.say("node %s left the cluster at %s" % (label, self.elapsed()))
            entry = dict(label=label, node_ip=node.get("node_ip"), at=self.elapsed(), attempt=self.attempt,
                         head=bool(node.get("is_head")))
            self.lost.append(entry)
            self.lost_here.append(entry)
            self.events.append(dict(event="head_restart" if entry["head"] else "node_lost", node=label,
                                    at_s=round(self.clock() - self.t0, 1)))
            self.known.pop(node["node_id"], None)
        self.known.update(R.alive(nodes))
        self.head = head_now or self.head
        return restarted

    # --- the loop ---------------------------------------------------------------------------

    def run(self):
        deadline = self.t0 + self.args["timeout"]
        outage = None
        while True:
            remaining = deadline - self.clock()
            if remaining <= 0:
                self.on_timeout()
            chunk = max(1, min(self.args["progress_interval"], int(math.ceil(remaining))))
            res = self.poll(chunk)
            if not res.get("reachable"):
                if outage is None:
                    outage = self.clock()
                    self.say("the Ray dashboard does not answer (%s); waiting up to %ss for it"
                             % (res.get("error"), self.args["outage_grace"]))
                    self.events.append(dict(event="unreachable", at_s=round(self.clock() - self.t0, 1)))
                if self.clock() - outage > self.args["outage_grace"]:
                    raise Done("unreachable", "the Ray dashboard at %s has not answered for %ds (%s): the state of job "
                               "%s is unknown. Check the head (systemctl status ray-head), then run status.yml for the "
                               "experiment" % (self.address or "?", self.clock() - outage, res.get("error"), self.sid))
                time.sleep(min(5.0, self.args["poll_interval"] * 2))
                continue
            if outage is not None:
                self.say("the Ray dashboard answers again after %ds" % (self.clock() - outage))
                outage = None
            restarted = self.watch_nodes(res.get("nodes") or [])
            if not res.get("found"):
                if self.seen or restarted:
                    self.res = dict(self.res, status=None)
                    self.events.append(dict(event="head_restart", at_s=round(self.clock() - self.t0, 1)))
                    self.say("job %s is gone from the cluster at %s: the Ray head restarted (Ray keeps no jobs across "
                             "a head restart)" % (self.sid, self.elapsed()))
                    self.end_attempt("head_restart", self.res, save_log=False)
                    continue
                raise Done("missing", "Ray job %s does not exist on the cluster at %s (deleted, or the head restarted "
                           "before this wait began); run submit.yml again to start it" % (self.sid, self.address or "?"))
            self.seen = True
            self.res = res
            self.say_progress(res)
            self.refresh_metrics(res)
            if res.get("last_step") != self.step:
                if self.step is None and res.get("last_step") is not None and self.events and \
                        "first_step_s" not in self.events[-1] and self.events[-1].get("event") == "resubmitted":
                    self.events[-1]["first_step_s"] = round(self.clock() - self.t0, 1)
                self.step, self.step_at = res.get("last_step"), self.clock()
            status = res.get("status")
            if status in R.TERMINAL:
                head_gone = status in ("FAILED", "STOPPED") and not self.lost_here and self.head_going_down()
                if status == "FAILED" and not self.lost_here and not head_gone and \
                        R.looks_like_lost_node("%s\n%s" % (res.get("message"), res.get("logs_tail"))):
                    self.settle_nodes()
                event = R.end_event(status, self.lost_here)
                if head_gone or (event == "node_lost" and self.head_down()):
                    event = "head_restart"
                if event == "succeeded":
                    self.end_attempt("succeeded", res)
                    return
                self.end_attempt(event, res)
                continue
            if self.lost_here:
                event = "head_restart" if self.head_down() else "node_lost"
                if self.recoverable(event):
                    if event == "node_lost":  # a head that went down took the job with it
                        self.say("stopping attempt %d (%s): it lost a node and would hang or fail"
                                 % (self.attempt, self.sid))
                        self.stop(self.sid)
                    self.end_attempt(event, res, stopped=event == "node_lost")
                    continue
            stall = self.args["stall_timeout"]
            if stall > 0 and status == "RUNNING" and self.clock() - self.step_at >= stall:
                self.events.append(dict(event="stalled", at_s=round(self.clock() - self.t0, 1)))
                self.say("no new step for %ds (last step %s): job %s is stalled" % (
                    self.clock() - self.step_at, "-" if self.step is None else self.step, self.sid))
                recover = self.recoverable("stalled")
                if recover:
                    self.stop(self.sid)
                self.end_attempt("stalled", res, stopped=recover)

    def head_down(self):
        return any(n["head"] for n in self.lost_here)

    def head_going_down(self):
        """A job can end STOPPED or FAILED just before its head goes down (``ray stop`` ends the drivers
        first): look again before putting the end on the job."""
        time.sleep(2)
        res = self.poll(0, tail=0)
        if not res.get("reachable"):
            self.say("the Ray dashboard stopped answering as job %s ended: the head is going down" % self.sid)
            return True
        self.watch_nodes(res.get("nodes") or [])
        return self.head_down()

    def settle_nodes(self, seconds=60):
        """A failure that reads like a lost node: watch the nodes until Ray marks one dead (its
        health checks take up to ~30 s) or ``seconds`` pass."""
        deadline = self.clock() + seconds
        while not self.lost_here and self.clock() < deadline:
            info = self.cluster(timeout=10)
            if info.get("failed"):
                return
            self.watch_nodes(info.get("nodes") or [])
            if not self.lost_here:
                time.sleep(3)

    def say_progress(self, res):
        display.display(R.progress_line(self.label, res, self.args["metrics"], self.args["max_metrics"], self.attempt))

    def recoverable(self, event):
        return R.can_recover(event, self.settings, self.restarts)[0]

    def end_attempt(self, why, res, save_log=True, stopped=False):
        """Record the attempt's end, save its log, then recover or stop the watch."""
        row = R.attempt_row(self.attempt, self.sid, res, why, stopped=stopped)
        if save_log:
            self.save_log(self.sid)
        self.rows.append(row)
        if why == "succeeded":
            return
        if why == "stopped":  # somebody meant it: never "recovered"
            raise Done(why, "Ray job %s was stopped from outside this wait (stop.yml, the dashboard or `ray job stop`); "
                       "not resubmitted. To go on from its checkpoint, submit a new run (submit.yml with -e run=NEW)"
                       % self.sid)
        ok, reason = R.can_recover(why, self.settings, self.restarts)
        if not ok:
            raise Done(why, self.failure_line(why, res, reason))
        self.recover(why, res)

    def failure_line(self, why, res, reason):
        lost = "; lost: %s" % ", ".join(n["label"] for n in self.lost) if self.lost else ""
        # A log read as the head went down can miss the steps that the wait has already seen.
        last = (res or {}).get("last_step")
        last = self.step if last is None else last
        step = " at step %s" % last if last is not None else ""
        status = (res or {}).get("status")
        what = {
            "failed": "ended FAILED%s%s" % (
                step, " (driver exit code %s)" % res.get("driver_exit_code")
                if res and res.get("driver_exit_code") is not None else ""),
            "node_lost": "ended %s%s after a node left the cluster" % (status or "FAILED", step),
            "head_restart": "is gone%s: the Ray head restarted and Ray keeps no jobs across a restart" % step,
            "stalled": "is stalled%s: no new step for %ss (wait.stall_timeout)" % (step, self.args["stall_timeout"]),
        }.get(why, why)
        todo = ("run submit.yml with -e run=NEW to resume from the checkpoint" if why in ("node_lost", "head_restart")
                else "it is left running: stop.yml stops it, or set recovery.on to restart it" if why == "stalled"
                and status in R.ACTIVE else "see the log")
        return "Ray job %s %s%s; %s; %s" % (self.sid, what, lost, reason, todo)

    # --- recovery ---------------------------------------------------------------------------

    def stop(self, sid):
        res = self.module("rlinfra.verl.ray_job", dict(
            self.dash, submission_id=sid, state="stopped", wait_timeout=120, logs_tail_lines=0))
        if res.get("failed"):
            self.say("could not stop %s: %s" % (sid, res.get("msg")))

    def cluster(self, **kwargs):
        return self.module("rlinfra.verl.ray_cluster_info", dict(self.dash, **kwargs))

    def recover(self, why, res):
        self.restarts += 1
        detected = round(self.clock() - self.t0, 1)
        self.say("attempt %d (%s) ended: %s, at step %s; recovery %d of %d" % (
            self.attempt, self.sid, R.WHY.get(why, why), "-" if res.get("last_step") is None else res["last_step"],
            self.restarts, self.settings["max_restarts"]))
        # Never two runs of one experiment at once: stop every attempt of this run that is still active.
        info = self.cluster(jobs=True, timeout=60, wait_for_nodes=1)
        for job in A.attempts_of(info.get("jobs") or [], self.base):
            if job.get("status") in R.ACTIVE:
                self.say("stopping %s (still %s) before the next attempt" % (job["submission_id"], job["status"]))
                self.stop(job["submission_id"])
        if self.min_nodes is None:
            first = self.res.get("metadata") or {}
            try:
                self.min_nodes = int(first.get("rlinfra_nodes") or 0) or len(self.known) or 1
            except ValueError:
                self.min_nodes = len(self.known) or 1
        time.sleep(float(self.settings["backoff_s"]))
        self.say("waiting up to %ss for %d alive node(s)" % (self.settings["node_wait_timeout"], self.min_nodes))
        info = self.cluster(wait_for_nodes=self.min_nodes, timeout=int(self.settings["node_wait_timeout"]))
        if info.get("failed"):
            raise Done("no_nodes", "Ray job %s was not resubmitted: %s%s. Bring the nodes back (site.yml), then run "
                       "submit.yml again; it attaches to the newest attempt" % (
                           self.sid, info.get("msg"), "; lost: %s" % ", ".join(n["label"] for n in self.lost)
                           if self.lost else ""))
        nodes = info.get("nodes") or []
        self.watch_nodes(nodes)
        ckpt = {}
        if self.args["checkpoint_dir"]:
            ckpt = self.module("rlinfra.verl.verl_checkpoint_info", dict(path=self.args["checkpoint_dir"]))
            if ckpt.get("failed"):
                raise Done("checkpoint", "cannot read the checkpoint directory %s on the head: %s"
                           % (self.args["checkpoint_dir"], ckpt.get("msg")))
        ok, line = R.shape_check(ckpt, nodes, self.settings["allow_reshard"])
        if line:
            self.say(line)
        if not ok:
            raise Done("shape", "Ray job %s was not resubmitted: %s" % (self.sid, line))
        self.resubmit(why, nodes, ckpt, detected)

    def resubmit(self, why, nodes, ckpt, detected):
        job = self.args["job"] or {}
        if not job.get("job_template"):
            raise Done(why, "Ray job %s %s; the wait has no job to resubmit (no job given)" % (self.sid, R.WHY[why]))
        package = job.get("package") or None
        if package:
            up = self.module("rlinfra.verl.ray_package", dict(self.dash, uri=package["uri"], src=package["src"]))
            if up.get("failed"):
                raise Done("package", "the working_dir package %s could not be uploaded again: %s; run submit.yml "
                           "again" % (package["uri"], up.get("msg")))
        entrypoint, nnodes, gpus = E.reshape(job["job_template"], nodes)
        previous, self.attempt = self.sid, self.attempt + 1
        self.sid = A.attempt_id(self.base, self.attempt)
        metadata = dict(job.get("metadata") or {}, rlinfra_attempt=str(self.attempt), rlinfra_previous=previous,
                        rlinfra_recovered_from=why)
        res = self.module("rlinfra.verl.ray_job", dict(self.dash, **A.submit_args(
            self.sid, entrypoint, self.args["runtime_env"], metadata, job.get("resources"))))
        if res.get("failed"):
            raise Done("submit", "attempt %d (%s) could not be submitted: %s" % (self.attempt, self.sid, res.get("msg")))
        step = (ckpt or {}).get("latest_step")
        self.say("attempt %d (%s) submitted at %s after %s; %s" % (
            self.attempt, self.sid, self.elapsed(), why.replace("_", " "),
            "resumes from checkpoint step %s" % step if step is not None else "no checkpoint yet: starts from scratch"))
        self.events.append(dict(event="resubmitted", after=why, detected_s=detected,
                                submitted_s=round(self.clock() - self.t0, 1), attempt=self.attempt,
                                resume_step=step))
        self.new_attempt()

    def on_timeout(self):
        status = self.res.get("status")
        if self.args["stop_on_timeout"] and status in R.ACTIVE:
            self.stop(self.sid)
            self.res = self.poll(0)
        self.rows.append(R.attempt_row(self.attempt, self.sid, self.res, "timeout"))
        self.save_log(self.sid)
        raise Done("timeout", "Ray job %s is still %s after %ss%s; %s" % (
            self.sid, status, self.args["timeout"],
            " (verl step %s)" % self.res.get("last_step") if self.res.get("last_step") is not None else "",
            "stopped it (stop_on_timeout)" if self.args["stop_on_timeout"] else "it keeps running"))

    # --- logs -------------------------------------------------------------------------------

    def mask_log(self, text):
        """The driver log's text with the secrets masked (by ray_job_poll, then by value here)."""
        if not text:
            return text
        for name in self.args["secret_names"]:
            value = ((self.args["runtime_env"] or {}).get("env_vars") or {}).get(name)
            if value:
                text = text.replace(str(value), E.MASK)
        return E.mask_secrets(text, self.args["secret_values"])

    def artifacts_dir(self):
        """The run's artifacts directory, made 0700 when missing; None (and one line, once) when it cannot be used:
        the job goes on, and its status is what the wait reports."""
        path = self.args["log_dir"]
        try:
            if os.path.islink(path):
                raise OSError(errno.ELOOP, "it is a symbolic link (to %s); artifacts are never written through one"
                              % os.path.realpath(path))
            os.makedirs(path, mode=0o700, exist_ok=True)
            return path
        except OSError as e:
            self.artifact_failed(path, e)
            return None

    def artifact_failed(self, path, e):
        if not self.artifacts_error:
            self.artifacts_error = "the driver log and metrics could not be saved in %s: %s; the job's status above " \
                                   "is Ray's own" % (path, e.strerror or e)
            self.say(self.artifacts_error)

    def save_log(self, sid):
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

    def refresh_metrics(self, res):
        """While the job runs: the metrics files again, at most once per progress interval, when a step is new."""
        if not self.args["log_dir"] or res.get("last_step") is None or res.get("last_step") == self.metrics.get("last_step"):
            return
        if self.metrics_at is not None and self.clock() - self.metrics_at < self.args["progress_interval"]:
            return
        self.metrics_at = self.clock()
        if self.artifacts_dir():
            self.write_metrics(self.sid, last_step=res.get("last_step"))

    def write_metrics(self, sid, last_step=None):
        """The metrics files from the lines followed so far: only the rows that are new are written."""
        try:
            written = self.log_copy(sid).metrics.write()
        except OSError as e:  # a full disk must not end the wait: the job goes on
            self.artifact_failed(self.args["log_dir"], e)
            return
        except ValueError as e:
            self.say("could not write the metrics of %s: %s" % (sid, e))
            return
        if written["csv"]:
            self.metrics = dict(written, last_step=last_step)

    def result(self, reason, line):
        out = {k: self.res.get(k) for k in RESULT_KEYS}
        out["dashboard_url"] = out["dashboard_url"] or self.job_url
        out["address"] = self.address
        out.update(succeeded=reason == "succeeded", submission_id=self.sid, attempt=self.attempt, attempts=self.rows, lost_nodes=self.lost,
                   events=self.events, reason=reason, log_paths=self.log_paths, metrics=self.metrics,
                   log_path=self.log_paths[-1]
                   if self.log_paths else "", timed_out=reason == "timeout",
                   waited_s=round(self.clock() - self.t0, 1), job_id=self.res.get("job_id"),
                   artifacts_error=self.artifacts_error)
        if reason != "succeeded":
            out["status"] = out["status"] if reason not in ("head_restart",) else None
            out["reason_line"] = line
        out["summary"] = R.summary_lines(out, self.args["metrics"])
        return out


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args, failure = typed_args(self, ARGS)
        if failure:
            return dict(result, **failure)
        if args["experiment"]:
            args = from_experiment(args, set(self._task.args))
        watch = Watch(self, args, task_vars)
        try:
            if self._task.check_mode:
                try:
                    res = watch.poll(0)
                except Done as done:  # e.g. no dashboard address on the target: the module's one line
                    return dict(result, failed=True, changed=False, msg=done.line, address=watch.address)
                watch.res = res
                if res.get("found"):
                    watch.say_progress(res)
                result.update(watch.result("check_mode", None), changed=False)
                return result
            try:
                watch.run()
                result.update(watch.result("succeeded", None), changed=False)
            except Done as done:
                result.update(watch.result(done.reason, done.line), changed=bool(watch.restarts), failed=True,
                              msg=done.line)
            except (AnsibleError, OSError, ValueError, KeyError, TypeError) as e:
                # Still a result with the job's last known status and the summary, never a bare traceback.
                line = "the wait stopped on an unexpected %s: %s; the job was not stopped (status.yml shows it)" % (
                    type(e).__name__, " ".join(str(e).split())[:300])
                result.update(watch.result("error", line), changed=bool(watch.restarts), failed=True, msg=line)
            result["changed"] = len(watch.rows) > 1 or result.get("changed", False)
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
