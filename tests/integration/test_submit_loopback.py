"""The real ``ansible-playbook submit.yml -e exp=smoke`` (and stop.yml, status.yml) against a real
Ray head on loopback with token auth; localhost is the only ray_head (ansible_connection=local).

Checked: the job succeeds and its policy improves, the rollout node is named, checkpoints are in
verl's layout, the driver log is saved under artifacts (0600); a re-run changes nothing and keeps
one job; a dry run needs no cluster; a secret given in the controller's environment reaches the
job (its sha256 is printed by the program) but appears nowhere in the output or the artifacts;
a stopped run is resumed from its last checkpoint by a resubmission.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import re
import shutil
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_file
from tests.integration.localhost_play import REPO, flat, recap, run_playbook, write_inventory

FAKE_HF_TOKEN = "hf_fAkE0123456789sEcReTvAlUe"
SID = "rlinfra-smoke-default"


def _unit_conftest():
    # The Ray head helpers of tests/unit/conftest.py (that fixture is not visible from here).
    spec = importlib.util.spec_from_file_location("rlinfra_unit_conftest", REPO / "tests" / "unit" / "conftest.py")
    module = sys.modules.get(spec.name)
    if module is None:
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ray_head():
    helpers = _unit_conftest()
    head, sid, base = helpers.start_ray_head(attempts=3)
    try:
        yield head
    finally:
        helpers.kill_session(sid)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def workdir(tmp_path):
    write_inventory(tmp_path, python=str(Path(sys.executable).with_name("python3")))
    return tmp_path


def playbook(workdir, name, *extra, head=None, env=None, verbose=True):
    common = {
        "verl_job_artifacts_dir": str(workdir / "artifacts"),
        "verl_job_checkpoint_root": str(workdir / "checkpoints"),
        "verl_job_venv": str(Path(sys.executable).parent.parent),
        "verl_job_become": False,
        # Where the head keeps the working_dir zip (made by the submit when missing).
        "verl_job_remote_tmp": str(workdir / "remote"),
    }
    if head is not None:
        # The token goes by file, never on the command line.
        common.update(verl_job_address=head.address, verl_job_token_path=head.token_path)
    return run_playbook(workdir, name, common, *extra, env=env, verbosity="-v" if verbose else None, timeout=900)


def smoke_result(text):
    lines = [ln for ln in text.splitlines() if ln.startswith("SMOKE_RESULT ")]
    assert lines, text[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def task_output(text, name):
    """What -v printed for the task whose name starts with ``name``."""
    for part in re.split(r"^TASK \[", text, flags=re.M):
        if part.split("]", 1)[0].split(" : ")[-1].startswith(name):
            return part
    raise AssertionError("no task %r in:\n%s" % (name, text[-3000:]))


def all_text_under(path):
    out = []
    for p in Path(path).rglob("*"):
        if p.is_file():
            out.append(p.read_bytes().decode("utf-8", "replace"))
    return "\n".join(out)


def test_submit_smoke_end_to_end_then_rerun_is_a_no_op(ray_head, workdir):
    client = ray_head.client()
    proc = playbook(workdir, "submit.yml", "exp=smoke", head=ray_head, env={"HF_TOKEN": FAKE_HF_TOKEN})
    assert proc.returncode == 0, proc.output[-4000:]
    assert recap(proc.output)["failed"] == 0

    job = client.get_job(SID)
    assert job["status"] == "SUCCEEDED"
    # Progress was printed while waiting, in verl's step:N form.
    assert re.search(r"^smoke: SUCCEEDED, \d+:\d\d:\d\d, step:30 - reward/mean:", proc.output, re.M), proc.output[
        -3000:
    ]

    log_path = workdir / "artifacts" / "smoke" / (SID + ".log")
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    log = log_path.read_text()
    result = smoke_result(log)
    assert result["reward_after"] > result["reward_before"] + 0.1
    assert result["rollout_nodes"] == [ray_head.node_ip]
    assert result["resumed_from"] is None and result["final_step"] == 30
    assert re.search(r"^step:1 - reward/mean:[0-9.]+ - pg_loss:", log, re.M)
    assert "log: %s" % log_path in flat(proc.output)
    # Every step's metrics beside the log (CSV), and a plot of the key ones (PNG); the summary names both.
    csv_path, png_path = log_path.with_suffix(".metrics.csv"), log_path.with_suffix(".metrics.png")
    rows = list(csv.DictReader(csv_path.open()))
    assert [int(r["step"]) for r in rows] == list(range(1, 31))
    step1 = re.search(r"^step:1 - reward/mean:([0-9.]+) - pg_loss:([-0-9.e]+)", log, re.M)
    assert float(rows[0]["reward/mean"]) == float(step1.group(1)) and float(rows[0]["pg_loss"]) == float(step1.group(2))
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE(csv_path.stat().st_mode) == 0o600 and stat.S_IMODE(png_path.stat().st_mode) == 0o600
    assert "metrics: %s (30 steps)" % csv_path in flat(proc.output)
    assert "plot: %s (reward/mean, pg_loss, timing_s/step)" % png_path in flat(proc.output)

    # verl's checkpoint layout, on the (overridden) shared volume root.
    ckpt = workdir / "checkpoints" / "rlinfra_smoke" / "default" / "smoke"
    assert sorted(p.name for p in ckpt.iterdir()) == [
        "global_step_10",
        "global_step_20",
        "global_step_30",
        "latest_checkpointed_iteration.txt",
    ]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "30"
    assert json.loads((ckpt / "global_step_30" / "policy.json").read_text())["step"] == 30

    # The secret reached the job (its hash is printed there) but is nowhere in Ansible's output or artifacts.
    digest = hashlib.sha256(FAKE_HF_TOKEN.encode()).hexdigest()
    assert result["hf_token_sha256"] == digest and result["hf_token_seen_by_rollouts"] == 1
    assert FAKE_HF_TOKEN not in proc.output
    assert FAKE_HF_TOKEN not in all_text_under(workdir / "artifacts")
    assert ray_head.token not in proc.output and ray_head.token not in all_text_under(workdir / "artifacts")
    # The value went by the run's 0600 file (gone once the waited run ended): only its path is in the job.
    secrets_file = job["runtime_env"]["env_vars"]["RLINFRA_SECRETS_FILE"]
    assert "HF_TOKEN" not in job["runtime_env"]["env_vars"]
    assert FAKE_HF_TOKEN not in json.dumps(job)
    assert secrets_file == str(workdir / ".rlinfra" / "secrets" / "default" / (SID + ".env"))
    assert not Path(secrets_file).exists()
    assert stat.S_IMODE(Path(secrets_file).parent.stat().st_mode) == 0o700

    # The cluster read and the submit ran as plain scripts on the head (plugin_utils/node_script.py), not as modules.
    assert "runtime: script" in task_output(proc.output, "Wait for the nodes of Ray cluster")
    assert "runtime: script" in task_output(proc.output, "Submit job " + SID)

    # The working_dir zip came inside the submit's one call and is kept on the head (0600) for a recovery.
    zips = list((workdir / "remote").glob("rlinfra-*.zip"))
    assert len(zips) == 1 and stat.S_IMODE(zips[0].stat().st_mode) == 0o600, zips
    assert stat.S_IMODE((workdir / "remote").stat().st_mode) == 0o700

    # Re-run: nothing changes, same submission id, still one job.
    again = playbook(workdir, "submit.yml", "exp=smoke", head=ray_head, env={"HF_TOKEN": FAKE_HF_TOKEN})
    assert again.returncode == 0, again.output[-4000:]
    assert recap(again.output)["changed"] == 0
    assert "%s already exists (SUCCEEDED); not submitted again" % SID in flat(again.output)
    assert [j["submission_id"] for j in client.list_jobs()].count(SID) == 1
    assert log_path.read_text() == log
    assert FAKE_HF_TOKEN not in again.output

    status = playbook(workdir, "status.yml", "exp=smoke", head=ray_head)
    assert status.returncode == 0, status.output[-3000:]
    assert "status: SUCCEEDED" in flat(status.output)
    assert "runtime: script" in task_output(status.output, "Read the newest attempt of")
    assert re.search(r"last step:\s+30 reward/mean:", status.output)
    assert "SMOKE_RESULT" in status.output


def test_dry_run_needs_no_cluster(workdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]  # nothing listens once closed
    proc = playbook(
        workdir,
        "submit.yml",
        "exp=smoke",
        "dry_run=true",
        json.dumps({"verl_job_address": closed, "verl_job_token_path": "/nonexistent"}),
        env={"HF_TOKEN": FAKE_HF_TOKEN},
    )
    assert proc.returncode == 0, proc.output[-4000:]
    assert "dry_run: true" in proc.output
    assert "submission_id: rlinfra-smoke-default" in proc.output
    assert "python3 smoke_rl.py trainer.total_training_steps=30" in flat(proc.output)
    assert 'set -a; . "$RLINFRA_SECRETS_FILE"; set +a; python3 smoke_rl.py' in flat(proc.output)
    assert "HF_TOKEN: '********'" in proc.output
    assert FAKE_HF_TOKEN not in proc.output
    assert "trainer.nnodes=1" in flat(proc.output)  # from the inventory: one host in cluster default
    assert not (workdir / "artifacts").exists()


def test_submit_in_check_mode_reads_the_cluster_and_submits_nothing(ray_head, workdir):
    """submit.yml --check, what a careful user runs first: the cluster is read (nodes, room, preflight), the job is
    shown as it would be submitted, and nothing is submitted or written (it used to wait for the job it had not
    submitted and end in a failure)."""
    proc = playbook(workdir, "submit.yml", "exp=smoke", "run=check", "--check", head=ray_head)
    assert proc.returncode == 0, proc.output[-4000:]
    text = flat(proc.output)
    assert (
        "Check mode: nothing was submitted; %s-check would be submitted to Ray cluster default as below." % SID in text
    )
    assert "python3 smoke_rl.py trainer.total_training_steps=30" in text
    assert "Submitted" not in proc.output and "Wait for job" not in proc.output
    assert all(j["submission_id"] != SID + "-check" for j in ray_head.client().job_summaries())
    assert not (workdir / "artifacts").exists()


def test_stop_then_resubmit_resumes(ray_head, workdir):
    client = ray_head.client()
    params = {"verl_job_params": {"trainer": {"total_training_steps": 24, "save_freq": 2, "step_sleep_s": 1.0}}}
    submit = playbook(workdir, "submit.yml", "exp=smoke", "run=long", "wait=false", json.dumps(params), head=ray_head)
    assert submit.returncode == 0, submit.output[-4000:]
    assert "not waited for (wait disabled)" in flat(submit.output)
    tracker = workdir / "checkpoints" / "rlinfra_smoke" / "default" / "smoke" / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + 240
    while not tracker.exists() and time.monotonic() < deadline:
        assert client.get_job(SID + "-long")["status"] in ("PENDING", "RUNNING")
        time.sleep(1)
    assert tracker.exists(), client.get_logs(SID + "-long")[-3000:]

    # --check first, as a careful user does: it says what it would stop and stops nothing.
    checked = playbook(workdir, "stop.yml", "exp=smoke", "run=long", "--check", head=ray_head)
    assert checked.returncode == 0, checked.output[-4000:]
    assert "check mode: %s-long is RUNNING and would be stopped; nothing was stopped" % SID in flat(checked.output)
    assert client.get_job(SID + "-long")["status"] == "RUNNING"

    stop = playbook(workdir, "stop.yml", "exp=smoke", "run=long", head=ray_head)
    assert stop.returncode == 0, stop.output[-4000:]
    assert "stopped %s-long, now STOPPED" % SID in flat(stop.output)
    assert client.get_job(SID + "-long")["status"] == "STOPPED"
    stopped_at = int(tracker.read_text())
    assert 2 <= stopped_at < 24

    params["verl_job_params"]["trainer"]["step_sleep_s"] = 0
    resume = playbook(workdir, "submit.yml", "exp=smoke", "run=resume", json.dumps(params), head=ray_head)
    assert resume.returncode == 0, resume.output[-4000:]
    result = smoke_result((workdir / "artifacts" / "smoke" / (SID + "-resume.log")).read_text())
    assert result["resumed_from"] >= stopped_at  # a checkpoint may have landed while stopping
    assert result["final_step"] == 24 and tracker.read_text() == "24"
    assert result["reward_after"] >= result["reward_before"] - 0.05


def test_two_clusters_from_one_inventory_keep_their_own_checkpoints(ray_head, tmp_path):
    """Two clusters sharing the checkpoint volume, the same experiment submitted to both at once:
    two checkpoint directories, and each run's resume reads only its own."""
    helpers = _unit_conftest()
    other, sid_b, base_b = helpers.start_ray_head(attempts=3)
    try:
        hosts = {}
        for name, head in (("a", ray_head), ("b", other)):
            hosts["head-" + name] = {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "ray_cluster": name,
                "verl_job_address": head.address,
                "verl_job_token_path": head.token_path,
            }
        (tmp_path / "inventory.yml").write_text(json.dumps({"all": {"children": {"ray_head": {"hosts": hosts}}}}))

        def submit(cluster, steps, run=""):
            params = {"verl_job_params": {"trainer": {"total_training_steps": steps, "save_freq": 5}}}
            # An empty -e run= is refused (a scope is never given empty): the first run leaves it out.
            runs = ["run=" + run] if run else []
            return subprocess_playbook(
                tmp_path, "submit.yml", "exp=smoke", "cluster=" + cluster, *runs, json.dumps(params)
            )

        first = [submit("a", 10), submit("b", 20)]  # at once
        for proc in first:
            out = proc.communicate(timeout=600)[0]
            assert proc.returncode == 0, out[-4000:]
        ckpt = tmp_path / "checkpoints" / "rlinfra_smoke"
        assert (ckpt / "a" / "smoke" / "latest_checkpointed_iteration.txt").read_text() == "10"
        assert (ckpt / "b" / "smoke" / "latest_checkpointed_iteration.txt").read_text() == "20"

        second = [submit("a", 25, "2"), submit("b", 25, "2")]
        for proc in second:
            out = proc.communicate(timeout=600)[0]
            assert proc.returncode == 0, out[-4000:]
        for cluster, resumed in (("a", 10), ("b", 20)):
            log = (tmp_path / "artifacts" / "smoke" / ("rlinfra-smoke-%s-2.log" % cluster)).read_text()
            result = smoke_result(log)
            assert result["resumed_from"] == resumed and result["final_step"] == 25
            assert result["checkpoint_dir"] == str(ckpt / cluster / "smoke")
    finally:
        helpers.kill_session(sid_b)
        shutil.rmtree(base_b, ignore_errors=True)


