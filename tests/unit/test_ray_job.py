"""rlinfra.verl.ray_job driven in-process (and once through ansible-playbook) against a real Ray head."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient
from ansible_collections.rlinfra.verl.plugins.modules import ray_job, ray_job_poll, ray_package

REPO_ROOT = Path(__file__).resolve().parents[2]
POLL = 0.3


def new_id(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


@pytest.fixture(autouse=True)
def fact_path(tmp_path, monkeypatch):
    """This host's rlinfra_ray local fact, in tmp_path: absent unless a test writes it."""
    path = tmp_path / "rlinfra_ray.fact"
    monkeypatch.setattr(ray_client, "FACT_PATH", str(path))
    return path


@pytest.fixture
def job(ray_head, module_runner):
    """Run ray_job with the head's address and token plus the given options."""

    def run(check_mode=False, **options):
        args = dict(address=ray_head.address, auth_token=ray_head.token, poll_interval=POLL)
        args.update(options)
        return module_runner(ray_job.main, args, check_mode=check_mode)

    return run


def count_jobs(client, sid):
    return [j["submission_id"] for j in client.list_jobs()].count(sid)


def wait_running(client, sid, timeout=120):
    """Block until Ray has spawned the entrypoint, so that a stop hits a live process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get_job(sid)["status"] == "RUNNING":
            return
        time.sleep(POLL)
    raise AssertionError("job %s never started" % sid)


@pytest.fixture(scope="module")
def running_job(ray_head):
    """Hands out running ``sleep`` jobs; they are all submitted at once so that they start in parallel."""
    client = ray_head.client()
    pool = [new_id("sleep") for _ in range(3)]
    for sid in pool:
        client.submit_job(sid, "sleep 300")

    def take():
        sid = pool.pop(0)
        wait_running(client, sid)
        return sid

    return take


@pytest.fixture(scope="module")
def done_job(ray_head):
    """One job that has SUCCEEDED, for tests that only need an existing finished job."""
    client = ray_head.client()
    sid = new_id("done")
    client.submit_job(sid, "echo done-job-output")
    job, _ = client.wait_for_job(sid, timeout=120, poll_interval=POLL)
    assert job["status"] == "SUCCEEDED"
    return sid


def test_submit_is_idempotent(ray_head, job):
    sid = new_id("submit")
    first = job(submission_id=sid, entrypoint="sleep 1; echo submitted", metadata={"owner": "tests", "n": 3})
    assert first["changed"] is True and first.get("failed") is not True
    assert first["status"] in ("PENDING", "RUNNING", "SUCCEEDED")
    assert first["dashboard_url"] == "%s/#/jobs/%s" % (ray_head.address, sid)
    again = job(submission_id=sid, entrypoint="sleep 1; echo something else")
    assert again["changed"] is False
    assert "different entrypoint" in json.dumps(again.get("warnings"))  # 2.19 warnings are structured
    client = ray_head.client()
    assert count_jobs(client, sid) == 1
    assert client.get_job(sid)["metadata"] == {"owner": "tests", "n": "3"}


def test_finished_success_with_progress_and_masked_secret(ray_head, job):
    sid = new_id("ok")
    script = (
        "print('hello-from-job', __import__('os').environ['PLAIN']); "
        "print('(TaskRunner pid=1) step:1 - actor/pg_loss:0.5 - critic/score/mean:0.1'); "
        "print('(TaskRunner pid=1) step:2 - actor/pg_loss:0.25 - critic/score/mean:0.75'); "
        "print('secret is', __import__('os').environ['HF_TOKEN'])"
    )
    res = job(
        submission_id=sid,
        entrypoint='%s -c "%s"' % (sys.executable, script),
        state="finished",
        wait_timeout=120,
        runtime_env={"env_vars": {"PLAIN": "visible-value", "HF_TOKEN": "hf_sekrit_4711"}},
    )
    assert res.get("failed") is not True, res["msg"] if "msg" in res else res
    assert (res["changed"], res["status"], res["driver_exit_code"], res["timed_out"]) == (True, "SUCCEEDED", 0, False)
    assert res["duration_s"] > 0
    assert res["start_time"].endswith("Z") and res["end_time"] >= res["start_time"]
    assert "hello-from-job visible-value" in res["logs_tail"]
    assert (res["last_step"], res["last_metrics"]) == (2, {"actor/pg_loss": 0.25, "critic/score/mean": 0.75})
    # The job printed its secret: the module's output masks it.
    assert "hf_sekrit_4711" not in json.dumps(res) and "secret is ********" in res["logs_tail"]
    again = job(submission_id=sid, entrypoint="ignored", state="finished")
    assert (again["changed"], again["status"]) == (False, "SUCCEEDED")


def test_failing_job_fails_task_with_logs(job):
    sid = new_id("fail")
    res = job(
        submission_id=sid,
        entrypoint="echo to-stdout; echo boom-on-stderr >&2; exit 7",
        state="finished",
        wait_timeout=120,
    )
    assert res["failed"] is True and res["status"] == "FAILED"
    assert "ended FAILED" in res["msg"] and "exit code 7" in res["msg"]
    assert res["driver_exit_code"] == 7
    assert "boom-on-stderr" in res["logs_tail"] and "to-stdout" in res["logs_tail"]


def test_wait_timeout_stops_job(ray_head, job, running_job):
    sid = running_job()
    client = ray_head.client()
    res = job(submission_id=sid, entrypoint="sleep 300", state="finished", wait_timeout=1)
    assert res["failed"] is True and res["timed_out"] is True and res["changed"] is True
    assert "did not finish within 1s" in res["msg"] and "stopped it" in res["msg"]
    assert res["status"] == "STOPPED" and client.get_job(sid)["status"] == "STOPPED"


def test_wait_timeout_without_stop_leaves_job_running(ray_head, job, running_job):
    sid = running_job()
    client = ray_head.client()
    res = job(submission_id=sid, state="finished", wait_timeout=1, stop_on_timeout=False)
    assert res["failed"] is True and res["changed"] is False and "left it running" in res["msg"]
    assert client.get_job(sid)["status"] == "RUNNING"
    res = job(submission_id=sid, state="absent")  # running: stopped first, then deleted
    assert res["changed"] is True and res["status"] == "STOPPED"
    assert client.get_job(sid) is None


def test_state_stopped(job, running_job):
    sid = running_job()
    res = job(submission_id=sid, state="stopped")
    assert (res["changed"], res["status"]) == (True, "STOPPED")
    res = job(submission_id=sid, state="stopped")
    assert (res["changed"], res["status"]) == (False, "STOPPED")
    res = job(submission_id=new_id("never"), state="stopped")
    assert (res["changed"], res["status"]) == (False, None)


def test_state_absent(ray_head, job, done_job):
    client = ray_head.client()
    res = job(submission_id=done_job, state="absent", check_mode=True)
    assert res["changed"] is True and client.get_job(done_job) is not None
    res = job(submission_id=done_job, state="absent")
    assert (res["changed"], res["status"]) == (True, "SUCCEEDED")
    assert client.get_job(done_job) is None and count_jobs(client, done_job) == 0
    res = job(submission_id=done_job, state="absent")
    assert res["changed"] is False, res


def test_check_mode_creates_nothing(ray_head, job):
    sid = new_id("check")
    for state in ("submitted", "finished"):
        res = job(submission_id=sid, entrypoint="echo never", state=state, check_mode=True)
        assert (res["changed"], res["status"], res.get("failed")) == (True, None, None)
    assert ray_head.client().get_job(sid) is None


def test_missing_entrypoint_for_new_job(job):
    res = job(submission_id=new_id("noentry"), state="finished")
    assert res["failed"] is True and "no entrypoint" in res["msg"]


@pytest.mark.parametrize("token,status", [("wrong-token-31415926", 403), ("", 401)])
def test_bad_token_is_one_clear_line(job, token, status):
    res = job(submission_id=new_id("auth"), entrypoint="true", auth_token=token)
    assert res["failed"] is True
    assert "HTTP %d" % status in res["msg"] and "auth_token" in res["msg"] and "\n" not in res["msg"]
    if token:
        assert token not in json.dumps(res)


def test_unreachable_address(job):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = job(submission_id=new_id("nowhere"), entrypoint="true", address="127.0.0.1:%d" % port)
    assert res["failed"] is True
    assert "unreachable" in res["msg"] and "http://127.0.0.1:%d" % port in res["msg"]


def test_submission_id_race_reports_exists(ray_head, job, monkeypatch):
    """Another client submits the same id between the module's GET and its POST."""
    sid = new_id("race")
    client = ray_head.client()
    assert client.submit_job(sid, "echo winner") is True
    assert client.submit_job(sid, "echo loser") is False
    real_get = RayClient.get_job
    calls = []

    def get_job_missing_first(self, submission_id):
        calls.append(submission_id)
        return None if len(calls) == 1 else real_get(self, submission_id)

    monkeypatch.setattr(RayClient, "get_job", get_job_missing_first)
    res = job(submission_id=sid, entrypoint="echo module")
    assert res.get("failed") is not True and res["changed"] is False
    assert res["status"] in ("PENDING", "RUNNING", "SUCCEEDED") and len(calls) >= 2
    assert count_jobs(client, sid) == 1 and client.get_job(sid)["entrypoint"] == "echo winner"


