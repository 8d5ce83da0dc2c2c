"""Faults during a job on the sandbox, done for real, and what the user sees (issue: day-2 operations).

Each test runs ``submit.yml`` on a copy of the ``smoke`` experiment with its own ``recovery`` settings,
reads the playbook's output line by line as it comes (with the time each line arrived), injects the
fault (``docker kill`` of a worker, ``systemctl restart ray-head``, a training loop that stops
printing steps), and checks the output, the exit code and what the cluster's Jobs API holds. The
tests share the suite's sandbox cluster and leave it whole (every node back and alive).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient
from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, report_of, sandbox_nodes
from tests.integration.test_submit_loopback import smoke_result

TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-faults-" + TAG
SLOW = {"trainer": {"total_training_steps": 30, "save_freq": 5, "step_sleep_s": 1.0}}
WAIT = {"progress_interval": 5, "poll_interval": 1, "timeout": 900, "stall_timeout": 0}
# Signs of a crash of the collection itself (the job's own traceback may be in a log tail).
BAD_SIGNS = (
    "dict2items",
    "NoneType",
    "The full traceback",
    "template error",
    "AnsibleUndefined",
    "has no attribute",
    "The error was",
    "Module result deserialization",
)


def docker(*args, check=True, timeout=120):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=check).stdout


def on_node(node, script):
    return docker("exec", node, "sh", "-c", script, check=False)


class Playbook:
    """``ansible-playbook`` in the background; ``lines`` holds (seconds since start, line) as they come."""

    def __init__(self, name, *extra, exp_dir=None, inventory=None):
        args = [
            venv_bin("ansible-playbook"),
            "-i",
            str(inventory or SANDBOX_INVENTORY),
            name,
            "-e",
            json.dumps({"verl_job_checkpoint_root": CKPT_ROOT, "verl_job_experiments_dir": str(exp_dir)}),
        ]
        for item in extra:
            args += ["-e", item]
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_") and k != "HF_TOKEN"}
        env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONUNBUFFERED="1")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def wait(self, timeout=900):
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.reader.join(10)
        return self.proc.returncode

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.wait(60)

    @property
    def output(self):
        return "\n".join(line for dummy, line in self.lines)

    def first(self, pattern):
        """(time, line) of the first line matching ``pattern``, or (None, None)."""
        for at, line in self.lines:
            if re.search(pattern, line):
                return at, line
        return None, None

    def wait_for(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            at, line = self.first(pattern)
            if line is not None:
                return at
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        raise AssertionError("no line matching %r within %ss:\n%s" % (pattern, timeout, self.output[-4000:]))


@pytest.fixture(scope="module")
def cluster(sandbox, tmp_path_factory):
    """The sandbox converged, a client of its head, and a directory of experiments for these tests."""
    site = subprocess.run(
        [venv_bin("ansible-playbook"), "-i", str(SANDBOX_INVENTORY), "site.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert site.returncode == 0, (site.stdout + site.stderr)[-4000:]
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    exp_dir = tmp_path_factory.mktemp("fault-experiments")
    shutil.copytree(ROOT / "experiments" / "smoke", exp_dir / "smoke")
    yield dict(
        nodes=nodes,
        head=head,
        client=RayClient("http://%s:8265" % head["ip"], token=token),
        exp_dir=exp_dir,
        token=token,
    )
    on_node(head["name"], "rm -rf " + CKPT_ROOT)


@pytest.fixture
def whole(cluster):
    """Before and after each test: every container runs and every Ray node is alive."""
    restore(cluster)
    yield cluster
    restore(cluster)


def alive_count(client):
    try:
        return sum(1 for n in client.list_nodes() if n["state"] == "ALIVE")
    except Exception:  # the head may be restarting
        return 0


def restore(cluster, timeout=300):
    for node in cluster["nodes"]:
        if docker("inspect", "-f", "{{.State.Running}}", node["name"]).strip() != "true":
            docker("start", node["name"])
    deadline = time.monotonic() + timeout
    while alive_count(cluster["client"]) < len(cluster["nodes"]) and time.monotonic() < deadline:
        time.sleep(2)
    assert alive_count(cluster["client"]) == len(cluster["nodes"]), "the cluster did not come back whole"
    for job in cluster["client"].job_summaries():
        if job["status"] in ("PENDING", "RUNNING"):
            cluster["client"].stop_job(job["submission_id"])


def experiment(cluster, name, recovery, wait=None, params=None):
    """A copy of smoke as ``<name>-<TAG>`` (a name no earlier run of the suite used on this cluster)."""
    name = "%s-%s" % (name, TAG)
    data = yaml.safe_load((ROOT / "experiments" / "smoke.yml").read_text())
    data["wait"] = dict(WAIT, **(wait or {}))
    data["recovery"] = recovery
    data["params"]["trainer"].update((params or SLOW)["trainer"])
    (cluster["exp_dir"] / ("%s.yml" % name)).write_text(yaml.safe_dump(data))
    return name


def tracker(cluster, name):
    path = "%s/rlinfra_smoke/default/%s/latest_checkpointed_iteration.txt" % (CKPT_ROOT, name)
    return on_node(cluster["head"]["name"], "cat %s 2>/dev/null" % path).strip()


def wait_for_checkpoint(cluster, name, run, timeout=240):
    deadline = time.monotonic() + timeout
    while not tracker(cluster, name) and time.monotonic() < deadline:
        assert run.proc.poll() is None, run.output[-4000:]
        time.sleep(1)
    assert tracker(cluster, name), "no checkpoint within %ss:\n%s" % (timeout, run.output[-3000:])


def attempts(cluster, sid):
    return [
        j
        for j in cluster["client"].job_summaries()
        if j["submission_id"] == sid or j["submission_id"].startswith(sid + "-a")
    ]


def assert_never_two_at_once(jobs):
    spans = sorted((j["start_time"], j["end_time"] or "9999") for j in jobs)
    for (_s1, e1), (s2, _dummy) in zip(spans, spans[1:]):
        assert e1 <= s2, "two attempts ran at once: %s" % jobs


TIMINGS = ROOT / "artifacts" / "fault-timings.json"


def record(fault, run, fault_at, detected_pattern, sid):
    """Seconds from the fault to its detection, to the resubmission and to the first new step:
    kept in artifacts/fault-timings.json for docs/OPERATIONS.md."""
    detected = run.first(detected_pattern)[0]
    submitted = run.first(r"attempt 2 \(%s-a2\) submitted" % re.escape(sid))[0]
    first_step = run.first(r"\(attempt 2\), [0-9:]+, step:\d+")[0]
    row = {
        k: None if v is None else round(v - fault_at, 1)
        for k, v in (("detected_s", detected), ("resubmitted_s", submitted), ("first_new_step_s", first_step))
    }
    data = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
    data[fault] = dict(row, load=os.getloadavg()[0])
    TIMINGS.parent.mkdir(exist_ok=True)
    TIMINGS.write_text(json.dumps(data, indent=1))
    print("%s: %s" % (fault, row))
    return row


def assert_clean(output):
    for sign in BAD_SIGNS:
        assert sign not in output, "%r in the output:\n%s" % (sign, output[-4000:])


def test_worker_killed_mid_job_is_named_and_the_run_resumes(whole):
    name = experiment(whole, "fault_worker", {"max_restarts": 3, "backoff_s": 2})
    sid = "rlinfra-%s-default" % name
    worker = whole["nodes"][-1]
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    wait_for_checkpoint(whole, name, run)
    killed_at = time.monotonic() - run.t0
    docker("kill", worker["name"])
    time.sleep(20)
    docker("start", worker["name"])
    assert run.wait() == 0, run.output[-5000:]

    named_at, line = run.first(r"node %s \(%s\) left the cluster at" % (worker["name"], re.escape(worker["ip"])))
    assert line is not None, run.output[-4000:]
    assert named_at - killed_at <= 60, "named %.0fs after the kill" % (named_at - killed_at)
    assert run.first(r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step \d+" % sid)[1], run.output[-4000:]
    jobs = attempts(whole, sid)
    assert [j["status"] for j in jobs][-1] == "SUCCEEDED" and len(jobs) >= 2
    assert_never_two_at_once(jobs)
    log = (ROOT / "artifacts" / name / ("%s.log" % jobs[-1]["submission_id"])).read_text()
    result = smoke_result(log)
    assert result["resumed_from"] >= 5 and result["final_step"] == 30
    assert (ROOT / "artifacts" / name / ("%s.log" % sid)).is_file()  # every attempt's log is kept
    summary = " ".join(run.output.split())
    assert "node lost: %s (%s)" % (worker["name"], worker["ip"]) in summary
    record("worker killed", run, killed_at, r"left the cluster at", sid)
    assert (
        "1. %s: FAILED (a node left the cluster)" % sid in summary
        or "1. %s: STOPPED (a node left the cluster)" % sid in summary
    ), summary[-3000:]
    assert_clean(run.output)


def test_head_restart_without_recovery_is_one_clear_line(whole):
    name = experiment(whole, "fault_head0", {"max_restarts": 0})
    sid = "rlinfra-%s-default" % name
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    wait_for_checkpoint(whole, name, run)
    on_node(whole["head"]["name"], "systemctl restart ray-head")
    assert run.wait() != 0
    fatal = [line for dummy, line in run.lines if "FAILED!" in line or line.startswith(("fatal:", "[ERROR]"))]
    assert fatal, run.output[-3000:]
    # The step is named when the wait has read one before the head went down.
    assert re.search(
        r"Ray job %s is gone( at step \d+)?: the Ray head restarted and Ray keeps no jobs across a restart"
        r"(; lost: %s \(%s\))?; recovery is off \(recovery.max_restarts: 0\); run submit.yml with -e "
        r"run=NEW to resume" % (sid, whole["head"]["name"], re.escape(whole["head"]["ip"])),
        " ".join(run.output.split()),
    ), run.output[-4000:]
    assert_clean(run.output)


def test_head_restart_mid_job_resumes(whole):
    name = experiment(whole, "fault_head", {"max_restarts": 2, "backoff_s": 2})
    sid = "rlinfra-%s-default" % name
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    wait_for_checkpoint(whole, name, run)
    restarted_at = time.monotonic() - run.t0
    on_node(whole["head"]["name"], "systemctl restart ray-head")
    assert run.wait() == 0, run.output[-5000:]
    gone_at, line = run.first(
        r"job %s is gone from the cluster at .* the Ray head restarted|the Ray head %s \(%s\) "
        r"went down at" % (sid, whole["head"]["name"], re.escape(whole["head"]["ip"]))
    )
    assert line is not None and gone_at - restarted_at <= 120, run.output[-4000:]
    assert run.first(r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step \d+" % sid)[1], run.output[-4000:]
    record("ray-head restarted", run, restarted_at, r"is gone from the cluster|went down at", sid)
    assert "left the cluster" not in run.output  # the head is not reported as a lost worker
    jobs = attempts(whole, sid)  # the head forgot attempt 1; attempt 2 is the one it knows
    assert [j["submission_id"] for j in jobs] == [sid + "-a2"] and jobs[0]["status"] == "SUCCEEDED"
    result = smoke_result((ROOT / "artifacts" / name / ("%s-a2.log" % sid)).read_text())
    assert result["resumed_from"] >= 5 and result["final_step"] == 30
    assert_clean(run.output)


def stalling(whole, name, max_restarts=1, **trainer):
    """A smoke run that stalls after step 6 unless it resumed (stall_timeout 8 s, recovery on stalls), submitted:
    ``(name, submission id, the running submit.yml)``."""
    name = experiment(
        whole,
        name,
        {"max_restarts": max_restarts, "on": ["stalled"], "backoff_s": 1},
        wait={"stall_timeout": 8},
        params={
            "trainer": dict(
                {"total_training_steps": 20, "save_freq": 5, "step_sleep_s": 0.5, "stall_at_step": 6}, **trainer
            )
        },
    )
    return name, "rlinfra-%s-default" % name, Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])


def test_stall_is_detected_restarted_and_a_new_controller_attaches(whole):
    name, sid, run = stalling(whole, "fault_stall")
    run.wait_for(r"no new step for \d+s \(last step 6\): job %s is stalled" % sid, 180)
    run.wait_for(r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step 5" % sid, 180)
    run.wait_for(r"\(attempt 2\), [0-9:]+, step:\d+", 120)
    step6 = run.first(r"step:6 ")[0]
    record("stalled (stall_timeout 8 s)", run, step6 if step6 is not None else 0, r"is stalled", sid)
    run.kill()  # the controller dies while attempt 2 runs
    again = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    assert again.wait() == 0, again.output[-5000:]
    flat = " ".join(again.output.split())
    assert "%s-a2 already exists" % sid in flat and "attempt 2 of the run" in flat, flat[-3000:]
    jobs = attempts(whole, sid)
    assert [(j["submission_id"], j["status"]) for j in jobs] == [(sid, "STOPPED"), (sid + "-a2", "SUCCEEDED")]
    assert_never_two_at_once(jobs)
    status = subprocess.run(
        [
            venv_bin("ansible-playbook"),
            "-i",
            str(SANDBOX_INVENTORY),
            "status.yml",
            "-e",
            "exp=" + name,
            "-e",
            json.dumps({"verl_job_experiments_dir": str(whole["exp_dir"])}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert status.returncode == 0, status.stdout[-3000:]
    flat = " ".join(status.stdout.split())
    assert "attempt 1: %s STOPPED" % sid in flat and "attempt 2: %s-a2 SUCCEEDED" % sid in flat
    assert "(resubmitted after stalled)" in flat
    assert_clean(run.output + again.output)


def test_an_attempt_that_starts_over_is_stopped_at_its_first_step(whole):
    """A trainer that ignores its checkpoint (here resume_mode=disable; in verl, async_save's missing tracker file):
    attempt 2 is given step 5 and logs step 1 first. It is stopped at once, no attempt 3 follows, and the run ends with
    one line - never "recovered" (issue 49)."""
    name, sid, run = stalling(whole, "fault_fresh", max_restarts=3, resume_mode="disable")
    assert run.wait(420) != 0, run.output[-5000:]
    flat = " ".join(run.output.split())
    assert re.search(r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step 5" % sid, flat), flat[-4000:]
    assert (
        "attempt 2 (%s-a2) started over at step 1 instead of resuming from checkpoint step 5: stopped it; no further "
        "attempt (it would start over too): trainer.resume_mode is disable: the trainer ignores its checkpoints; set "
        "it to auto; then run submit.yml with -e run=NEW" % sid
    ) in flat, flat[-4000:]
    jobs = attempts(whole, sid)
    assert [(j["submission_id"], j["status"]) for j in jobs] == [(sid, "STOPPED"), (sid + "-a2", "STOPPED")], jobs
    assert_never_two_at_once(jobs)
    assert_clean(run.output)


def test_a_partial_last_checkpoint_is_passed_over_for_the_newest_whole_one(whole):
    """The tracker names step 6, but rank 1's shard of it is gone (as when a node is lost while saving): the next attempt
    resumes by path from step 4, the newest whole step, says so, and its first step (5) proves it (issue 49)."""
    name, sid, run = stalling(whole, "fault_partial", total_training_steps=12, save_freq=2)
    deadline = time.monotonic() + 240
    while tracker(whole, name) != "6" and time.monotonic() < deadline:
        assert run.proc.poll() is None, run.output[-4000:]
        time.sleep(0.5)
    step6 = "%s/rlinfra_smoke/default/%s/global_step_6" % (CKPT_ROOT, name)
    shard = on_node(whole["head"]["name"], "ls %s/actor/ | grep rank_1.pt" % step6).strip()
    assert shard, run.output[-3000:]
    on_node(whole["head"]["name"], "rm %s/actor/%s" % (step6, shard))
    assert run.wait(420) == 0, run.output[-5000:]
    flat = " ".join(run.output.split())
    assert (
        "step 6 lacks the shards of rank(s) 1 (a node lost while saving?); the next attempt resumes from step 4, the "
        "newest whole one (%s/rlinfra_smoke/default/%s/global_step_4)" % (CKPT_ROOT, name)
    ) in flat, flat[-4000:]
    assert re.search(r"attempt 2 \(%s-a2\) submitted .* resumes from checkpoint step 4" % sid, flat), flat[-4000:]
    assert "attempt 2 (%s-a2) resumed from checkpoint step 4: its first step seen is 5" % sid in flat, flat[-4000:]
    assert "SUCCEEDED" in flat
    assert_clean(run.output)


def descendants(pid):
    """``pid`` and every process below it, found before any dies (ansible-core's workers call setsid, so their process
    group is not the playbook's; their parent is, until it dies)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as handle:
                    ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo += children.get(current, [])
    return out


def _proc(pid):
    """(state, start time, pending signal masks, command line) of a process, None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%d/status" % pid) as f:
            pending = [int(line.split()[1], 16) for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, ValueError, IndexError):
        return None
    return fields[0], fields[19], pending, cmdline


def kill_tree(run):
    """The controller dies whole: the playbook and every process it started, whatever their session. A process still
    listed afterwards counts as dead when it is a zombie, when its pid now names another process (its start time
    differs), or when the kernel holds its SIGKILL (pending: it is inside an uninterruptible call and never returns to
    user space)."""
    pids = descendants(run.proc.pid)
    started = {pid: (_proc(pid) or (None, None))[1] for pid in pids}
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    run.wait(60)
    alive = []
    for pid in pids:
        now = _proc(pid)
        if (
            now is None
            or now[0] == "Z"
            or now[1] != started[pid]
            or any(mask & (1 << (signal.SIGKILL - 1)) for mask in now[2])
        ):
            continue
        alive.append((pid, now[0], now[3][:200]))
    assert not alive, "still running after SIGKILL (pid, state, command): %s" % alive
    return len(pids)


def supervisor_state(cluster, sid):
    text = on_node(cluster["head"]["name"], "cat /var/lib/rlinfra/runs/%s/state.json 2>/dev/null" % sid)
    return json.loads(text) if text.strip() else {}


def said_lines(cluster, sid):
    return " ".join(line[2] for line in supervisor_state(cluster, sid).get("lines") or [])


def wait_said(cluster, sid, pattern, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if re.search(pattern, said_lines(cluster, sid)):
            return
        time.sleep(2)
    raise AssertionError(
        "the supervisor did not say %r within %ss: %s" % (pattern, timeout, said_lines(cluster, sid)[-3000:])
    )


def test_a_run_nobody_watches_recovers_on_its_own_and_a_rerun_attaches(whole):
    """The controller (its whole process tree) is killed right after the submit. Then, with no controller: a worker is
    killed and started again; later the head itself is power-cycled (``docker kill`` + ``docker start``: the supervisor
    dies by SIGKILL, Ray's head and its jobs with it). At boot systemd brings the supervisor back, it takes up its
    state, sees the job gone with the head and recovers again: the run SUCCEEDS on its third attempt. A later submit.yml attaches and prints the attempts; status.yml shows the
    supervisor's end; no secret in any process's arguments on the head."""
    name = experiment(
        whole,
        "fault_alone",
        {"max_restarts": 3, "backoff_s": 2},
        params={"trainer": {"total_training_steps": 30, "save_freq": 5, "step_sleep_s": 1.0}},
    )
    sid = "rlinfra-%s-default" % name
    unit = "rlinfra-run-%s.service" % sid
    head, worker = whole["head"]["name"], whole["nodes"][-1]
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    run.wait_for(r"%s: the run's supervisor watches it on the head" % re.escape(unit), 300)
    print("killed the controller's %d processes" % kill_tree(run))
    deadline = time.monotonic() + 240
    while not tracker(whole, name) and time.monotonic() < deadline:
        time.sleep(1)
    assert tracker(whole, name), "no checkpoint without the controller: " + said_lines(whole, sid)[-3000:]
    argv = on_node(head, "ps -eww -o args=")
    assert [line for line in argv.splitlines() if "/var/lib/rlinfra/supervisor/" in line], argv
    assert whole["token"] not in argv
    assert on_node(head, "systemctl is-enabled %s" % unit).strip() == "enabled"  # comes back after a reboot

    docker("kill", worker["name"])
    time.sleep(20)
    docker("start", worker["name"])
    wait_said(whole, sid, r"attempt 2 \(%s-a2\) resumed from checkpoint step \d+" % re.escape(sid), 300)
    before_restart = attempts(whole, sid)
    assert_never_two_at_once(before_restart)
    assert [j["submission_id"] for j in before_restart] == [sid, sid + "-a2"], before_restart

    # The head power-cycled (a reboot without a shutdown): the supervisor dies with it (SIGKILL), Ray's head with its
    # jobs; systemd brings both back at boot.
    docker("kill", head)
    docker("start", head)
    deadline = time.monotonic() + 600
    while not supervisor_state(whole, sid).get("final") and time.monotonic() < deadline:
        time.sleep(3)
    state = supervisor_state(whole, sid)
    said = " ".join(line[2] for line in state.get("lines") or [])
    assert (state.get("final") or {}).get("reason") == "succeeded", said[-4000:]
    assert "node %s (%s) left the cluster" % (worker["name"], worker["ip"]) in said, said[-3000:]
    assert re.search(
        r"the supervisor started again \(pid \d+\): going on with attempt 2 \(%s-a2\)" % re.escape(sid), said
    ), said[-3000:]
    assert "job %s-a2 is gone from the cluster" % sid in said, said[-3000:]
    assert re.search(r"attempt 3 \(%s-a3\) submitted .* resumes from checkpoint step \d+" % sid, said), said[-3000:]
    # The working_dir zip outlived the reboot (not in /tmp, which the boot empties) and went with the run's end.
    assert re.search(r"removed the working_dir zip /var/lib/rlinfra/packages/rlinfra-[0-9a-f]{40}\.zip", said), said[
        -3000:
    ]
    assert [j["status"] for j in attempts(whole, sid)] == ["SUCCEEDED"]  # Ray keeps no jobs across a head restart
    assert on_node(head, "systemctl is-enabled %s" % unit).strip() == "disabled"
    assert on_node(head, "stat -c %%a /var/lib/rlinfra/runs/%s/state.json" % sid).strip() == "600"

    again = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    assert again.wait() == 0, again.output[-5000:]
    flat = " ".join(again.output.split())
    assert "the run's supervisor was already watching it on the head" in flat, flat[-3000:]
    assert "2. %s-a2: " % sid in flat and "3. %s-a3: SUCCEEDED" % sid in flat, flat[-3000:]
    status = Playbook("status.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    assert status.wait(300) == 0, status.output[-3000:]
    assert "supervisor: %s ended: SUCCEEDED" % unit in " ".join(status.output.split()), status.output[-3000:]

    # The head gone (here: its SSH port closed, in a copy of the inventory): one line with what this controller saw.
    gone_inventory = Path(whole["exp_dir"]) / "head-gone.yml"
    gone_inventory.write_text(
        SANDBOX_INVENTORY.read_text().replace(
            "          ansible_host: %s\n" % whole["head"]["ip"],
            "          ansible_host: %s\n          ansible_port: 1\n" % whole["head"]["ip"],
            1,
        )
    )
    gone = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"], inventory=gone_inventory)
    assert gone.wait(300) != 0
    text = " ".join(gone.output.split())
    assert re.search(
        r"the head %s of Ray cluster default does not answer \(.*port 1.*\): the cluster is down or gone; "
        r"run %s \(attempt 3\) was last seen SUCCEEDED at [0-9-]+ [0-9:]+ UTC, at step 30; its newest "
        r"checkpoint: step 30 in \S+; report: \S+/report\.html; bring the machines back \(provision\.yml "
        r"when they were rented, then site\.yml\); then submit\.yml -e exp=%s resumes"
        % (re.escape(head), re.escape(sid), re.escape(name)),
        text,
    ), text[-3000:]
    assert_clean(run.output + again.output + status.output + gone.output)


def test_controller_killed_as_the_job_is_created_then_a_rerun_attaches(whole):
    """The controller dies in the one call that submits (killed as soon as the head lists the job, most often before
    the controller heard back): a re-run finds the job and waits for it - one job ran, not two, and nothing of the
    half-finished call stands in the way."""
    name = experiment(
        whole,
        "fault_submit",
        {"max_restarts": 0},
        params={"trainer": {"total_training_steps": 8, "save_freq": 4, "step_sleep_s": 0.5}},
    )
    sid = "rlinfra-%s-default" % name
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    run.wait_for(r"TASK \[.*Submit job %s\]" % re.escape(sid), 300)
    deadline = time.monotonic() + 60
    while not attempts(whole, sid) and time.monotonic() < deadline:
        assert run.proc.poll() is None, run.output[-3000:]
        time.sleep(0.05)
    run.kill()
    assert attempts(whole, sid), "no job within 60 s of the submit's start:\n" + run.output[-3000:]
    print(
        "killed %s the controller reported the submission" % ("after" if run.first("Submitted " + sid)[1] else "before")
    )
    again = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    assert again.wait() == 0, again.output[-5000:]
    flat = " ".join(again.output.split())
    assert re.search(
        r"%s already exists \((PENDING|RUNNING|SUCCEEDED)\); not submitted again" % re.escape(sid), flat
    ), flat[-3000:]
    assert [(j["submission_id"], j["status"]) for j in attempts(whole, sid)] == [(sid, "SUCCEEDED")]
    assert_clean(run.output + again.output)


def test_resume_on_another_shape_is_refused(whole):
    name = experiment(
        whole, "fault_shape", {"max_restarts": 2, "min_nodes": 2, "backoff_s": 1, "node_wait_timeout": 60}
    )
    sid = "rlinfra-%s-default" % name
    worker = whole["nodes"][-1]
    run = Playbook("submit.yml", "exp=" + name, exp_dir=whole["exp_dir"])
    wait_for_checkpoint(whole, name, run)
    docker("kill", worker["name"])  # and it stays away
    assert run.wait() != 0
    flat = " ".join(run.output.split())
    assert re.search(
        r"Ray job %s was not resubmitted: checkpoint \S+/global_step_\d+ \(step \d+\) was written by world "
        r"size 3 \(model_world_size_3_rank_\*\.pt\) but the cluster now has 2 node\(s\) x 0 GPU\(s\) = "
        r"world size 2; not resubmitted: bring the cluster back to 3 rank\(s\)" % sid,
        flat,
    ), flat[-4000:]
    assert [j["submission_id"] for j in attempts(whole, sid)] == [sid]  # nothing resubmitted
    assert_clean(run.output)


XID = "2026-11-26T12:03:44,000000+00:00 NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."
# tests/unit/fixtures/gpu/kernel_lines.txt's real Xid 48 line (its source is quoted there), on another GPU
XID_NOW = (
    "NVRM: Xid (PCI:0000:5e:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has "
    "been detected on GPU in the framebuffer at physAddr 0x7fffa8860 partition 7, subpartition 1."
)


def test_no_room_is_refused_and_a_run_that_fills_its_volume_is_named_with_the_gpu_fault(whole):
    """Room to run, then why a run died: a checkpoint volume with 0 B free is refused before submitting; with the
    room check lowered to 0 the run dies at its first save, and the failure names the full volume (from the driver's
    ENOSPC and the head's measurement) and the Xid a worker's kernel logged (a stand-in dmesg printing NVIDIA's
    documented line)."""
    head, worker = whole["head"]["name"], whole["nodes"][-1]["name"]
    root = "/data/full-" + TAG
    name = experiment(whole, "fault_full", {"max_restarts": 0})
    mounted = on_node(
        head,
        f"mkdir -p {root} && mount -t tmpfs -o size=256k tmpfs {root} && mkdir -p {root}/rlinfra_smoke/default "
        f"&& (dd if=/dev/zero of={root}/filler bs=4k 2>/dev/null; df -B1 --output=avail {root} | tail -1)",
    )
    assert mounted.strip() == "0", mounted
    # yesterday's Xid (before the run: the failure line's, not the run's timeline) and one logged as the logs are read
    stand_in = (
        "#!/bin/sh\ncat <<'EOF'\n%s\nEOF\nprintf '%%s,000000+00:00 %%s\\n' \"$(date -u +%%Y-%%m-%%dT%%H:%%M:%%S)\" %s\n"
        % (XID, shlex.quote(XID_NOW))
    )
    on_node(worker, "cat > /usr/local/bin/dmesg <<'STANDIN'\n%sSTANDIN\nchmod 755 /usr/local/bin/dmesg" % stand_in)
    try:
        refused = Playbook("submit.yml", "exp=" + name, "verl_job_checkpoint_root=" + root, exp_dir=whole["exp_dir"])
        assert refused.wait() != 0
        text = " ".join(refused.output.split())
        assert re.search(r"the checkpoint volume %s\S* has 0 B free, below 10(\.0)? GiB" % re.escape(root), text), text[
            -3000:
        ]
        assert "nothing was submitted" in text and not attempts(whole, "rlinfra-%s-default" % name)

        run = Playbook(
            "submit.yml",
            "exp=" + name,
            "verl_job_checkpoint_root=" + root,
            "verl_job_min_free_gib=0",
            exp_dir=whole["exp_dir"],
        )
        assert run.wait() != 0
        text = " ".join(run.output.split())
        assert re.search(
            r"the checkpoint volume %s\S* is full \(0 B free\) at step \d+: free space or lower "
            r"trainer\.max_actor_ckpt_to_keep" % re.escape(root),
            text,
        ), text[-4000:]
        assert re.search(
            r"%s: Xid 79 \(GPU has fallen off the bus\) on 0000:3b:00 at 2026-11-26T12:03:44" % worker, text
        ), text[-4000:]
        assert re.search(
            r"ended FAILED at step \d+ \(driver exit code 1\); recovery is off .*; see the log: the checkpoint "
            r"volume %s\S* is full" % re.escape(root),
            text,
        ), text[-4000:]
        assert_clean(run.output)
        # The run's report: the Xid logged during the run on its time axis (the one of yesterday is not), why it
        # failed in its header, links to every node's logs.
        data, path = report_of(name)
        assert re.search(r"report: %s \(1 kernel event\(s\) of the run added\)" % re.escape(str(path)), text), text[
            -3000:
        ]
        kernel = [e for e in data["events"] if e["kind"] == "kernel"]
        assert [e["text"] for e in kernel] == ["%s: Xid 48 (%s) on 0000:5e:00" % (worker, "Double Bit ECC Error")], (
            data["events"]
        )
        start, end = data["window"]
        assert start < kernel[0]["t"] < end + 300 and abs(kernel[0]["t"] - time.time()) < 600, (data["window"], kernel)
        page = path.read_text()
        assert "<th>what the logs say</th>" in page and "2026-11-26T12:03:44" in page
        assert all('href="nodes/%s/"' % n["name"] in page for n in whole["nodes"]), page[-2000:]
    finally:
        on_node(worker, "rm -f /usr/local/bin/dmesg")
        on_node(head, f"umount {root}; rm -rf {root}")


def _line_after(run, banner, pattern, timeout):
    """Seconds (since the run's start) of the first line matching ``pattern`` after the first matching ``banner``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = list(run.lines)
        start = next((i for i, (at, line) in enumerate(lines) if re.search(banner, line)), None)
        if start is not None:
            hit = next((at for at, line in lines[start:] if re.search(pattern, line)), None)
            if hit is not None:
                return hit
        if run.proc.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError("no %r after %r within %ss:\n%s" % (pattern, banner, timeout, run.output[-4000:]))


def test_a_frozen_worker_is_named_within_a_minute_by_site_and_fitness(whole):
    """``docker pause`` freezes a worker (its sshd and its Ray alike) while a playbook runs: SSH's keepalives end the
    connection, the worker is named unreachable within a minute, and the run ends with one line naming it - never a
    hang, never a template error (issue 48). site.yml: frozen with a connection already open (ControlPersist's, the
    ping's), before the playbook starts - frozen once the run has started, an unchanged re-run can be done with the
    worker before the freeze lands (CI's run was: site.yml succeeded); fitness.yml: frozen after it answered its
    first step, while the next one reads its kernel log (a stand-in dmesg that takes 20 s holds it there)."""
    worker = next(n["name"] for n in reversed(whole["nodes"]) if n["role"] != "head")
    unreachable = r"^fatal: \[%s\]: UNREACHABLE!" % re.escape(worker)
    ping = subprocess.run(
        [venv_bin("ansible"), "-i", str(SANDBOX_INVENTORY), worker, "-m", "ansible.builtin.ping"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ping.returncode == 0, ping.stdout[-2000:]
    try:
        docker("pause", worker)
        site = Playbook("site.yml")
        paused = 0.0
        assert site.wait(600) != 0
        named = site.first(unreachable)[0]
        assert named is not None and named - paused <= 60, (named, paused, site.output[-4000:])
        assert (
            "cluster 'default' is not whole: %s dropped out of this run (unreachable, frozen or failed: its own line "
            "above says which)" % worker
        ) in site.output, site.output[-4000:]
        assert_clean(site.output)
        print("site.yml: %s named unreachable %.1f s after it froze" % (worker, named - paused))
    finally:
        docker("unpause", worker, check=False)
        # fitness.yml's verdict names the frozen worker unfit: the next test's submit would be refused by it.
        on_node(whole["head"]["name"], "rm -f /etc/ray/rlinfra-fitness.json")
    restore(whole)
    on_node(worker, "printf '#!/bin/sh\\nsleep 20\\n' > /usr/local/bin/dmesg && chmod 755 /usr/local/bin/dmesg")
    try:
        fitness = Playbook("fitness.yml")
        _line_after(
            fitness,
            r"^TASK \[rlinfra.verl.fitness : Read each node's addresses and network\]",
            r"^ok: \[%s\]" % re.escape(worker),
            300,
        )
        docker("pause", worker)
        paused = time.monotonic() - fitness.t0
        assert fitness.wait(600) != 0
        named = fitness.first(unreachable)[0]
        assert named is not None and named - paused <= 60, (named, paused, fitness.output[-4000:])
        # The verdict's lines, as the YAML callback folds them.
        assert "%s: the node check failed: no result: the node dropped out of the run" % worker in " ".join(
            fitness.output.split()
        ), fitness.output[-4000:]
        assert_clean(fitness.output)
        print("fitness.yml: %s named unreachable %.1f s after it froze" % (worker, named - paused))
    finally:
        docker("unpause", worker, check=False)
        on_node(worker, "rm -f /usr/local/bin/dmesg")
        # fitness.yml's verdict names the frozen worker unfit: the next test's submit would be refused by it.
        on_node(whole["head"]["name"], "rm -f /etc/ray/rlinfra-fitness.json")