def subprocess_playbook(directory, name, *extra, env=None):
    """``ansible-playbook`` in the background (output on ``proc.stdout``), artifacts and checkpoints in ``directory``."""
    import os
    import subprocess

    args = [
        str(Path(sys.executable).with_name("ansible-playbook")),
        "-i",
        str(directory / "inventory.yml"),
        name,
        "-e",
        json.dumps(
            {
                "verl_job_artifacts_dir": str(directory / "artifacts"),
                "verl_job_checkpoint_root": str(directory / "checkpoints"),
                "verl_job_venv": str(Path(sys.executable).parent.parent),
                "verl_job_become": False,
            }
        ),
    ]
    for item in extra:
        args += ["-e", item]
    extra_env = env
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(directory / "ansible-tmp"))
    env.pop("HF_TOKEN", None)
    env.update(extra_env or {})
    return subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def background_submit(directory, head, *extra, env=None):
    """submit.yml against ``head`` in the background, with the token by file."""
    return subprocess_playbook(
        directory,
        "submit.yml",
        "exp=smoke",
        json.dumps({"verl_job_address": head.address, "verl_job_token_path": head.token_path}),
        *extra,
        env=env,
    )


def test_a_job_stopped_by_someone_else_ends_the_wait_with_one_line(ray_head, workdir):
    client = ray_head.client()
    slow = {
        "verl_job_params": {"trainer": {"total_training_steps": 60, "step_sleep_s": 1.0}},
        "verl_job_progress_interval": 2,
    }
    proc = background_submit(workdir, ray_head, "run=stopped", json.dumps(slow))
    sid = SID + "-stopped"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (client.get_job(sid) or {}).get("status") != "RUNNING":
        time.sleep(1)
    # While it runs, the wait refreshes the metrics beside the (future) log: they appear, then grow.
    metrics_csv = workdir / "artifacts" / "smoke" / (sid + ".metrics.csv")
    seen = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and len(set(seen)) < 2:
        if metrics_csv.is_file():
            seen.append(len(metrics_csv.read_text().splitlines()))
        time.sleep(0.5)
    assert len(set(seen)) >= 2 and seen[-1] > seen[0] >= 2, seen
    assert (client.get_job(sid) or {}).get("status") == "RUNNING"
    assert (workdir / "artifacts" / "smoke" / (sid + ".metrics.png")).is_file()
    client.stop_job(sid)  # not by this wait
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode != 0
    flat_out = flat(out)
    assert (
        "Ray job %s was stopped from outside this wait (stop.yml, the dashboard or `ray job stop`); not "
        "resubmitted" % sid
    ) in flat_out, out[-3000:]
    assert "status: STOPPED" in flat_out
    for sign in ("dict2items", "NoneType", "The error was", "has no attribute"):
        assert sign not in out