def test_through_ansible_playbook(ray_head, tmp_path):
    """The real ansible-playbook path: results are right and no secret reaches the -vvv output."""
    sid = new_id("play")
    secrets_file = tmp_path / "secrets.json"
    secrets_file.write_text(json.dumps({"ray_token": ray_head.token, "hf_token": "hf_playbook_secret_271"}))
    os.chmod(secrets_file, 0o600)
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        textwrap.dedent("""\
        - hosts: localhost
          gather_facts: false
          vars:
            ansible_python_interpreter: "{python}"
          tasks:
            - name: Run a job to completion
              rlinfra.verl.ray_job:
                address: "{address}"
                auth_token: "{{{{ ray_token }}}}"
                submission_id: {sid}
                entrypoint: "echo from-playbook $HF_TOKEN"
                runtime_env:
                  env_vars:
                    HF_TOKEN: "{{{{ hf_token }}}}"
                state: finished
                wait_timeout: 120
                poll_interval: 0.5
              register: run
            - name: A failing job, as a plain script (another path to the Python is another interpreter)
              rlinfra.verl.ray_job:
                address: "{address}"
                auth_token: "{{{{ ray_token }}}}"
                submission_id: {sid}-fails
                entrypoint: "exit 3"
                state: finished
                wait_timeout: 120
                poll_interval: 0.5
              vars:
                ansible_python_interpreter: "{python3}"
              register: failed_run
              ignore_errors: true
            - name: The token from the task's environment, in this process and as a script
              rlinfra.verl.ray_job:
                address: "{address}"
                submission_id: "{sid}-env-{{{{ item }}}}"
                entrypoint: "echo from-env"
                state: finished
                wait_timeout: 120
                poll_interval: 0.5
              environment:
                RAY_AUTH_TOKEN: "{{{{ ray_token }}}}"
              vars:
                ansible_python_interpreter: "{{{{ '{python3}' if item == 'script' else '{python}' }}}}"
              loop: [local, script]
              register: env_runs
            - name: An async task (Ansible's async wrapper runs the module)
              rlinfra.verl.ray_job:
                address: "{address}"
                auth_token: "{{{{ ray_token }}}}"
                submission_id: {sid}-async
                entrypoint: "echo from-async"
                state: finished
                wait_timeout: 120
                poll_interval: 0.5
              async: 180
              poll: 1
              register: async_run
            - name: Cluster facts
              rlinfra.verl.ray_cluster_info:
                address: "{address}"
                auth_token: "{{{{ ray_token }}}}"
                wait_for_nodes: 1
                timeout: 30
              register: cluster
            - ansible.builtin.assert:
                that:
                  - run is changed
                  - run.status == 'SUCCEEDED'
                  - run.runtime == 'local'
                  - failed_run is failed and failed_run.runtime == 'script'
                  - env_runs.results | map(attribute='status') | list == ['SUCCEEDED', 'SUCCEEDED']
                  - env_runs.results | map(attribute='runtime') | list == ['local', 'script']
                  - failed_run.msg.startswith('Ray job {sid}-fails ended FAILED')
                  - failed_run.driver_exit_code == 3
                  - async_run.status == 'SUCCEEDED' and 'from-async' in async_run.logs_tail
                  - async_run.runtime is not defined
                  - run.driver_exit_code == 0
                  - "'from-playbook' in run.logs_tail"
                  - cluster.alive_nodes == 1
                  - cluster.total_cpus == 2
            - ansible.builtin.debug:
                var: run
        """).format(
            address=ray_head.address,
            sid=sid,
            python=sys.executable,
            python3=str(Path(sys.executable).with_name("python3")),
        )
    )
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0")
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_TOKEN_PATH", None)  # the env_runs' token comes from their task's environment only
    proc = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-vvv",
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "@" + str(secrets_file),
            str(playbook),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "failed=0" in output and "ignored=1" in output and "SUCCEEDED" in output
    assert ray_head.token not in output
    assert "hf_playbook_secret_271" not in output and "from-playbook ********" in output
    assert ray_head.client().get_job(sid)["status"] == "SUCCEEDED"


