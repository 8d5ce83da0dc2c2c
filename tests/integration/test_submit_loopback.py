"""The real ``ansible-playbook submit.yml -e exp=smoke`` (and stop.yml, status.yml) against a real
Ray head on loopback with token auth; localhost is the only ray_head (ansible_connection=local).

Checked: the job succeeds and its policy improves, the rollout node is named, checkpoints are in
verl's layout, the driver log is saved under artifacts (0600); a re-run changes nothing and keeps
one job; a dry run needs no cluster; a secret given in the controller's environment reaches the
job (its sha256 is printed by the program) but appears nowhere in the output or the artifacts;
a stopped run is resumed from its last checkpoint by a resubmission.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
import socket
import stat
import sys
import time
from pathlib import Path

import pytest

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
    write_inventory(tmp_path)
    return tmp_path


def playbook(workdir, name, *extra, head=None, env=None, verbose=True):
    common = {"verl_job_artifacts_dir": str(workdir / "artifacts"),
              "verl_job_checkpoint_root": str(workdir / "checkpoints"),
              "verl_job_venv": str(Path(sys.executable).parent.parent),
              "verl_job_become": False}
    if head is not None:
        # The token goes by file, never on the command line.
        common.update(verl_job_address=head.address, verl_job_token_path=head.token_path)
    return run_playbook(workdir, name, common, *extra, env=env, verbosity="-v" if verbose else None, timeout=900)


def smoke_result(text):
    lines = [ln for ln in text.splitlines() if ln.startswith("SMOKE_RESULT ")]
    assert lines, text[-3000:]
    return json.loads(lines[-1].split(" ", 1)[1])


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
    assert re.search(r"^smoke: SUCCEEDED, \d+:\d\d:\d\d, step:30 - reward/mean:", proc.output, re.M), proc.output[-3000:]

    log_path = workdir / "artifacts" / "smoke" / (SID + ".log")
    assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
    log = log_path.read_text()
    result = smoke_result(log)
    assert result["reward_after"] > result["reward_before"] + 0.1
    assert result["rollout_nodes"] == [ray_head.node_ip]
    assert result["resumed_from"] is None and result["final_step"] == 30
    assert re.search(r"^step:1 - reward/mean:[0-9.]+ - pg_loss:", log, re.M)
    assert "log: %s" % log_path in flat(proc.output)

    # verl's checkpoint layout, on the (overridden) shared volume root.
    ckpt = workdir / "checkpoints" / "rlinfra_smoke" / "smoke"
    assert sorted(p.name for p in ckpt.iterdir()) == ["global_step_10", "global_step_20", "global_step_30",
                                                      "latest_checkpointed_iteration.txt"]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "30"
    assert json.loads((ckpt / "global_step_30" / "policy.json").read_text())["step"] == 30

    # The secret reached the job (its hash is printed there) but is nowhere in Ansible's output or artifacts.
    digest = hashlib.sha256(FAKE_HF_TOKEN.encode()).hexdigest()
    assert result["hf_token_sha256"] == digest and result["hf_token_seen_by_rollouts"] == 1
    assert FAKE_HF_TOKEN not in proc.output
    assert FAKE_HF_TOKEN not in all_text_under(workdir / "artifacts")
    assert ray_head.token not in proc.output and ray_head.token not in all_text_under(workdir / "artifacts")
    assert "HF_TOKEN" in job["runtime_env"]["env_vars"]
    assert FAKE_HF_TOKEN not in job["entrypoint"]

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
    assert re.search(r"last step:\s+30 reward/mean:", status.output)
    assert "SMOKE_RESULT" in status.output


def test_dry_run_needs_no_cluster(workdir):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = "http://127.0.0.1:%d" % s.getsockname()[1]  # nothing listens once closed
    proc = playbook(workdir, "submit.yml", "exp=smoke", "dry_run=true",
                    json.dumps({"verl_job_address": closed, "verl_job_token_path": "/nonexistent"}),
                    env={"HF_TOKEN": FAKE_HF_TOKEN})
    assert proc.returncode == 0, proc.output[-4000:]
    assert "dry_run: true" in proc.output
    assert "submission_id: rlinfra-smoke-default" in proc.output
    assert "entrypoint: python3 smoke_rl.py trainer.total_training_steps=30" in flat(proc.output)
    assert "HF_TOKEN: '********'" in proc.output
    assert FAKE_HF_TOKEN not in proc.output
    assert "trainer.nnodes=1" in flat(proc.output)  # from the inventory: one host in cluster default
    assert not (workdir / "artifacts").exists()


def test_stop_then_resubmit_resumes(ray_head, workdir):
    client = ray_head.client()
    params = {"verl_job_params": {"trainer": {"total_training_steps": 24, "save_freq": 2, "step_sleep_s": 1.0}}}
    submit = playbook(workdir, "submit.yml", "exp=smoke", "run=long", "wait=false", json.dumps(params), head=ray_head)
    assert submit.returncode == 0, submit.output[-4000:]
    assert "not waited for (wait disabled)" in flat(submit.output)
    tracker = workdir / "checkpoints" / "rlinfra_smoke" / "smoke" / "latest_checkpointed_iteration.txt"
    deadline = time.monotonic() + 240
    while not tracker.exists() and time.monotonic() < deadline:
        assert client.get_job(SID + "-long")["status"] in ("PENDING", "RUNNING")
        time.sleep(1)
    assert tracker.exists(), client.get_logs(SID + "-long")[-3000:]

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