def test_a_dashboard_gone_for_good_ends_the_wait_with_one_line(workdir):
    helpers = _unit_conftest()
    head, sid_head, base = helpers.start_ray_head(attempts=3)
    try:
        slow = {"verl_job_params": {"trainer": {"total_training_steps": 120, "step_sleep_s": 1.0}}}
        (workdir / "experiments").mkdir()
        exp = (REPO / "experiments" / "smoke.yml").read_text() + "\n" + "recovery: {max_restarts: 2}\n"
        exp = exp.replace("progress_interval: 10", "progress_interval: 2\n  outage_grace: 6")
        (workdir / "experiments" / "smoke.yml").write_text(exp)
        shutil.copytree(REPO / "experiments" / "smoke", workdir / "experiments" / "smoke")
        proc = background_submit(
            workdir, head, json.dumps(slow), json.dumps({"verl_job_experiments_dir": str(workdir / "experiments")})
        )
        client = head.client()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and (client.get_job(SID) or {}).get("status") != "RUNNING":
            time.sleep(1)
        helpers.kill_session(sid_head)  # the head is gone and stays gone
        started = time.monotonic()
        out = proc.communicate(timeout=300)[0]
        assert proc.returncode != 0
        assert time.monotonic() - started < 120  # bounded: outage_grace plus a poll, not wait.timeout
        assert re.search(
            r"the Ray dashboard at %s has not answered for \d+s \(.*\): the state of job %s is unknown"
            % (re.escape(head.address), SID),
            flat(out),
        ), out[-3000:]
        assert "SUCCEEDED" not in out
    finally:
        helpers.kill_session(sid_head)
        shutil.rmtree(base, ignore_errors=True)


