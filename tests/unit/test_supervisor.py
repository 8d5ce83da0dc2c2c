"""The run's supervisor on the head (module_utils/ray/supervisor.py): the watchdog's requests done with the node-side
functions (scripted here), its state kept after every step and taken up again by a new process (a restart of the
unit, a reboot), one decider (a running supervisor is attached to, never replaced), and its program runnable by a
Python without Ansible."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import supervisor, supervisor_unit, watchdog
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script

SID = "rlinfra-smoke-default"
A2 = SID + "-a2"
TEMPLATE = {
    "pairs": [["trainer.nnodes", 2], ["trainer.n_gpus_per_node", 0]],
    "head": "python3 -m verl.trainer.main_ppo",
    "shape_keys": ["trainer.nnodes", "trainer.n_gpus_per_node"],
    "filled": [True, True],
}


def node(node_id, ip, head=False, state="ALIVE"):
    return {
        "node_id": node_id,
        "node_ip": ip,
        "node_name": ip,
        "is_head": head,
        "state": state,
        "resources": {"CPU": 2},
    }


HEAD, W2 = node("h1", "10.0.0.1", head=True), node("w2", "10.0.0.2")


def job(status="RUNNING", step=None, nodes=(HEAD, W2), sid=SID, log=""):
    return dict(
        reachable=True,
        found=True,
        status=status,
        submission_id=sid,
        nodes=list(nodes),
        log_offset=len(log),
        log_size=len(log),
        log_file_id="f",
        log_chunk=log,
    )


class Killed(BaseException):
    """The process dies here (SIGKILL): nothing after it runs, not even a finally that saves."""


class Head:
    """The node-side functions, scripted: ``polls`` answers ray_job_poll in turn (an exception is raised), the
    others record what they were asked."""

    def __init__(self, polls, jobs=()):
        self.polls = list(polls)
        self.jobs = list(jobs)
        self.calls = []

    def functions(self):
        return dict(poll=self.poll, job=self.job, cluster=self.cluster, checkpoint=self.checkpoint, upload=self.upload)

    def poll(self, params, module):
        self.calls.append(("poll", params["submission_id"], params["log_offset"]))
        answer = self.polls.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        answer = dict(answer)  # the log's offsets as the head gives them: from where the poll asked
        answer["log_offset"] = answer["log_size"] = params["log_offset"] + len(answer["log_chunk"])
        return answer

    def job(self, params, module):
        self.calls.append((params["state"], params["submission_id"], params.get("entrypoint")))
        return {"changed": True}

    def cluster(self, params, module):
        self.calls.append(("cluster", params.get("jobs"), params.get("wait_for_nodes")))
        return {"jobs": list(self.jobs), "nodes": [HEAD, W2]}

    def checkpoint(self, params, module):
        self.calls.append(("checkpoint", params["path"]))
        return {"latest_step": 4, "resume_step": 4, "world_size": 2, "world_sizes": [2]}

    def upload(self, params, module):
        return {"changed": False}


def config(tmp_path, **args):
    secrets = tmp_path / "secrets.env"
    secrets.write_text("HF_TOKEN=hf_xx\n")
    return dict(
        args=dict(
            dict(
                submission_id=SID,
                base_submission_id=SID,
                timeout=3600,
                progress_interval=5,
                poll_interval=1,
                stall_timeout=0,
                outage_grace=60,
                checkpoint_dir=str(tmp_path / "ckpt"),
                recovery={"max_restarts": 2, "backoff_s": 0},
                job={"job_template": TEMPLATE, "metadata": {}, "resources": None, "package": None},
            ),
            **args,
        ),
        names={"10.0.0.2": "gpu-2"},
        metrics=["critic/score/mean"],
        secret_values=["hf_xx"],
        secrets_file=str(secrets),
        logs_tail_lines=10,
    )


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t

    def sleep(self, seconds):
        self.t += seconds


def make(tmp_path, head, cfg=None, clock=None):
    clock = clock or Clock()
    disabled = []
    sup = supervisor.Supervisor(
        cfg or config(tmp_path),
        str(tmp_path / "run"),
        clock=clock,
        sleep=clock.sleep,
        functions=head.functions(),
        systemctl=lambda *a: disabled.append(a) or (0, "", ""),
    )
    return sup, disabled


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "run").mkdir(mode=0o700)
    (tmp_path / "ckpt").mkdir()
    return tmp_path / "run"


def texts(state):
    return [line[2] for line in state["lines"]]


def test_a_run_to_its_end_keeps_its_state_private_and_removes_the_secrets_file(tmp_path, run_dir):
    head = Head([job(log="step:1 - critic/score/mean:0.1\n"), job("SUCCEEDED", log="step:2 - critic/score/mean:0.5\n")])
    sup, disabled = make(tmp_path, head)
    final = sup.run()
    assert final["reason"] == "succeeded" and final["status"] == "SUCCEEDED"
    state = json.loads((run_dir / "state.json").read_text())
    assert stat.S_IMODE(os.stat(run_dir / "state.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "ckpt" / supervisor.SHARED_NAME).st_mode) == 0o600
    assert texts(state)[0] == "the supervisor watches %s on the head (pid %d)" % (SID, os.getpid())
    assert "removed the run's secrets file %s" % (tmp_path / "secrets.env") in texts(state)
    assert not (tmp_path / "secrets.env").exists()
    assert disabled == [("disable", "rlinfra-run-%s.service" % SID)]
    # Only the new bytes are asked for: the second poll starts where the first ended.
    assert [c[2] for c in head.calls if c[0] == "poll"] == [0, len("step:1 - critic/score/mean:0.1\n")]
    assert state["dog"]["rows"][0]["status"] == "SUCCEEDED" and state["progress"].startswith("SUCCEEDED")
    # A finished run started again (a reboot: the unit is enabled until it disables itself) does nothing.
    again, dummy = make(tmp_path, Head([]))
    assert again.run()["reason"] == "succeeded"


def kit_config(tmp_path):
    kit = tmp_path / "cluster" / "prov"
    kit.mkdir(parents=True, mode=0o700)
    (kit / "ssh_key").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    cfg = config(tmp_path)
    cfg["replace"] = dict(label="prov", dir=str(kit), api_key="hb-key-0123", timeout=900)
    cfg["release"] = dict(label="prov", api_key="hb-key-0123", grace_s=0)
    zip_path = tmp_path / "packages" / ("rlinfra-%s.zip" % ("ab" * 20))
    zip_path.parent.mkdir()
    zip_path.write_bytes(b"PK")
    cfg["args"]["job"]["package"] = dict(uri="gcs://_ray_pkg_%s.zip" % ("ab" * 20), src=str(zip_path))
    (tmp_path / "run" / "config.json").write_text(json.dumps(cfg))
    return cfg, kit


def test_at_its_end_a_run_forgets_the_api_key_and_the_replacement_kits_ssh_key(tmp_path, run_dir):
    cfg, kit = kit_config(tmp_path)
    sup, dummy = make(tmp_path, Head([job("SUCCEEDED", log="step:1 - x:1\n")]), cfg=cfg)
    assert sup.run()["reason"] == "succeeded"
    assert "hb-key-0123" not in (run_dir / "config.json").read_text()
    assert json.loads((run_dir / "config.json").read_text())["replace"]["dir"] == str(kit)
    assert stat.S_IMODE(os.stat(run_dir / "config.json").st_mode) == 0o600
    assert "api_key" not in json.loads((run_dir / "config.json").read_text())["release"]
    assert not (kit / "ssh_key").exists()
    zip_path = tmp_path / "packages" / ("rlinfra-%s.zip" % ("ab" * 20))
    assert not zip_path.exists()
    said = texts(json.loads((run_dir / "state.json").read_text()))
    assert said[-3:] == [
        "removed the API key from the run's config",
        "removed the replacement kit's SSH key %s" % (kit / "ssh_key"),
        "removed the working_dir zip %s" % zip_path,
    ], said


def test_a_zip_the_collection_did_not_name_is_never_removed(tmp_path, run_dir):
    cfg, dummy = kit_config(tmp_path)
    theirs = tmp_path / "packages" / "job.zip"
    theirs.write_bytes(b"PK")
    cfg["args"]["job"]["package"]["src"] = str(theirs)
    sup, dummy = make(tmp_path, Head([job("SUCCEEDED", log="step:1 - x:1\n")]), cfg=cfg)
    assert sup.run()["reason"] == "succeeded"
    assert theirs.exists()


def test_the_kits_ssh_key_stays_while_another_run_on_the_cluster_goes_on(tmp_path, run_dir):
    cfg, kit = kit_config(tmp_path)
    other = tmp_path / "rlinfra-other-prov"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"replace": {"dir": str(kit)}, "args": cfg["args"]}))
    (other / "state.json").write_text(json.dumps({"lines": []}))
    ended = tmp_path / "rlinfra-ended-prov"  # a run that ended does not hold the key
    ended.mkdir()
    (ended / "config.json").write_text(json.dumps({"replace": {"dir": str(kit)}}))
    (ended / "state.json").write_text(json.dumps({"final": {"reason": "succeeded"}}))
    sup, dummy = make(tmp_path, Head([job("SUCCEEDED", log="step:1 - x:1\n")]), cfg=cfg)
    assert sup.run()["reason"] == "succeeded"
    assert (kit / "ssh_key").exists() and (tmp_path / "packages" / ("rlinfra-%s.zip" % ("ab" * 20))).exists()
    said = texts(json.loads((run_dir / "state.json").read_text()))
    assert said[-2:] == [
        "kept the replacement kit's SSH key: rlinfra-other-prov still uses it",
        "kept the working_dir zip: rlinfra-other-prov still uses it",
    ], said
    (other / "state.json").write_text(json.dumps({"final": {"reason": "stopped"}}))
    assert (
        supervisor.still_used(str(tmp_path), str(run_dir), lambda config: supervisor.kit_of(config) == str(kit)) == []
    )


def test_the_newest_checkpoint_step_is_kept_in_the_state(tmp_path, run_dir):
    """What a controller that finds the head gone names (report.head_gone_line): the tracker's step, read each poll."""
    head = Head([job(log="step:1 - x:1\n"), job(log="step:2 - x:1\n"), job("SUCCEEDED", log="step:3 - x:1\n")])
    sup, dummy = make(tmp_path, head)
    sup.poll(5)
    assert "checkpoint" not in sup.state  # no checkpoint yet
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("2")
    sup.poll(5)
    assert sup.state["checkpoint"] == dict(step=2, dir=str(tmp_path / "ckpt"), at=1_800_000_000.0)
    sup.save()
    shared = json.loads((tmp_path / "ckpt" / supervisor.SHARED_NAME).read_text())
    assert shared["checkpoint"]["step"] == 2