# On the head without address nor token: both from its rlinfra_ray local fact ------------------------------


@pytest.fixture
def head_fact(ray_head, fact_path):
    fact_path.write_text(
        json.dumps(
            dict(
                role="head",
                cluster="c1",
                node_ip=ray_head.node_ip,
                gcs_address=ray_head.gcs_address,
                dashboard_url=ray_head.address,
                token_path=ray_head.token_path,
                venv="/opt/rlinfra/venv",
                temp_dir=ray_head.temp_dir,
            )
        )
    )
    return fact_path


def test_job_and_poll_with_the_fact(ray_head, head_fact, module_runner):
    sid = new_id("fact")
    res = module_runner(
        ray_job.main,
        dict(submission_id=sid, entrypoint="echo from-fact", state="finished", wait_timeout=120, poll_interval=POLL),
    )
    assert res.get("failed") is not True, res
    assert res["status"] == "SUCCEEDED" and res["dashboard_url"] == "%s/#/jobs/%s" % (ray_head.address, sid)
    poll = module_runner(ray_job_poll.main, dict(submission_id=sid, logs_tail_lines=5))
    assert poll.get("failed") is not True, poll
    assert (poll["found"], poll["status"], poll["address"]) == (True, "SUCCEEDED", ray_head.address)
    assert poll["dashboard_url"] == res["dashboard_url"] and "from-fact" in poll["logs_tail"]
    assert ray_head.token not in json.dumps(res) + json.dumps(poll)
    absent = module_runner(ray_job.main, dict(submission_id=sid, state="absent", poll_interval=POLL))
    assert absent.get("failed") is not True and ray_head.client().get_job(sid) is None