def test_a_second_writer_of_the_checkpoints_is_refused_and_nothing_changes(ray_head, workdir):
    """Another run (here a job submitted by hand, with the metadata a submit gives) writes the experiment's
    checkpoint directory: a new run of it is refused by name, and nothing is submitted nor written."""
    client = ray_head.client()
    ckpt = str(workdir / "checkpoints" / "rlinfra_smoke" / "default" / "smoke")
    holder = "someone-else-" + str(int(time.time()))
    client.submit_job(holder, "sleep 300", metadata={"rlinfra_checkpoint_dir": ckpt})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and client.get_job(holder)["status"] != "RUNNING":
            time.sleep(0.5)
        proc = playbook(
            workdir, "submit.yml", "exp=smoke", "run=second", head=ray_head, env={"HF_TOKEN": FAKE_HF_TOKEN}
        )
        assert proc.returncode == 2, proc.output[-3000:]
        assert (
            "%s (RUNNING) already writes %s: two runs in one checkpoint directory would resume from each "
            "other's checkpoints" % (holder, ckpt)
        ) in flat(proc.output), proc.output[-3000:]
        assert recap(proc.output)["changed"] == 0
        assert client.get_job(SID + "-second") is None
        assert not (workdir / ".rlinfra" / "secrets" / "default" / (SID + "-second.env")).exists()
    finally:
        client.stop_job(holder)


