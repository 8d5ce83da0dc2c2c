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

import time

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts, watchdog
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import DEFAULT_METRICS
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_schema
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_options import from_experiment
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_state import Done
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_supervisor import WatchSupervisor
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import typed_args

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


class Watch(WatchSupervisor):
    """The watch's I/O: the modules it runs on the target, the lines it prints, the log and metrics it saves
    on the controller. What to do next is module_utils/ray/watchdog.py's (``self.dog``); this only does it.
    Its parts are in plugin_utils/job_wait_*.py (job_wait_state.py says how they stack); here, the loop."""

    # --- the loop: the machine's requests, done ---------------------------------------------------

    def run(self):
        """Does what the watchdog asks until it ends the watch; raises Done unless the job succeeded."""
        steps = self.dog.watch(self.t0)
        ended = None
        try:
            request = next(steps)
            while True:
                answer = watchdog.do(self, request)
                request = steps.send((answer, self.clock()))
        except StopIteration as end:
            ended = end.value
        finally:
            steps.close()
        reason, line = ended
        if reason != "succeeded":
            raise Done(reason, line)

    # --- the requests (module_utils/ray/watchdog.py's docstring), one method each ------------------------

    def progress(self, res):
        self.say_progress(res)
        return self.refresh_metrics(res)

    def sleep(self, seconds):
        time.sleep(seconds)

    def stop(self, sid):
        res = self.module(
            "rlinfra.verl.ray_job",
            dict(self.dash, submission_id=sid, state="stopped", wait_timeout=120, logs_tail_lines=0),
        )
        if res.get("failed"):
            self.say("could not stop %s: %s" % (sid, res.get("msg")))

    def cluster(self, options):
        return self.module("rlinfra.verl.ray_cluster_info", dict(self.dash, **options))

    def checkpoint(self, path):
        return self.module("rlinfra.verl.verl_checkpoint_info", dict(path=path))

    def upload(self, package):
        return self.module("rlinfra.verl.ray_package", dict(self.dash, uri=package["uri"], src=package["src"]))

    def submit(self, sid, entrypoint, metadata, resources):
        return self.module(
            "rlinfra.verl.ray_job",
            dict(self.dash, **attempts.submit_args(sid, entrypoint, self.args["runtime_env"], metadata, resources)),
        )

    def replace(self, nodes):
        # Refused at submit (roles/verl_job/tasks/run.yml); this answers a caller of the module alone.
        return dict(
            failed=True,
            msg="recovery.replace is done by the run's supervisor on the head (wait.supervise: "
            "cluster), not by a wait on the controller",
        )


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