def test_a_restarted_supervisor_goes_on_with_the_run_it_had(tmp_path, run_dir):
    head = Head([job(log="step:1 - x:1\n"), job(log="step:2 - x:1\n"), Killed()])
    sup, dummy = make(tmp_path, head)
    with pytest.raises(Killed):
        sup.run()
    saved = json.loads((run_dir / "state.json").read_text())
    assert saved["dog"]["step"] == 2 and saved["log"]["offset"] == len("step:1 - x:1\nstep:2 - x:1\n")
    head2 = Head([job(log="step:3 - x:1\n"), job("SUCCEEDED", log="step:4 - x:1\n")])
    sup2, dummy = make(tmp_path, head2)
    assert sup2.run()["reason"] == "succeeded"
    state = json.loads((run_dir / "state.json").read_text())
    assert "the supervisor started again (pid %d): going on with attempt 1 (%s)" % (os.getpid(), SID) in texts(state)
    assert head2.calls[0] == ("cluster", True, 1)  # looks for an attempt it may have submitted unrecorded
    assert head2.calls[1] == ("poll", SID, len("step:1 - x:1\nstep:2 - x:1\n"))  # the log from where it was
    assert state["dog"]["t0"] == saved["dog"]["t0"]  # the run's clock, not the restart's


def test_a_supervisor_killed_during_a_recovery_does_it_again_not_as_a_users_stop(tmp_path, run_dir):
    lost = job(nodes=(HEAD, node("w2", "10.0.0.2", state="DEAD")))
    head = Head([job(step=3, log="step:3 - x:1\n"), lost])
    sup, dummy = make(tmp_path, head)
    real = sup.do

    def dies_after_the_stop(request):
        answer = real(request)
        if request[0] == "stop":
            sup.save()
            raise Killed()
        return answer

    sup.do = dies_after_the_stop
    with pytest.raises(Killed):
        sup.run()
    assert json.loads((run_dir / "state.json").read_text())["dog"]["recovering"] is None  # a lost node: stop first
    # The stop of a lost node's attempt comes before the recovery: a restart then finds the attempt STOPPED.
    # Killed later, inside the recovery (after its stop of what is left), the restart does the recovery again.
    head = Head([job(step=3, log="step:3 - x:1\n"), lost], jobs=[])
    (run_dir / "state.json").unlink()
    sup, dummy = make(tmp_path, head)
    real = sup.do

    def dies_in_the_recovery(request):
        answer = real(request)
        if request[0] == "sleep":  # the backoff, inside recover()
            sup.save()
            raise Killed()
        return answer

    sup.do = dies_in_the_recovery
    with pytest.raises(Killed):
        sup.run()
    assert json.loads((run_dir / "state.json").read_text())["dog"]["recovering"] == "node_lost"
    head2 = Head([job(sid=A2, log="step:5 - x:1\n"), job("SUCCEEDED", sid=A2, log="step:6 - x:1\n")], jobs=[])
    sup2, dummy = make(tmp_path, head2)
    final = sup2.run()
    assert final["reason"] == "succeeded", final
    state = json.loads((run_dir / "state.json").read_text())
    assert "the supervisor restarted during the recovery after node lost: doing it again from its start" in texts(state)
    submitted = [c for c in head2.calls if c[0] == "submitted"]
    assert [c[1] for c in submitted] == [A2]  # one next attempt, the same id
    assert state["dog"]["restarts"] == 1 and [r["submission_id"] for r in state["dog"]["rows"]] == [SID, A2]


