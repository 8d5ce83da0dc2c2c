# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""ray_job_wait with ``supervise: cluster``: the run's supervisor (module_utils/ray/supervisor.py) configured from the
wait's options, started on the head (or attached to), then followed: its lines printed, the watchdog's state restored
from its own, the logs of the attempts it moved past and the current one's progress and metrics kept here, the
machines given back at its end (on_end). Nothing is decided here. Part of the action's ``Watch`` (job_wait_state.py
says how the parts stack)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import supervisor, watchdog
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_log import WatchLog
from ansible_collections.rlinfra.verl.plugins.plugin_utils.job_wait_state import Done

# How long a supervisor may be down (systemd restarts it after 10 s) before the follower says so and ends.
SUPERVISOR_DOWN_S = 90


class WatchSupervisor(WatchLog):
    """The run's supervisor on the head: started here, then followed."""

    def run(self) -> None:
        """The watch in this process (the action's ``Watch.run``): where the head has no systemd."""
        raise NotImplementedError

    def supervisor_config(self) -> dict[str, Any]:
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

    def supervisor(self, state: str, **kwargs: Any) -> dict[str, Any]:
        try:
            return self.module("rlinfra.verl.ray_run_supervisor", dict(base=self.dog.base, state=state, **kwargs))
        except AnsibleError as e:  # the head does not answer (SSH): the follower bears it for a while
            return dict(failed=True, unreachable=True, msg=" ".join(str(e).split())[:300])

    def supervised(self) -> tuple[str, str | None]:
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

    def follow_supervisor(self) -> tuple[str, str | None]:
        seen, outage, down, progressed = 0, None, None, None
        saved: set[str] = set()
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
            self.newest_checkpoint = state.get("checkpoint") or self.newest_checkpoint
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

    def await_release(self, final: dict[str, Any], seen: int) -> dict[str, Any]:
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

    def catch_up(self, sids: Iterable[str | None], saved: set[str]) -> None:
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