def test_a_working_dir_over_the_inline_limit_is_copied_to_the_head_first(ray_head, workdir):
    """A zip over 8 MiB does not travel inside the submit's module call: it is copied to the head first (0600,
    kept for a recovery), uploaded from there, and the job runs from it."""
    from ansible_collections.rlinfra.verl.plugins.action.verl_submit import INLINE_MAX

    exps = workdir / "exps"
    shutil.copytree(REPO / "experiments" / "smoke", exps / "big")
    (exps / "big" / "blob.bin").write_bytes(os.urandom(INLINE_MAX + 1024 * 1024))  # random: the zip cannot shrink it
    (exps / "big.yml").write_text(
        (REPO / "experiments" / "smoke.yml")
        .read_text()
        .replace("working_dir: smoke", "working_dir: big")
        .replace("total_training_steps: 30", "total_training_steps: 2")
        .replace("save_freq: 10", "save_freq: 1")
    )
    (workdir / "remote").mkdir(mode=0o755)
    proc = playbook(workdir, "submit.yml", "exp=big", "verl_job_experiments_dir=" + str(exps), head=ray_head)
    assert proc.returncode == 0, proc.output[-4000:]
    job = ray_head.client().get_job("rlinfra-big-default")
    assert job["status"] == "SUCCEEDED", job
    zips = list((workdir / "remote").glob("rlinfra-*.zip"))
    assert len(zips) == 1 and zips[0].stat().st_size > INLINE_MAX and stat.S_IMODE(zips[0].stat().st_mode) == 0o600, (
        zips
    )
    assert job["runtime_env"]["working_dir"].startswith("gcs://_ray_pkg_")
    assert ray_head.client().has_package(job["runtime_env"]["working_dir"][len("gcs://") :])