def test_an_attempt_submitted_but_not_recorded_is_adopted(tmp_path, run_dir):
    head = Head([job(log="step:1 - x:1\n"), Killed()])
    sup, dummy = make(tmp_path, head)
    with pytest.raises(Killed):
        sup.run()
    head2 = Head(
        [job(sid=A2, log="step:5 - x:1\n"), job("SUCCEEDED", sid=A2, log="step:6 - x:1\n")],
        jobs=[{"submission_id": SID, "status": "STOPPED"}, {"submission_id": A2, "status": "RUNNING"}],
    )
    sup2, dummy = make(tmp_path, head2)
    assert sup2.run()["reason"] == "succeeded"
    state = json.loads((run_dir / "state.json").read_text())
    assert (
        "attempt 2 (%s) is on the cluster but not in the state (the supervisor stopped as it submitted it): watching "
        "it" % A2
    ) in texts(state)
    assert head2.calls[1][:2] == ("poll", A2) and state["dog"]["attempt"] == 2


def manage(tmp_path, calls, active=False, check_mode=False, systemd=True, **p):
    def systemctl(*args):
        calls.append(args)
        if args[0] == "is-active":
            return (0 if active else 3), "active" if active else "inactive", ""
        return 0, "", ""

    params = dict(
        dict(
            base=SID,
            state="started",
            config={"args": {"submission_id": SID}},
            secret_values=["hf_xx"],
            bundle="print('x')\n",
            bundle_id="0123456789abcdef",
            python="/usr/bin/python3",
            since=0,
        ),
        **p,
    )
    return supervisor_unit.manage(
        params,
        PlainModule(params, ["hf_xx"], check_mode),
        systemctl=systemctl,
        root=str(tmp_path / "runs"),
        bundle_dir=str(tmp_path / "bundle"),
        unit_dir=str(tmp_path),
        systemd=systemd,
    )


