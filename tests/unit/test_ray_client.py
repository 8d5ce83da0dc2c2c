"""ray_client against the real Ray head (and a tiny loopback stub for 5xx), plus the verl log parser."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import (
    EXISTS_MARKER, RayAuthError, RayClient, RayHTTPError, RayUnreachableError, ms_to_iso, normalize_address,
    tail_lines)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl_log import last_progress, parse_progress_line



def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def new_id(prefix="client"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def test_version_and_nodes(ray_head):
    client = ray_head.client()
    assert client.version()["ray_version"] == "2.60.0"
    nodes = client.list_nodes()
    alive = [n for n in nodes if n["state"] == "ALIVE"]
    assert len(alive) == 1
    head = alive[0]
    assert head["is_head"] is True
    assert head["node_ip"] == ray_head.node_ip
    assert head["resources"]["CPU"] == 2 and isinstance(head["resources"]["CPU"], int)
    assert len(head["node_id"]) == 56


def test_submit_twice_reports_exists_and_waits(ray_head):
    client = ray_head.client()
    sid = new_id()
    assert client.submit_job(sid, "echo first-run") is True
    assert client.submit_job(sid, "echo second-run") is False
    # The raw answer Ray gives to the second POST: HTTP 500 carrying the marker sentence.
    with pytest.raises(RayHTTPError) as err:
        client.request("POST", "/api/jobs/", {"submission_id": sid, "entrypoint": "echo again"})
    assert err.value.status == 500 and EXISTS_MARKER in err.value.body
    assert "\n" not in str(err.value)
    job, timed_out = client.wait_for_job(sid, timeout=120, poll_interval=0.3)
    assert (job["status"], timed_out, job["driver_exit_code"]) == ("SUCCEEDED", False, 0)
    assert job["entrypoint"] == "echo first-run"
    assert "first-run" in client.get_logs(sid)
    assert [j["submission_id"] for j in client.list_jobs()].count(sid) == 1
    assert client.delete_job(sid) is True
    assert client.get_job(sid) is None


def test_unknown_job_answers(ray_head):
    client = ray_head.client()
    assert client.get_job("no-such-job") is None
    assert client.get_logs("no-such-job") == ""
    assert client.stop_job("no-such-job") is False
    assert client.delete_job("no-such-job") is False


@pytest.mark.parametrize("token,status", [(None, 401), ("wrong-token-0123456789", 403)])
def test_auth_rejected(ray_head, token, status):
    with pytest.raises(RayAuthError) as err:
        RayClient(ray_head.address, token=token).list_jobs()
    msg = str(err.value)
    assert err.value.status == status
    assert "HTTP %d" % status in msg and "RAY_AUTH_TOKEN" in msg and "auth_token" in msg
    assert "\n" not in msg
    if token:
        assert token not in msg and token not in (err.value.body or "")


def test_unreachable_retries_gets_only():
    port = free_port()
    sleeps = []
    client = RayClient("127.0.0.1:%d" % port, token="t0ken-value", retries=2, backoff=0.01, sleep=sleeps.append)
    with pytest.raises(RayUnreachableError) as err:
        client.list_jobs()
    assert "http://127.0.0.1:%d" % port in str(err.value) and "refused" in str(err.value)
    assert sleeps == [0.01, 0.02]
    sleeps.clear()
    with pytest.raises(RayUnreachableError):
        client.submit_job("x", "true")
    assert sleeps == []


class _Stub(BaseHTTPRequestHandler):
    """Answers 503 to the first ``fail`` GETs, then 200; echoes a body containing the token on POST."""

    fail = 2
    seen = []

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        if len(self.seen) <= self.fail:
            self._reply(503, "busy")
        else:
            self._reply(200, json.dumps([{"submission_id": "a"}]))

    def do_POST(self):
        self.seen.append(self.headers.get("Authorization"))
        self._reply(500, "boom, header was %s" % self.headers.get("Authorization"))

    def _reply(self, code, body):
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def stub():
    _Stub.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_5xx_retried_on_get_and_token_redacted(stub):
    sleeps = []
    client = RayClient(stub, token="s3cret-token", retries=3, backoff=0.01, sleep=sleeps.append)
    assert client.list_jobs() == [{"submission_id": "a"}]
    assert _Stub.seen == ["Bearer s3cret-token"] * 3 and sleeps == [0.01, 0.02]
    with pytest.raises(RayHTTPError) as err:
        client.submit_job("a", "true")
    assert len(_Stub.seen) == 4  # POST is never retried
    assert err.value.status == 500 and "s3cret-token" not in str(err.value) + err.value.body
    assert "Bearer ********" in str(err.value)


def test_small_helpers():
    assert normalize_address("10.0.0.5:8265/") == "http://10.0.0.5:8265"
    assert normalize_address("https://h:1") == "https://h:1"
    assert ms_to_iso(1795266479122) == "2026-11-21T13:07:59.122Z"
    assert ms_to_iso(None) is None
    assert tail_lines("a\nb\nc\n", 2) == "b\nc" and tail_lines("a", 0) == ""


def test_wait_for_job_times_out(ray_head):
    client = ray_head.client()
    sid = new_id("sleepy")
    client.submit_job(sid, "sleep 60")
    t0 = time.monotonic()
    job, timed_out = client.wait_for_job(sid, timeout=1, poll_interval=0.2)
    assert timed_out is True and job["status"] in ("PENDING", "RUNNING")
    assert time.monotonic() - t0 < 5
    client.stop_job(sid)  # stopping and its outcome are covered by the ray_job tests


# verl progress lines -------------------------------------------------------------------------

def test_parse_plain_verl_line():
    step, metrics = parse_progress_line("step:12 - actor/pg_loss:0.1 - critic/score/mean:0.5 - timing_s/gen:3.250")
    assert step == 12
    assert metrics == {"actor/pg_loss": 0.1, "critic/score/mean": 0.5, "timing_s/gen": 3.25}


def test_parse_ray_prefixed_numpy_line():
    line = ("\x1b[36m(TaskRunner pid=4242)\x1b[0m step:7 - actor/entropy:np.float64(0.6931) - "
            "actor/lr:1e-06 - training/global_step:7 - val-core/acc:nan - flag:True - note:abc "
            "[repeated 2x across cluster]")
    step, metrics = parse_progress_line(line)
    assert step == 7
    assert metrics["actor/entropy"] == pytest.approx(0.6931)
    assert metrics["actor/lr"] == 1e-06 and metrics["training/global_step"] == 7.0
    assert math.isnan(metrics["val-core/acc"]) and metrics["flag"] == 1.0
    assert "note" not in metrics


def test_non_progress_lines_are_ignored():
    for line in ("Training Progress:  10%|#  | step:3/30", "epoch 1 step:", "mystep:3 - a:1", ""):
        assert parse_progress_line(line) is None


def test_last_progress_picks_newest():
    log = "\n".join([
        "Running entrypoint for job x",
        "(TaskRunner pid=1) step:1 - actor/pg_loss:0.30 - critic/score/mean:0.10",
        "(TaskRunner pid=1) step:2 - actor/pg_loss:0.20 - critic/score/mean:0.25",
        "(WorkerDict pid=9) some warning",
    ])
    assert last_progress(log) == (2, {"actor/pg_loss": 0.2, "critic/score/mean": 0.25})
    assert last_progress("no progress here") == (None, {})
    assert last_progress(None) == (None, {})


def test_token_file_is_read_where_the_module_runs(tmp_path, monkeypatch):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import RayError, resolve_token
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    token_file = tmp_path / "auth_token"
    token_file.write_text("from-file\n")
    assert resolve_token(None, str(token_file)) == "from-file"  # the file wins over the environment
    assert resolve_token("explicit", str(token_file)) == "explicit"
    assert resolve_token(None, None) == "from-env"
    with pytest.raises(RayError, match=r"^cannot read the Ray token file %s/missing: No such file or directory "
                       r"\(site.yml writes it on every node" % tmp_path):
        resolve_token(None, str(tmp_path / "missing"))