def test_poll_from_an_offset_reads_the_driver_log_file_on_the_head(ray_head, head_fact, module_runner):
    """ray_job_poll with log_offset: on the head (the fact names this dashboard and Ray's temp dir) the driver log
    file is read from the offset; elsewhere Ray's API gives the whole log and only the new part comes back."""
    sid = new_id("offset")
    script = "for i in range(400): print('(TaskRunner pid=1) step:%d - actor/pg_loss:%d.5 - x' % (i, i) + ' pad' * 20)"
    res = module_runner(
        ray_job.main,
        dict(
            submission_id=sid,
            entrypoint='%s -c "%s"' % (sys.executable, script),
            state="finished",
            wait_timeout=120,
            poll_interval=POLL,
        ),
    )
    assert res.get("status") == "SUCCEEDED", res
    whole = ray_head.client().get_logs(sid)
    first = module_runner(ray_job_poll.main, dict(submission_id=sid, logs_tail_lines=3, log_offset=0))
    assert (first["log_source"], first["log_chunk"], first["log_offset"]) == ("file", whole, len(whole.encode()))
    assert first["logs_tail"] == "\n".join(whole.splitlines()[-3:]) and first["last_step"] == 399
    near_end = len(whole.encode()) - 300
    again = module_runner(
        ray_job_poll.main, dict(submission_id=sid, log_offset=near_end, log_file_id=first["log_file_id"])
    )
    assert whole.endswith(again["log_chunk"]) and len(again["log_chunk"]) <= 300 and not again["log_reset"]
    head_fact.unlink()  # not the head any more, for the module: Ray's API
    api = module_runner(
        ray_job_poll.main,
        dict(
            address=ray_head.address,
            auth_token=ray_head.token,
            submission_id=sid,
            log_offset=near_end,
            log_file_id=first["log_file_id"],
        ),
    )
    assert (api["log_source"], api["log_reset"], api["log_chunk"]) == ("ray_api", True, whole)