def test_manage_installs_a_root_only_unit_and_attaches_to_a_running_one(tmp_path):
    calls = []
    res = manage(tmp_path, calls, check_mode=True)
    assert (
        res["changed"] and not (tmp_path / "runs").exists() and calls == [("is-active", "rlinfra-run-%s.service" % SID)]
    )
    calls.clear()
    res = manage(tmp_path, calls)
    assert res["changed"] and res["unit"] == "rlinfra-run-%s.service" % SID
    assert ("enable", "--now", res["unit"]) in calls and ("daemon-reload",) in calls
    conf = tmp_path / "runs" / SID / "config.json"
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600 and stat.S_IMODE(os.stat(conf.parent).st_mode) == 0o700
    assert json.loads(conf.read_text())["secret_values"] == ["hf_xx"]
    unit = (tmp_path / res["unit"]).read_text()
    assert "ExecStart=/usr/bin/python3 %s/supervisor-0123456789abcdef.py %s" % (tmp_path / "bundle", conf) in unit
    assert "hf_xx" not in unit and "Restart=on-failure" in unit and "WantedBy=multi-user.target" in unit
    # One decider: a running supervisor is attached to; its configuration is not replaced.
    calls.clear()
    res = manage(tmp_path, calls, active=True, config={"args": {"submission_id": "other"}})
    assert not res["changed"] and calls == [("is-active", res["unit"])]
    assert json.loads(conf.read_text())["args"]["submission_id"] == SID


