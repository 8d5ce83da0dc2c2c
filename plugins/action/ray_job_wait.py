# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_job_wait``: watch a Ray job until it ends, and recover it.

Every chunk of ``progress_interval`` seconds runs ``rlinfra.verl.ray_job_poll`` on the target (the
head, which reaches the dashboard) and prints one progress line. Between chunks this watchdog names
every node that leaves the cluster, notices a head restart (the job vanishes) and a stall (no new
``step:N`` for ``stall_timeout`` seconds), and, when the experiment's ``recovery`` allows it, stops
what is left of the attempt, waits for the cluster to be whole again, checks that the latest
checkpoint fits the cluster's shape, re-uploads the working_dir and submits the next attempt
(``<id>-a2``, ...) which resumes from the checkpoint. Every decision and line of it is
module_utils/ray/watchdog.py's state machine (its rules in module_utils/ray/recovery.py); this action does
the I/O it asks for. The result is complete (attempts, lost nodes, summary lines), the playbook only prints it.
Documentation: plugins/modules/ray_job_wait.py."""

from __future__ import annotations

import errno
import os
import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files, masking, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.switches import switch_value
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.run_cost import node_prices, run_cost, run_seconds
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import report as run_report
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts, supervisor, watchdog
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import DEFAULT_METRICS, progress_line
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_schema, experiment_source
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import typed_args

display = Display()

SUPERVISE = ("cluster", "controller")
ARGS = vocabulary.Args(
    submission_id=vocabulary.SubmissionId(required=True),
    base_submission_id=vocabulary.SubmissionId(empty=True, default=""),
    timeout=vocabulary.Seconds(1, integer=True, default=86400),
    progress_interval=vocabulary.Seconds(1, integer=True, default=60),
    poll_interval=vocabulary.Seconds(experiment_schema.MIN_POLL_INTERVAL, default=5.0),
    stop_on_timeout=vocabulary.Switch(default=False),
    stall_timeout=vocabulary.Seconds(0, integer=True, default=0, hint=" (0 is off)"),
    outage_grace=vocabulary.Seconds(1, integer=True, default=300),
    logs_tail_lines=vocabulary.Int(0, 10000, default=50),
    runtime_env=vocabulary.Raw(
        "the run's runtime_env as verl_experiment_render rendered it (checked there)", ansible="dict", no_log=True
    ),
    secret_names=vocabulary.ListOf(vocabulary.EnvName(), default=[]),
    # The secrets' values, only to mask them in logs and results: they are not in runtime_env (submit.yml
    # sends them by the run's secrets file, docs/SECURITY.md), and never go to Ray from here.
    secret_values=vocabulary.ListOf(vocabulary.Secret(multiline=True), default=[]),
    label=vocabulary.Text(default="", max_len=200),
    metrics=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=200), default=DEFAULT_METRICS),
    max_metrics=vocabulary.Int(0, 100, default=5),
    recovery=vocabulary.Section(experiment_schema.SECTIONS["recovery"].fields, default={}),
    job=vocabulary.Raw("what a recovery resubmits, as verl_experiment_render rendered it", ansible="dict", default={}),
    checkpoint_dir=vocabulary.AbsPath("reads", empty=True, default="", ansible="str"),
    hosts=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=253), default=[]),
    left_out=vocabulary.ListOf(vocabulary.Text(max_len=2000), default=[]),
    log_dir=vocabulary.AbsPath("local", relative=True, empty=True, default="", ansible="str"),
    experiment=vocabulary.Raw("rlinfra.verl.verl_experiment_render's result", ansible="dict"),
    package_src=vocabulary.AbsPath("reads", relative=True, empty=True, default="", ansible="str"),
    # Where the watchdog runs: on the head as the run's systemd unit (module_utils/ray/supervisor.py; this action then
    # follows it), or in this action (the wait's own process: the run recovers only while it watches).
    supervise=vocabulary.Choice(SUPERVISE, default="cluster"),
    # With supervise=cluster: false starts the supervisor and returns (submit.yml's wait=false).
    follow=vocabulary.Switch(default=True),
    secrets_file=vocabulary.AbsPath("reads", empty=True, default="", ansible="str"),
    # The rentals once the run has ended (supervisor.ON_END; "" is the experiment's on_end), and what gives them back.
    on_end=vocabulary.Choice(("", "keep", "release", "release_always"), default=""),
    cluster=vocabulary.Name(empty=True, default=""),
    hyperbolic_api_key=vocabulary.Secret(default=""),
    hyperbolic_api_url=vocabulary.Url(empty=True, default=""),
    release_grace=vocabulary.Seconds(0, integer=True, default=60),
    # recovery.replace: the head's kit (roles/verl_job/tasks/replace_kit.yml).
    replace_dir=vocabulary.AbsPath("owns", empty=True, default="", ansible="str"),
    **DASHBOARD_ARGS,
)
# An empty address goes on empty to the modules on the target, which read it from the target's
# rlinfra_ray local fact.
ARGUMENT_SPEC = ARGS.spec
# What an `experiment` (a verl_experiment_render result) gives when the option itself is not set.
FROM_WAIT = (
    "timeout",
    "progress_interval",
    "poll_interval",
    "stop_on_timeout",
    "stall_timeout",
    "outage_grace",
    "supervise",
)
# How long a supervisor may be down (systemd restarts it after 10 s) before the follower says so and ends.
SUPERVISOR_DOWN_S = 90
# Calls of ray_job_poll one poll may add to read a log that grew more than one call returns (8 MiB each).
CATCH_UP_CALLS = 64


def from_experiment(args, given):
    """``args`` completed from ``args['experiment']`` (a verl_experiment_render result): the run's id,
    its wait settings, runtime_env, recovery, what a recovery submits, its checkpoints and hosts.
    An option set on the task wins."""
    exp = args["experiment"]
    package = exp.get("package")
    derived = dict(
        base_submission_id=exp.get("submission_id") or "",
        runtime_env=exp.get("runtime_env"),
        label=(exp.get("experiment") or {}).get("name") or "",
        recovery=(exp.get("experiment") or {}).get("recovery") or {},
        job=dict(
            job_template=exp.get("job_template"),
            metadata=exp.get("metadata") or {},
            resources=exp.get("resources") or {},
            package=dict(uri=package["uri"], src=args["package_src"]) if package else None,
        ),
        checkpoint_dir=exp.get("checkpoint_dir") or "",
        hosts=exp.get("cluster_hosts") or [],
        secret_names=list((exp.get("secrets") or {}).get("present") or []),
        secrets_file=exp.get("secrets_file") or "",
        cluster=exp.get("cluster") or "",
        **{k: (exp.get("wait") or {})[k] for k in FROM_WAIT if k in (exp.get("wait") or {})},
    )
    out = dict(args)
    out.update((k, v) for k, v in derived.items() if k not in given)
    if not out["on_end"]:
        out["on_end"] = (exp.get("experiment") or {}).get("on_end") or "keep"
    return out


class Done(Exception):
    """Ends the watch: ``reason`` names why, ``line`` says it to the user (None on success)."""

    def __init__(self, reason, line=None):
        super().__init__(line or reason)
        self.reason = reason
        self.line = line


class Watch:
    """The watch's I/O: the modules it runs on the target, the lines it prints, the log and metrics it saves
    on the controller. What to do next is module_utils/ray/watchdog.py's (``self.dog``); this only does it."""

    def __init__(self, action, args, task_vars):
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
        self.job_url = None
        self.log_paths = []
        self.artifacts_error = ""  # why the log or metrics could not be saved (the job's status is not affected)
        self.metrics = {}  # the newest metrics files written (verl_metrics.write)
        self.metrics_at = None  # when they were last refreshed while the job ran
        self.copy = None  # the attempt's log as followed here (plugin_utils/log_copy.py)
        self.past = []  # (submission id, its metrics Follow) of the attempts before the current one
        self.report = ""  # the run report's path once written (observe/report.py)
        self.checkpoint = None  # the newest checkpoint step the supervisor saw: {step, dir, at}
        self.unit = None  # the run's supervisor on the head (supervise=cluster)
        self.given_back = {}  # its end as it said it, with the machines given back (on_end)

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
            self.dash,
            submission_id=self.sid,
            timeout=int(seconds),
            poll_interval=self.args["poll_interval"],
            logs_tail_lines=self.args["logs_tail_lines"] if tail is None else tail,
            runtime_env=self.mask_env(),
            secret_names=self.args["secret_names"],
            **copy.poll_args(),
        )

    def log_copy(self, sid):
        """The attempt's log as followed here: a new one for a new attempt."""
        if self.copy is None or self.copy.sid != sid:
            if self.copy is not None and self.copy.base and all(s != self.copy.sid for s, dummy in self.past):
                self.past.append((self.copy.sid, self.copy.metrics))  # its curves stay in the run's report
            check_mode = getattr(getattr(self.action, "_task", None), "check_mode", False)  # writes nothing then
            self.copy = LogCopy(sid, "" if check_mode else self.args["log_dir"], self.mask_log)
        return self.copy

    def take_log(self, copy, res):
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

    def feed_log(self, copy, res):
        try:
            return copy.take(res)
        except OSError as e:  # the copy stops; the metrics and the watch go on
            self.artifact_failed(self.args["log_dir"], e, "the driver log")
            return copy.behind

    def mask_env(self):
        """What ray_job_poll masks by: the values of the runtime_env and the secret values."""
        env = dict((self.args["runtime_env"] or {}).get("env_vars") or {})
        env.update(("RLINFRA_SECRET_%d" % i, v) for i, v in enumerate(self.args["secret_values"]) if v)
        return {"env_vars": env}

    # --- the loop: the machine's requests, done ---------------------------------------------------

    def run(self):
        """Does what the watchdog asks until it ends the watch; raises Done unless the job succeeded."""
        steps = self.dog.watch(self.t0)
        ended = None
        try:
            request = next(steps)
            while True:
                answer = self.do(request)
                request = steps.send((answer, self.clock()))
        except StopIteration as end:
            ended = end.value
        finally:
            steps.close()
        reason, line = ended
        if reason != "succeeded":
            raise Done(reason, line)

    def do(self, request):
        kind, params = request[0], request[1:]
        if kind == "poll":
            return self.poll(params[0], tail=params[1])
        if kind == "say":
            return self.say(params[0])
        if kind == "progress":
            self.say_progress(params[0])
            return self.refresh_metrics(params[0])
        if kind == "sleep":
            return time.sleep(params[0])
        if kind == "stop":
            return self.stop(params[0])
        if kind == "save_log":
            return self.save_log(params[0])
        if kind == "cluster":
            return self.cluster(**params[0])
        if kind == "checkpoint":
            return self.module("rlinfra.verl.verl_checkpoint_info", dict(path=params[0]))
        if kind == "upload":
            return self.module("rlinfra.verl.ray_package", dict(self.dash, uri=params[0]["uri"], src=params[0]["src"]))
        if kind == "submit":
            sid, entrypoint, metadata, resources = params
            return self.module(
                "rlinfra.verl.ray_job",
                dict(self.dash, **attempts.submit_args(sid, entrypoint, self.args["runtime_env"], metadata, resources)),
            )
        if kind == "replace":  # refused at submit (roles/verl_job/tasks/run.yml); a caller of the module alone
            return dict(
                failed=True,
                msg="recovery.replace is done by the run's supervisor on the head (wait.supervise: "
                "cluster), not by a wait on the controller",
            )
        raise ValueError("the watchdog asked for %r, which the wait does not do" % kind)

    # --- the run's supervisor on the head: started here, then followed -----------------------------------

    def supervisor_config(self):
        """What the supervisor needs (module_utils/ray/supervisor.py): the watch's options, the dashboard as given (empty:
        the head's own fact and token file), each node-side function's defaults, what to mask, the secrets file."""
        args = self.args
        wanted = dict((k, args[k]) for k in watchdog.OPTIONS if k in args)
        wanted.update(submission_id=self.sid, runtime_env=args["runtime_env"] or {})
        defaults = {}
        for name in ("ray_job_poll", "ray_job", "ray_cluster_info", "ray_package"):
            spec = node_script.declared_spec("rlinfra.verl." + name)
            defaults[name] = dict((k, v.get("default")) for k, v in spec.items())
        dash = dict((k, v) for k, v in self.dash.items() if v not in (None, ""))
        release = dict(
            label=args["cluster"],
            api_url=args["hyperbolic_api_url"] or "https://api.hyperbolic.xyz",
            record="/etc/rlinfra/hyperbolic-%s.json" % (args["cluster"] or "default"),
            grace_s=args["release_grace"],
        )
        out = dict(
            args=wanted,
            dash=dash,
            names=self.dog.names,
            defaults=defaults,
            metrics=list(args["metrics"]),
            max_metrics=args["max_metrics"],
            logs_tail_lines=args["logs_tail_lines"],
            secret_names=list(args["secret_names"]),
            secrets_file=args["secrets_file"],
            on_end=args["on_end"],
            release=release,
        )
        if self.dog.settings["replace"]:
            out["replace"] = dict(
                label=args["cluster"],
                api_url=release["api_url"],
                record=release["record"],
                dir=args["replace_dir"],
                timeout=self.dog.settings["replace_timeout"],
            )
        return out

    def supervisor(self, state, **kwargs):
        try:
            return self.module("rlinfra.verl.ray_run_supervisor", dict(base=self.dog.base, state=state, **kwargs))
        except AnsibleError as e:  # the head does not answer (SSH): the follower bears it for a while
            return dict(failed=True, unreachable=True, msg=" ".join(str(e).split())[:300])

    def supervised(self):
        """The run's supervisor started on the head (or the one already there attached to), then followed until the
        run ends: its lines printed, the current attempt's log and metrics kept here. Nothing is decided here."""
        text, digest = node_script.program(*supervisor.PROGRAM)
        secret_values = [v for v in self.args["secret_values"] if v] + (
            [self.dash["auth_token"]] if self.dash.get("auth_token") else []
        )
        gives_back = self.args["on_end"] != "keep"
        res = self.supervisor(
            "started",
            config=self.supervisor_config(),
            secret_values=secret_values,
            bundle=text,
            bundle_id=digest[:16],
            api_key=self.args["hyperbolic_api_key"] if gives_back or self.dog.settings["replace"] else "",
        )
        if res.get("no_systemd") and not self.args["follow"]:  # wait=false: nobody watches it
            self.say(res["no_systemd"].split(":")[0] + ": the run is not watched (wait=false)")
            raise Done("detached", None)
        if res.get("no_systemd"):
            self.say(
                res["no_systemd"]
                + (
                    "; on_end: %s cannot be done without it: teardown.yml -e release=true gives the machines back"
                    % self.args["on_end"]
                    if gives_back
                    else ""
                )
            )
            self.run()
            return "succeeded", None
        if res.get("failed"):
            raise Done(
                "supervisor",
                "the run's supervisor could not be started on the head: %s; the job runs on "
                "without recovery (status.yml shows it; submit.yml again starts the supervisor)" % res.get("msg"),
            )
        self.unit = res.get("unit")
        self.say(
            "%s: the run's supervisor %s on the head; it recovers the run whether or not this playbook follows it "
            "(stopping the playbook changes nothing; status.yml reads it, stop.yml stops it)"
            % (self.unit, "was already watching it" if res.get("attached") else "watches it")
        )
        if not self.args["follow"]:
            raise Done("detached", None)
        return self.follow_supervisor()

    def follow_supervisor(self):
        seen, outage, down, saved, progressed = 0, None, None, set(), None
        deadline = self.clock() + self.args["timeout"] + 3600
        while True:
            # Up to a progress interval on the head, answered at the supervisor's next line or the run's end.
            st = self.supervisor(
                "read", since=seen, wait=int(max(0, min(self.args["progress_interval"], deadline - self.clock())))
            )
            now = self.clock()
            if st.get("failed"):
                outage = now if outage is None else outage
                if now - outage > self.args["outage_grace"]:
                    raise Done(
                        "detached",
                        "the head has not answered for %ds (%s): the run's supervisor %s goes on "
                        "there if the head is up; submit.yml again follows it, status.yml reads it"
                        % (now - outage, st.get("msg"), self.unit),
                    )
                time.sleep(5)
                continue
            outage = None
            for number, _dummy, line in st.get("lines") or []:
                self.say(line)
                seen = max(seen, number)
            state = st.get("state") or {}
            self.checkpoint = state.get("checkpoint") or self.checkpoint
            previous = self.dog.sid
            if state.get("dog"):
                supervisor.restore(self.dog, state["dog"])
                self.started = self.dog.t0
            if previous != self.dog.sid:
                self.catch_up([previous], saved)
            final = state.get("final")
            if final:
                self.catch_up([r.get("submission_id") for r in self.rows] + [self.dog.sid], saved)
                if final.get("release_at") and not final.get("released_at"):
                    final = self.await_release(final, seen)
                self.given_back = final
                return final.get("reason") or "error", final.get("line")
            if not st.get("active"):
                down = now if down is None else down
                if now - down > SUPERVISOR_DOWN_S:
                    raise Done(
                        "supervisor",
                        "the run's supervisor %s is not running on the head and the run has not "
                        "ended (journalctl -u %s there says why): submit.yml again starts it, and it goes on from "
                        "its state" % (self.unit, self.unit),
                    )
                time.sleep(5)  # systemd starts it again within 10 s
            else:
                down = None
            if self.dog.seen and (progressed is None or now - progressed >= self.args["progress_interval"] - 1):
                progressed = now
                res = self.poll(0)
                if res.get("found"):
                    self.say_progress(res)
                    self.refresh_metrics(res)
            if now > deadline:
                raise Done(
                    "detached",
                    "stopped following after %ss (wait.timeout): the run's supervisor %s goes on on "
                    "the head" % (self.args["timeout"], self.unit),
                )

    def await_release(self, final, seen):
        """on_end: the supervisor gives the machines back after its grace; its lines until then (bounded; a head that
        stops answering has been given back)."""
        deadline = final["release_at"] + 600
        while self.clock() < deadline:
            time.sleep(min(10, max(1, final["release_at"] - self.clock())))
            st = self.supervisor("read", since=seen)
            if st.get("failed"):
                self.say("the head no longer answers: it was given back (on_end)")
                return dict(final, released_at=self.clock(), released=None)
            for number, _dummy, line in st.get("lines") or []:
                self.say(line)
                seen = max(seen, number)
            now_final = (st.get("state") or {}).get("final") or final
            if now_final.get("released_at"):
                return now_final
        self.say(
            "the supervisor had not given the machines back %ds after its grace: status.yml shows whether it did" % 600
        )
        return final

    def catch_up(self, sids, saved):
        """The logs of attempts the supervisor has moved past, read to their end here (best effort: Ray may have lost
        them with a head restart)."""
        current = self.dog.sid
        try:
            for sid in sids:
                if not sid or sid in saved:
                    continue
                saved.add(sid)
                self.dog.sid = sid
                try:
                    self.poll(0, tail=0)
                except Done:
                    continue
                self.save_log(sid)
        finally:
            self.dog.sid = current

    def say_progress(self, res):
        display.display(progress_line(self.label, res, self.args["metrics"], self.args["max_metrics"], self.attempt))

    def stop(self, sid):
        res = self.module(
            "rlinfra.verl.ray_job",
            dict(self.dash, submission_id=sid, state="stopped", wait_timeout=120, logs_tail_lines=0),
        )
        if res.get("failed"):
            self.say("could not stop %s: %s" % (sid, res.get("msg")))

    def cluster(self, **kwargs):
        return self.module("rlinfra.verl.ray_cluster_info", dict(self.dash, **kwargs))

    # --- logs -------------------------------------------------------------------------------

    def mask_log(self, text):
        """The driver log's text with the secrets masked (by ray_job_poll, then by value here)."""
        if not text:
            return text
        for name in self.args["secret_names"]:
            value = ((self.args["runtime_env"] or {}).get("env_vars") or {}).get(name)
            if value:
                text = text.replace(str(value), masking.MASK)
        return masking.mask_values(text, self.args["secret_values"])

    def artifacts_dir(self):
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

    def artifact_failed(self, path, e, what):
        """Said once: the first failure names the setting to change; the job goes on whatever the disk does."""
        if not self.artifacts_error:
            self.artifacts_error = "%s; the job's status above is Ray's own" % files.cannot_write(
                experiment_source.ARTIFACTS_VAR, path, what, e
            )
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

    def write_metrics(self, sid, last_step=None):
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

    # --- the run report -----------------------------------------------------------------------

    def write_report(self, result=None):
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

    def run_dir(self):
        """``artifacts/<exp>/<submission>/``: the run's own directory (its first attempt's submission id), where
        logs.yml puts the nodes' logs too."""
        return os.path.join(self.args["log_dir"], self.args["base_submission_id"] or self.sid)

    def report_run(self, result=None):
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
            checkpoint=self.checkpoint,
            generated_at=time.time(),
        )

    def node_logs(self, rows):
        """Links to the nodes' logs logs.yml saved for each attempt (``<log_dir>/<submission id>/nodes/<host>/``),
        relative to the report's directory."""
        return run_report.node_log_rows(
            self.args["log_dir"],
            self.run_dir(),
            [r.get("submission_id") for r in rows if r.get("submission_id")] or [self.sid],
        )

    def utilisation(self):
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

    def run_start(self):
        """When the run began (its first attempt's start as Ray gave it, else when this wait began), epoch seconds."""
        for row in list(self.rows) + [self.res]:
            at = run_report.epoch(row.get("start_time")) if isinstance(row, dict) else None
            if at and at > 1e11:  # Ray's milliseconds
                at /= 1000.0
            if at:
                return min(at, self.started)
        return self.started

    def host_fact(self, name):
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

    def gpus(self, exp):
        nodes, per_node = exp.get("nnodes"), exp.get("gpus_per_node")
        try:
            nodes, per_node = int(nodes), int(per_node)
        except (TypeError, ValueError):
            return None
        return "%d (%d node(s) x %d)" % (nodes * per_node, nodes, per_node) if nodes and per_node else None

    def result(self, reason, line):
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
                if args["supervise"] == "cluster":
                    reason, line = watch.supervised()
                    if reason != "succeeded":
                        raise Done(reason, line)
                else:
                    watch.run()
                result.update(watch.result("succeeded", None), changed=False)
            except Done as done:
                if done.reason == "detached" and done.line is None:  # started, not followed (wait=false)
                    result.update(changed=True, skipped=True, supervisor=watch.unit, submission_id=watch.sid)
                    return result
                result.update(
                    watch.result(done.reason, done.line), changed=bool(watch.restarts), failed=True, msg=done.line
                )
                if watch.unit:
                    result["supervisor"] = watch.unit
            except (AnsibleError, OSError, ValueError, KeyError, TypeError) as e:
                # Still a result with the job's last known status and the summary, never a bare traceback.
                line = "the wait stopped on an unexpected %s: %s; the job was not stopped (status.yml shows it)" % (
                    type(e).__name__,
                    " ".join(str(e).split())[:300],
                )
                result.update(watch.result("error", line), changed=bool(watch.restarts), failed=True, msg=line)
            result["changed"] = len(watch.rows) > 1 or result.get("changed", False)
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