def test_package_with_the_fact(ray_head, head_fact, tmp_path, module_runner):
    uri = "gcs://_ray_pkg_%s.zip" % uuid.uuid4().hex[:16].rjust(40, "0")
    res = module_runner(ray_package.main, dict(uri=uri, src=str(tmp_path / "absent.zip")), check_mode=True)
    assert res.get("failed") is not True, res
    assert (res["changed"], res["uploaded"]) == (True, False)  # asked the head's dashboard: not there yet


@pytest.mark.parametrize(
    "main,options",
    [
        (ray_job.main, dict(submission_id="fine-1", entrypoint="true")),
        (ray_job_poll.main, dict(submission_id="fine-1")),
        (ray_package.main, dict(uri="gcs://_ray_pkg_%s.zip" % ("0" * 40), src="/nonexistent.zip")),
    ],
)
def test_every_module_without_address_nor_fact_says_so(fact_path, module_runner, main, options):
    res = module_runner(main, options)
    assert res["failed"] is True
    assert res["msg"] == (
        "no Ray dashboard address on this host: it has no rlinfra_ray local fact (%s, written by "
        "site.yml) and address is not set" % fact_path
    )


def test_run_option_follows_the_newest_attempt(ray_head, job, module_runner):
    """status.yml and stop.yml name the run; its newest attempt (a recovery's <id>-a2) is the one read and stopped."""
    client = ray_head.client()
    base = new_id("run")
    client.submit_job(base, "echo first-attempt")
    client.wait_for_job(base, timeout=120, poll_interval=POLL)
    client.submit_job(base + "-a2", "sleep 300", metadata={"rlinfra_recovered_from": "node_lost"})
    wait_running(client, base + "-a2")
    dash = dict(address=ray_head.address, auth_token=ray_head.token)
    polled = module_runner(ray_job_poll.main, dict(dash, submission_id=base, run=True, logs_tail_lines=0))
    assert polled["submission_id"] == base + "-a2" and polled["status"] == "RUNNING"
    assert [a["attempt"] for a in polled["attempts"]] == [1, 2]
    assert "(resubmitted after node lost)" in polled["attempts"][1]["line"]

    res = job(submission_id=base, run=True, state="stopped", logs_tail_lines=0)
    assert (res["submission_id"], res["changed"], res["status"], res["found"]) == (base + "-a2", True, "STOPPED", True)
    assert client.get_job(base)["status"] == "SUCCEEDED"  # the first attempt is left alone

    never = new_id("never")
    none = module_runner(ray_job_poll.main, dict(dash, submission_id=never, run=True))
    assert (none["found"], none["attempts"], none["submission_id"]) == (False, [], never)
    res = job(submission_id=never, run=True, state="stopped")
    assert (res["found"], res["changed"], res["status"]) == (False, False, None)
    bad = job(submission_id=base, run=True, state="submitted", entrypoint="true")
    assert bad["failed"] and "run=true applies to state=stopped only" in bad["msg"]