def test_a_head_without_systemd_is_said_and_nothing_is_written(tmp_path):
    calls = []
    res = manage(tmp_path, calls, systemd=False)
    assert res["no_systemd"].startswith("the head is not run by systemd") and not res["changed"]
    assert calls == [] and not (tmp_path / "runs").exists()


def test_read_gives_the_lines_after_since_and_stopped_marks_the_run(tmp_path):
    directory = tmp_path / "runs" / SID
    directory.mkdir(parents=True)
    supervisor_unit.write_private(
        str(directory / "state.json"), {"lines": [[1, 0, "a"], [2, 0, "b"]], "said": 2, "dog": {"sid": SID}}
    )
    res = manage(tmp_path, [], state="read", since=1)
    assert res["lines"] == [[2, 0, "b"]] and res["said"] == 2 and "lines" not in res["state"] and res["found"]
    calls = []
    res = manage(tmp_path, calls, active=True, state="stopped")
    assert ("stop", res["unit"]) in calls and ("disable", res["unit"]) in calls
    assert res["state"]["final"]["reason"] == "stopped"
    assert manage(tmp_path, [], active=False, state="started")["changed"] is False  # an ended run is not started again


def test_the_program_runs_without_ansible(tmp_path):
    """The unit's program carries its module_utils and runs under a Python that has no Ansible (-I: no site
    packages): a run whose state says it has ended exits at once, 0, naming its end."""
    text, digest = node_script.program(*supervisor.PROGRAM)
    assert "from ansible." not in text.split("_SOURCES = ", 1)[0]
    path = tmp_path / "supervisor.py"
    path.write_text(text)
    directory = tmp_path / "run"
    directory.mkdir()
    supervisor_unit.write_private(str(directory / "state.json"), {"final": {"reason": "succeeded", "line": None}})
    (directory / "config.json").write_text(json.dumps({"args": {"submission_id": SID}}))
    proc = subprocess.run(
        [sys.executable, "-I", str(path), str(directory / "config.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "the run SUCCEEDED", proc.stderr
    assert len(digest) == 40 and node_script.program(*supervisor.PROGRAM)[1] == digest  # stable: attaches


@pytest.mark.parametrize(
    "on_end,reason,gives_back",
    [
        ("keep", "succeeded", False),
        ("release", "succeeded", True),
        ("release", "node_lost", False),
        ("release_always", "node_lost", True),
        ("release_always", "not_resumed", True),
        ("release_always", "stopped", False),
        ("release_always", "succeeded", True),
        (None, "succeeded", False),
    ],
)
def test_on_end_gives_back_after_the_ends_it_names(on_end, reason, gives_back):
    assert supervisor.on_end_releases(on_end, reason) is gives_back


def test_on_end_release_gives_the_machines_back_after_the_grace(tmp_path, run_dir, monkeypatch):
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import idle_guard

    asked = []

    def release_rentals(config, out):
        asked.append((config, clock.t))
        return ["i-1", "i-2"], True

    monkeypatch.setattr(idle_guard, "release_rentals", release_rentals)
    clock = Clock()
    cfg = dict(
        config(tmp_path),
        on_end="release",
        release=dict(
            label="prod", api_url="http://api", api_key="k", record="/etc/rlinfra/hyperbolic-prod.json", grace_s=30
        ),
    )
    sup, disabled = make(tmp_path, Head([job("SUCCEEDED", log="step:1 - x:1\n")]), cfg=cfg, clock=clock)
    written = []
    real_write = supervisor.write_private
    monkeypatch.setattr(
        supervisor,
        "write_private",
        lambda path, data: written.append(json.loads(json.dumps(data.get("final")))) or real_write(path, data),
    )
    ended = clock.t
    final = sup.run()
    assert (
        final["released"] == ["i-1", "i-2"] and final["release_at"] == ended + 30 and final["released_at"] == ended + 30
    )
    # The first state that says the run ended says when the release comes: a follower woken by the end (it waits on
    # the state file) then waits for the release, and prints its lines.
    first_end = next(f for f in written if f)
    assert first_end["release_at"] == ended + 30 and "released_at" not in first_end, first_end
    assert asked[0][0]["label"] == "prod" and asked[0][0]["who"] == "on_end" and asked[0][1] == ended + 30
    said = texts(json.loads((run_dir / "state.json").read_text()))
    assert (
        "on_end: release: the rentals of cluster prod are given back in 30s (time for a following submit.yml to keep "
        "the logs and the report)"
    ) in said
    assert any(line.startswith("on_end: gave back i-1, i-2 at ") for line in said), said
    # A failed run under release: nothing given back.
    asked.clear()
    (run_dir / "state.json").unlink()
    sup, dummy = make(
        tmp_path,
        Head([job("FAILED", log="step:1 - x:1\n"), job("FAILED")]),
        cfg=dict(cfg, args=dict(cfg["args"], recovery={"max_restarts": 0})),
        clock=clock,
    )
    assert sup.run()["reason"] == "failed" and asked == []


def test_await_news_answers_at_the_next_line_or_the_end_reading_the_file_only_when_it_changed(tmp_path):
    """The follower's one call (state=read, wait): the state once a line numbered above ``since`` is written, or the
    run's end, or the supervisor stopped, or the time is up; the file is read again only when its mtime or size
    changed."""
    path = str(tmp_path / "state.json")
    supervisor_unit.write_private(path, {"lines": [[1, 0, "a"]], "said": 1})
    now, loads, plan = [0.0], [], {}
    real_load = supervisor_unit.load

    def sleep(seconds):
        now[0] += seconds
        change = plan.pop(round(now[0], 1), None)
        if change is not None:
            supervisor_unit.write_private(path, change)

    supervisor_unit.load = lambda p: loads.append(p) or real_load(p)
    try:
        plan[3.0] = {"lines": [[1, 0, "a"], [2, 3, "b"]], "said": 2}
        state = supervisor_unit.await_news(path, 1, 60, lambda: True, clock=lambda: now[0], sleep=sleep)
        assert state["said"] == 2 and now[0] == 3.0 and len(loads) == 2  # once at the start, once at the change
        plan[5.0] = {"lines": [[1, 0, "a"], [2, 3, "b"]], "said": 2, "final": {"reason": "succeeded"}}
        state = supervisor_unit.await_news(path, 2, 60, lambda: True, clock=lambda: now[0], sleep=sleep)
        assert state["final"] == {"reason": "succeeded"} and now[0] == 5.0
        now[0], loads[:] = 0.0, []
        quiet = {"lines": [[1, 0, "a"]], "said": 1}
        supervisor_unit.write_private(path, quiet)
        state = supervisor_unit.await_news(path, 1, 12, lambda: True, clock=lambda: now[0], sleep=sleep)
        assert state == quiet and now[0] == 12.0 and len(loads) == 1  # nothing new: the time is up, one read
        now[0] = 0.0
        state = supervisor_unit.await_news(path, 1, 600, lambda: False, clock=lambda: now[0], sleep=sleep)
        assert state == quiet and now[0] == 9.5  # the supervisor stopped: seen at the 20th look, not after 600 s
    finally:
        supervisor_unit.load = real_load


def test_read_with_wait_returns_at_once_when_there_is_news_or_no_supervisor(tmp_path):
    directory = tmp_path / "runs" / SID
    directory.mkdir(parents=True)
    supervisor_unit.write_private(str(directory / "state.json"), {"lines": [[1, 0, "a"], [2, 0, "b"]], "said": 2})
    assert manage(tmp_path, [], active=True, state="read", since=1, wait=3600)["lines"] == [[2, 0, "b"]]
    assert manage(tmp_path, [], active=False, state="read", since=2, wait=3600)["lines"] == []


def test_the_supervisor_does_every_request_of_the_watchdog(tmp_path, run_dir):
    sup, dummy = make(tmp_path, Head([job()]))
    for kind in watchdog.REQUESTS:
        assert callable(getattr(sup, kind, None)), kind