def test_artifacts_that_cannot_be_written_mid_run_leave_the_status_and_the_summary(ray_head, workdir):
    """The run's artifacts directory becomes unusable while the job runs (here it is replaced by a file: ENOSPC, EROFS
    or EACCES end the same way): the job still SUCCEEDED and says so, the summary is printed, one line says what was
    not saved and why, and the run's secrets file is removed. Then a submit of another run, without secrets, removes
    a secrets file an ended run left behind."""
    client = ray_head.client()
    slow = {"verl_job_params": {"trainer": {"total_training_steps": 12, "step_sleep_s": 0.5}}}
    proc = background_submit(workdir, ray_head, "run=unsaved", json.dumps(slow), env={"HF_TOKEN": FAKE_HF_TOKEN})
    sid = SID + "-unsaved"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (client.get_job(sid) or {}).get("status") != "RUNNING":
        time.sleep(0.5)
    run_dir = workdir / "artifacts" / "smoke"
    shutil.rmtree(run_dir)
    run_dir.write_text("not a directory any more\n")
    out = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out[-3000:]
    assert client.get_job(sid)["status"] == "SUCCEEDED"
    text = flat(out).replace("''", "'")  # the YAML callback doubles a quote inside quotes
    assert "status: SUCCEEDED" in text, out[-3000:]
    assert (
        "artifacts: NOT SAVED - verl_job_artifacts_dir %s: cannot write the driver log and metrics (File exists): set "
        "verl_job_artifacts_dir to another directory; the job's status above is Ray's own" % run_dir
    ) in text, out[-3000:]
    for sign in ("Traceback", "Errno", "NoneType", "The error was"):
        assert sign not in out
    assert not (workdir / ".rlinfra" / "secrets" / "default" / (sid + ".env")).exists()
    assert FAKE_HF_TOKEN not in out

    # A file an ended run left behind (a controller killed mid-wait): the next submit on the cluster removes it,
    # though that run itself has no secrets.
    run_dir.unlink()
    left = workdir / ".rlinfra" / "secrets" / "default" / (SID + "-gone.env")
    left.write_text(secrets_file.HEADER + "\nHF_TOKEN='x'\n")  # as rlinfra writes it
    left.chmod(0o600)
    theirs = left.with_name("prod.env")  # a project's own file in the directory: never rlinfra's to remove
    theirs.write_text("API_URL=x\n")
    again = playbook(workdir, "submit.yml", "exp=smoke", "run=clean", head=ray_head)
    assert again.returncode == 0, again.output[-3000:]
    assert not left.exists() and theirs.read_text() == "API_URL=x\n"


