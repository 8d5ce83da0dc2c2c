# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The run's supervisor: the watchdog of module_utils/ray/watchdog.py run on the head by systemd, so that a run
recovers whether or not a controller watches it.

Why on the head: a multi-day run outlives the laptop or CI job that submitted it. ``submit.yml`` installs one unit per
run (``rlinfra-run-<submission id>.service``, :func:`manage`), which runs :func:`main` from one self-contained file
(the closure of this module's imports, plugin_utils/node_script.py's loader, standard library only: no Ansible on the
head). The controller then only follows the run's state (:func:`read`); killing it changes nothing, and exactly one
process decides: the unit.

The state (the watchdog's own, :func:`snapshot`, the lines it said, the attempt's log offset, the end) is written
after every step to ``/var/lib/rlinfra/runs/<id>/state.json`` (0600, in a 0700 directory) and copied beside the
checkpoints (``.rlinfra-run.json``, 0600). The unit restarts on failure and starts at boot: it reloads the state,
adopts an attempt it submitted but did not record, finishes a recovery it was in the middle of, and goes on with the
run's clock. The configuration (``config.json``, 0600) holds the secret values only to mask them; the dashboard token
is read from the head's token file by each call, never put in any process's arguments.

Its cost does not grow with the run: each poll reads only the driver log's new bytes (``log_offset``) and keeps only the
first and newest step of it."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts, watchdog
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import progress_line
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.supervisor_unit import (
    _systemctl,
    _write_if_changed,
    load,
    unit_name,
    write_private,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics

SHARED_NAME = ".rlinfra-run.json"
# The lines kept in the state: a follower attaching days later sees the newest ones (and how many came before).
KEPT_LINES = 500
# Calls of ray_job_poll one poll may add to read a log that grew more than one call returns (8 MiB each).
CATCH_UP_CALLS = 64
# The watchdog's state that survives a restart of the supervisor (module_utils/ray/watchdog.py's attributes).
KEPT = (
    "sid",
    "attempt",
    "restarts",
    "rows",
    "lost",
    "events",
    "marks",
    "res",
    "expect_from",
    "min_nodes",
    "t0",
    "seen",
    "step",
    "step_at",
    "address",
    "recovering",
    "pace",
    "deadline_said",
    "replaced",
    "names",
)
# The unit's program (plugin_utils/node_script.py's program()): this module's main, and the module_utils it imports; the
# Hyperbolic client (on_end) imports Ansible only for an opener it is never given here.
PROGRAM = ("ray.supervisor", "main", ("hyperbolic.client",))


def snapshot(dog: watchdog.Watchdog) -> dict[str, Any]:
    """The watchdog's state as plain data (JSON)."""
    return json.loads(json.dumps({k: getattr(dog, k) for k in KEPT}, default=str))


def restore(dog: watchdog.Watchdog, saved: Any) -> watchdog.Watchdog:
    for key in KEPT:
        if key in (saved or {}):
            setattr(dog, key, saved[key])
    return dog


def _functions() -> dict[str, Callable[..., Any]]:
    """The node-side functions the watch's requests are done with (module_utils, imported when first needed)."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray import cluster_info, job_poll, job_run
    from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint

    return dict(
        poll=job_poll.poll,
        job=job_run.run_job,
        cluster=cluster_info.info,
        checkpoint=lambda params, module: checkpoint.inspect(params["path"]),
        upload=upload,
    )


def upload(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """rlinfra.verl.ray_package's work: the working_dir zip kept on the head, sent when the cluster lacks it."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray import package
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, client_from_module

    try:
        data = package.read_package(params["src"])
        client = client_from_module(module, timeout=300)
        return dict(changed=package.ensure_package(client, params["uri"], data), uri=params["uri"])
    except (package.PackageError, RayError, OSError) as e:
        return dict(failed=True, msg=str(e))


class Supervisor:
    """One run's watch on the head: the watchdog's requests done here, its state kept after each."""

    def __init__(
        self,
        config: dict[str, Any],
        directory: str,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = time.sleep,
        functions: Mapping[str, Callable[..., Any]] | None = None,
        systemctl: Callable[..., tuple[int, str, str]] | None = None,
    ):
        self.config = config
        self.directory = directory
        self.clock, self.sleep = clock, sleep
        self.functions = functions or _functions()
        self.systemctl = systemctl or _systemctl
        self.args = dict(config["args"])
        self.base = self.args.get("base_submission_id") or self.args["submission_id"]
        self.state_path = os.path.join(directory, "state.json")
        self.state = load(self.state_path)
        self.dog = watchdog.Watchdog(self.args, clock(), names=config.get("names") or {})
        self.restored = bool(self.state.get("dog"))
        if self.restored:
            restore(self.dog, self.state["dog"])
        self.state.setdefault("lines", [])
        self.state.setdefault("said", 0)
        self.state.setdefault("started_at", clock())
        self.state["base"] = self.base
        self.state["unit"] = unit_name(self.base)
        log = self.state.get("log") or {}
        self.follow = verl_metrics.Follow(None)
        self.log: dict[str, Any]  # where the attempt's driver log was read to
        self.log = dict(
            sid=log.get("sid"),
            offset=log.get("offset") or 0,
            file_id=log.get("file_id") or "",
            size=log.get("size") or 0,
            first=log.get("first"),
        )
        if self.log["sid"] == self.dog.sid:
            self.follow.first = self.log["first"]
            self.follow.last = (self.dog.step, {})
        self.shared_error: str | None = None

    # --- the state ---------------------------------------------------------------------------

    def save(self) -> None:
        self.state["dog"] = snapshot(self.dog)
        self.state["log"] = dict(self.log, first=self.follow.first)
        self.state["saved_at"] = self.clock()
        write_private(self.state_path, self.state)
        self.share()

    def share(self) -> None:
        """The state's copy beside the checkpoints: what a new cluster (or a human) finds on the shared volume."""
        ckpt = self.args.get("checkpoint_dir")
        if not ckpt or not os.path.isdir(ckpt):
            return
        try:
            write_private(os.path.join(ckpt, SHARED_NAME), self.state)
        except OSError as e:
            if self.shared_error is None:
                self.shared_error = str(e)
                self.say("the state's copy in %s cannot be written (%s); the head's copy is kept" % (ckpt, e))

    def say(self, line: str) -> None:
        self.state["said"] += 1
        self.state["lines"].append([self.state["said"], round(self.clock(), 1), line])
        del self.state["lines"][:-KEPT_LINES]

    # --- the watchdog's requests, done here ------------------------------------------------

    def call(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        module = PlainModule(params, self.config.get("secret_values") or [], False)
        try:
            value = self.functions[name](params, module)
        except Exception as e:  # noqa: BLE001 - one failed call is the watch's answer, never the supervisor's end
            value = dict(failed=True, msg="%s: %s" % (type(e).__name__, e))
        return module.reply(value if isinstance(value, dict) else dict(failed=True, msg="no result"))

    def params(self, module: str, **given: Any) -> dict[str, Any]:
        out = dict((self.config.get("defaults") or {}).get(module) or {})
        out.update(self.config.get("dash") or {})
        out.update(given)
        return out

    def poll(self, seconds: float, tail: int | None = None) -> dict[str, Any]:
        sid = self.dog.sid
        if self.log["sid"] != sid:
            self.log = dict(sid=sid, offset=0, file_id="", size=0, first=None)
            self.follow = verl_metrics.Follow(None)
        res = self.call("poll", self.poll_params(seconds, tail))
        if res.get("failed"):
            raise Done("error", res.get("msg") or "ray_job_poll failed")
        more, calls = self.take_log(res), 0
        while more and calls < CATCH_UP_CALLS:
            calls += 1
            extra = self.call("poll", self.poll_params(0, 0))
            if extra.get("failed") or not extra.get("found"):
                break
            more = self.take_log(extra)
        if res.get("found"):
            res["last_step"], res["last_metrics"] = self.follow.last[0], dict(self.follow.last[1])
            res["first_step"] = self.follow.first
        res.pop("log_chunk", None)
        self.note_checkpoint()
        return res

    def note_checkpoint(self) -> None:
        """The newest checkpoint step on the shared volume (one small file read a poll): what a controller that finds
        the head gone names as the step a new cluster resumes from."""
        ckpt = self.args.get("checkpoint_dir")
        step = checkpoint.latest_step(ckpt) if ckpt else None
        if step is not None and step != (self.state.get("checkpoint") or {}).get("step"):
            self.state["checkpoint"] = dict(step=step, dir=ckpt, at=round(self.clock(), 1))

    def poll_params(self, seconds: float, tail: int | None) -> dict[str, Any]:
        return self.params(
            "ray_job_poll",
            submission_id=self.dog.sid,
            timeout=int(seconds),
            poll_interval=self.args["poll_interval"],
            logs_tail_lines=self.config.get("logs_tail_lines", 50) if tail is None else tail,
            runtime_env={"env_vars": dict((self.args.get("runtime_env") or {}).get("env_vars") or {})},
            secret_names=self.config.get("secret_names") or [],
            log_offset=self.log["offset"],
            log_file_id=self.log["file_id"],
        )

    def take_log(self, res: Mapping[str, Any]) -> bool:
        if not res.get("found") or "log_offset" not in res:
            return False
        if res.get("log_reset"):
            self.follow = verl_metrics.Follow(None)
        self.follow.feed(res.get("log_chunk") or "")
        self.log.update(offset=res["log_offset"], file_id=res.get("log_file_id") or "", size=res.get("log_size") or 0)
        behind = self.log["offset"] < self.log["size"]
        if res.get("status") in ("SUCCEEDED", "FAILED", "STOPPED") and not behind:
            self.follow.finish()
        return behind

    def do(self, request: Sequence[Any]) -> Any:
        return watchdog.do(self, request)

    # The watchdog's requests are done by the method of each one's name (watchdog.do): poll and say above, replace
    # below, sleep the injected one.

    def progress(self, res: Mapping[str, Any]) -> None:
        self.state["progress"] = progress_line(
            "", res, self.config.get("metrics") or [], self.config.get("max_metrics", 5), self.dog.attempt
        )

    def stop(self, sid: str) -> None:
        res = self.call(
            "job", self.params("ray_job", submission_id=sid, state="stopped", wait_timeout=120, logs_tail_lines=0)
        )
        if res.get("failed"):
            self.say("could not stop %s: %s" % (sid, res.get("msg")))

    def save_log(self, sid: str) -> None:
        self.follow.finish()

    def cluster(self, options: Mapping[str, Any]) -> dict[str, Any]:
        return self.call("cluster", self.params("ray_cluster_info", **options))

    def checkpoint(self, path: str) -> dict[str, Any]:
        return self.call("checkpoint", dict(path=path))

    def upload(self, package: Mapping[str, Any]) -> dict[str, Any]:
        return self.call("upload", self.params("ray_package", uri=package["uri"], src=package["src"]))

    def submit(self, sid: str, entrypoint: str, metadata: Any, resources: Any) -> dict[str, Any]:
        return self.call(
            "job",
            self.params(
                "ray_job", **attempts.submit_args(sid, entrypoint, self.args.get("runtime_env"), metadata, resources)
            ),
        )

    def replace(self, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        """recovery.replace: machines gone for good rented again and converged from the head
        (module_utils/hyperbolic/replace.py); each step one line."""
        conf = self.config.get("replace")
        if not conf:
            return dict(
                failed=True,
                msg="the supervisor was started without what replacing needs (recovery.replace was off at submit)",
            )
        from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import replace

        secrets = list(self.config.get("secret_values") or []) + [conf.get("api_key") or ""]
        try:
            return replace.replace(conf, nodes, self.say_masked(secrets), clock=self.clock)
        except Exception as e:  # noqa: BLE001 - a replacement that broke is the watch's answer, never the supervisor's end
            return dict(failed=True, msg="%s: %s" % (type(e).__name__, e))

    def say_masked(self, secrets: Iterable[str]) -> Callable[[str], None]:
        from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_patterns, masked

        def say(line):
            self.say(mask_patterns(masked(line, [s for s in secrets if s])))
            self.save()

        return say

    # --- the run ------------------------------------------------------------------------------

    def adopt(self) -> None:
        """After a restart: an attempt newer than the state's (submitted, then the supervisor died before it could
        record it) is the one to watch."""
        info = self.call("cluster", self.params("ray_cluster_info", jobs=True, timeout=60, wait_for_nodes=1))
        newest = attempts.newest_attempt(info.get("jobs") or [], self.base)
        if not newest or (newest.get("attempt") or 0) <= self.dog.attempt:
            return
        self.say(
            "attempt %d (%s) is on the cluster but not in the state (the supervisor stopped as it submitted it): "
            "watching it" % (newest["attempt"], newest["submission_id"])
        )
        self.dog.sid, self.dog.attempt = newest["submission_id"], newest["attempt"]
        self.dog.restarts, self.dog.recovering, self.dog.expect_from = newest["attempt"] - 1, None, None
        self.dog.new_attempt()

    def run(self) -> dict[str, Any]:
        """The watch to its end; the end is kept in the state (``final``), the run's secrets file removed."""
        if self.state.get("final"):
            return self.state["final"]
        if self.restored:
            self.say(
                "the supervisor started again (pid %d): going on with attempt %d (%s)"
                % (os.getpid(), self.dog.attempt, self.dog.sid)
            )
            self.adopt()
            steps = self.dog.resume()
        else:
            self.say("the supervisor watches %s on the head (pid %d)" % (self.dog.sid, os.getpid()))
            steps = self.dog.watch(self.clock())
        self.save()
        ended: tuple[str, str | None] = ("error", "the supervisor's watch ended without a reason")
        try:
            request = next(steps)
            while True:
                if request[0] != "sleep":
                    self.save()  # what the watchdog did up to this request
                answer = self.do(request)
                if request[0] == "poll":
                    self.save()  # where the log was read to
                request = steps.send((answer, self.clock()))
        except StopIteration as end:
            ended = tuple(end.value)
        except Done as done:
            ended = (done.reason, done.line)
        finally:
            steps.close()
        return self.finish(*ended)

    def finish(self, reason: str, line: str | None) -> dict[str, Any]:
        result = self.dog.result(reason, line, self.clock(), preferred=self.config.get("metrics") or ())
        result.pop("logs_tail", None)
        self.state["final"] = dict(
            reason=reason,
            line=line,
            ended_at=self.clock(),
            status=result.get("status"),
            summary=result.get("summary") or [],
        )
        releasing = on_end_releases(self.config.get("on_end"), reason)
        if releasing:  # in the first state with the end: a follower woken by it waits for the release too
            self.state["final"]["release_at"] = self.clock() + int(
                (self.config.get("release") or {}).get("grace_s", 60)
            )
        self.say("the run ended: %s" % (line or "SUCCEEDED"))
        secrets_file = self.config.get("secrets_file")
        if secrets_file:
            try:
                os.unlink(secrets_file)
                self.say("removed the run's secrets file %s" % secrets_file)
            except FileNotFoundError:
                pass
            except OSError as e:
                self.say("could not remove the run's secrets file %s: %s" % (secrets_file, e))
        self.save()
        self.systemctl("disable", unit_name(self.base))
        if releasing:
            self.give_back()
        self.clean_up()
        self.save()
        return self.state["final"]

    def clean_up(self) -> None:
        """At the run's end what it held on the head for its recoveries goes: the API key (on_end, recovery.replace)
        leaves its config; the replacement kit's SSH key (which opens every node) and the working_dir zip kept for a
        re-upload are removed unless another run still going uses them."""
        parts = [self.config.get(part) for part in ("release", "replace")]
        if [part.pop("api_key") for part in parts if isinstance(part, dict) and "api_key" in part]:
            path = os.path.join(self.directory, "config.json")
            if os.path.exists(path):
                _write_if_changed(path, json.dumps(self.config, sort_keys=True), 0o600)
            self.say("removed the API key from the run's config")
        kit = kit_of(self.config)
        if kit:
            self.remove_unused(os.path.join(kit, "ssh_key"), "the replacement kit's SSH key", kit_of)
        package = package_of(self.config)
        if package and PACKAGE_NAME.match(os.path.basename(package)):
            self.remove_unused(package, "the working_dir zip", package_of)

    def remove_unused(self, path: str, what: str, of: Callable[[Mapping[str, Any]], Any]) -> None:
        """``path`` removed unless another run going on uses it (``of(config)`` names what a run uses)."""
        mine = of(self.config)
        users = still_used(os.path.dirname(self.directory), self.directory, lambda config: of(config) == mine)
        if users:
            self.say("kept %s: %s still uses it" % (what, ", ".join(users)))
            return
        try:
            os.unlink(path)
            self.say("removed %s %s" % (what, path))
        except FileNotFoundError:
            pass
        except OSError as e:
            self.say("could not remove %s %s: %s" % (what, path, e))

    def give_back(self) -> None:
        """on_end: the cluster's rentals given back (the head's own included: this is its last act), after a grace in
        which a following playbook saves the logs and the report."""
        release = dict(self.config.get("release") or {})
        grace = int(release.get("grace_s", 60))
        final = self.state["final"]
        final.setdefault("release_at", self.clock() + grace)
        self.say(
            "on_end: %s: the rentals of cluster %s are given back in %ds (time for a following submit.yml to keep "
            "the logs and the report)" % (self.config["on_end"], release.get("label"), grace)
        )
        self.save()
        self.sleep(grace)
        from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import idle_guard

        released, ok = idle_guard.release_rentals(dict(release, who="on_end"), self.say)
        final.update(released=released, released_at=self.clock(), release_ok=ok)
        self.say(
            "on_end: gave back %s at %s"
            % (
                ", ".join(released)
                or "nothing (no rental is named or tagged %s, or in the head's record)" % release.get("label"),
                time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(final["released_at"])),
            )
            if ok
            else "on_end: giving the machines back failed (above): teardown.yml -e release=true gives them back"
        )
        self.save()


def still_used(runs: str, own: str, uses: Callable[[dict[str, Any]], Any]) -> list[str]:
    """The runs under ``runs`` (one directory each, as /var/lib/rlinfra/runs) other than ``own`` that have not ended and
    whose config ``uses(config)`` says uses what this run is about to remove."""
    try:
        names = sorted(os.listdir(runs))
    except OSError:
        return []
    users = []
    for name in names:
        directory = os.path.join(runs, name)
        if os.path.realpath(directory) == os.path.realpath(own):
            continue
        try:
            config, state = load(os.path.join(directory, "config.json")), load(os.path.join(directory, "state.json"))
        except (OSError, ValueError):
            continue
        if uses(config) and not state.get("final"):
            users.append(name)
    return users


def kit_of(config: Mapping[str, Any]) -> str | None:
    return (config.get("replace") or {}).get("dir")


def package_of(config: Mapping[str, Any]) -> str | None:
    return ((((config.get("args") or {}).get("job") or {}).get("package")) or {}).get("src")


# What a run removes at its end, when no other run going on uses it: the working_dir zip the submit kept on the head
# for a re-upload (verl_job_remote_tmp/rlinfra-<sha1>.zip; nothing else by that pattern).
PACKAGE_NAME = re.compile(r"^rlinfra-[0-9a-f]{40}\.zip$")


# on_end's words: when the rentals go back once the run has ended.
ON_END = ("keep", "release", "release_always")
# Ends after which ``release_always`` gives the machines back too: recovery gave up, or the run could not go on. A stop
# by stop.yml is a human's, who decides.
GAVE_UP = (
    "failed",
    "node_lost",
    "head_restart",
    "stalled",
    "not_resumed",
    "no_nodes",
    "shape",
    "checkpoint",
    "package",
    "submit",
    "timeout",
    "missing",
    "unreachable",
    "deadline",
    "replace",
)


def on_end_releases(on_end: str | None, reason: str) -> bool:
    """Whether a run that ended for ``reason`` gives its machines back under ``on_end``."""
    return (
        on_end == "release"
        and reason == "succeeded"
        or on_end == "release_always"
        and reason in GAVE_UP + ("succeeded",)
    )


class Done(Exception):
    def __init__(self, reason: str, line: str | None):
        super().__init__(line)
        self.reason, self.line = reason, line


def main(argv: Sequence[str] | None = None) -> int:
    """The unit's process: ``<bundle> /var/lib/rlinfra/runs/<id>/config.json``."""
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0]
    os.umask(0o077)
    supervisor = Supervisor(load(path), os.path.dirname(path))
    final = supervisor.run()
    sys.stdout.write("%s\n" % (final.get("line") or "the run SUCCEEDED"))
    return 0