def test_an_artifacts_directory_that_is_a_link_is_refused_before_anything(ray_head, workdir):
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    (workdir / "artifacts").symlink_to(elsewhere)
    client = ray_head.client()
    before = {j["submission_id"] for j in client.list_jobs()}
    proc = playbook(workdir, "submit.yml", "exp=smoke", "run=linked", head=ray_head)
    assert proc.returncode != 0
    assert (
        "artifacts directory %s is a symbolic link (to %s): runs write their logs there only into a real "
        "directory; point verl_job_artifacts_dir at the target itself" % (workdir / "artifacts", elsewhere)
    ) in flat(proc.output), proc.output[-3000:]
    assert {j["submission_id"] for j in client.list_jobs()} == before and not list(elsewhere.iterdir())


def test_a_deadline_reaches_the_run_which_saves_before_it_and_the_wait_says_where_it_cuts(ray_head, workdir):
    """recovery.deadline: the job gets MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP and trainer.esi_redundant_time
    (the margin); the smoke trainer saves before it as verl's should_save_ckpt_esi does, though its save_freq would
    not; the wait says where the deadline falls. One within the margin is refused in one line, nothing submitted."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import iso_time

    exps = workdir / "experiments"
    exps.mkdir()
    shutil.copytree(REPO / "experiments" / "smoke", exps / "smoke")
    smoke = (REPO / "experiments" / "smoke.yml").read_text()
    where = json.dumps({"verl_job_experiments_dir": str(exps)})
    params = json.dumps(
        {"verl_job_params": {"trainer": {"total_training_steps": 40, "save_freq": 1000, "step_sleep_s": 1.0}}}
    )
    client = ray_head.client()

    (exps / "smoke.yml").write_text(
        smoke + "\nrecovery: {deadline: '%s', deadline_margin: 30}\n" % iso_time(time.time() + 20)
    )
    late = playbook(workdir, "submit.yml", "exp=smoke", "run=late", params, where, head=ray_head)
    assert late.returncode != 0
    assert re.search(
        r"smoke\.yml: recovery\.deadline \S+Z is \d+ s away, within recovery\.deadline_margin \(30 s\): the "
        r"run could not save before it; .*nothing was submitted",
        flat(late.output),
    ), late.output[-3000:]
    assert client.get_job(SID + "-late") is None

    deadline = time.time() + 95
    (exps / "smoke.yml").write_text(smoke + "\nrecovery: {deadline: '%s', deadline_margin: 5}\n" % iso_time(deadline))
    proc = playbook(workdir, "submit.yml", "exp=smoke", "run=deadline", params, where, head=ray_head)
    assert proc.returncode == 0, proc.output[-4000:]
    text = flat(proc.output)
    assert "SUCCEEDED" in text
    said = re.search(
        r"recovery\.deadline %s \(in [0-9:]+\)(: at [0-9.]+ s a step the run ends at step 40 about [0-9:]+ "
        r"before it| cuts the run at about step \d+ of 40 \([0-9.]+ s a step\))" % re.escape(iso_time(deadline)),
        text,
    )
    assert said, text[-4000:]
    job = client.get_job(SID + "-deadline")
    assert job["runtime_env"]["env_vars"]["MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"] == "%d" % deadline
    assert "trainer.esi_redundant_time=5" in job["entrypoint"]
    log = (workdir / "artifacts" / "smoke" / (SID + "-deadline.log")).read_text()
    # verl's rule: saved once the time left is under 60 s + the longest step + 5 s, every step from then on
    forced = [int(m) for m in re.findall(r"step:(\d+) - .*checkpoint/saved", log)]
    assert "Force saving checkpoint: ESI instance expiration approaching." in log, log[-3000:]
    assert forced and forced[0] < 40, forced
    print(
        "\n%s; first forced save at step %d, %.0f s before the deadline"
        % (
            said.group(0),
            forced[0],
            deadline
            - os.stat(
                workdir / "checkpoints" / "rlinfra_smoke" / "default" / "smoke" / ("global_step_%d" % forced[0])
            ).st_mtime,
        )
    )
    assert (workdir / "checkpoints" / "rlinfra_smoke" / "default" / "smoke" / ("global_step_%d" % forced[0])).is_dir()
