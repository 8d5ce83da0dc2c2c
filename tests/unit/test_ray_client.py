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

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    EXISTS_MARKER,
    FIRST_POLL_PAUSE,
    POLL_BACKOFF,
    RayAuthError,
    RayClient,
    RayHTTPError,
    RayUnreachableError,
    ms_to_iso,
    normalize_address,
    poll_pauses,
    tail_lines,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.log import last_progress, parse_progress_line


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


def test_wait_for_job_polls_early_then_backs_off(ray_head):
    """A short job is seen ending within a fraction of a second; a long one costs few polls."""
    pauses = []

    def sleep(seconds):
        pauses.append(seconds)
        time.sleep(seconds)

    client = RayClient(ray_head.address, token=ray_head.token, sleep=sleep)
    sid = new_id("backoff")
    client.submit_job(sid, "sleep 6")
    job, timed_out = client.wait_for_job(sid, timeout=120, poll_interval=0.5)
    assert job["status"] == "SUCCEEDED" and not timed_out
    assert pauses[0] == 0.1
    grown = [round(b / a, 3) for a, b in zip(pauses, pauses[1:]) if b < 0.5]
    assert grown and all(g == POLL_BACKOFF for g in grown), pauses
    assert max(pauses) == 0.5 and pauses[-1] == 0.5  # capped at poll_interval once grown
    # The job's own run time plus at most one pause: seen ending promptly.
    ended = (job["end_time"] - job["start_time"]) / 1000.0
    assert sum(pauses) < ended + 1.0 + 0.5


# verl progress lines -------------------------------------------------------------------------


def test_parse_plain_verl_line():
    step, metrics = parse_progress_line("step:12 - actor/pg_loss:0.1 - critic/score/mean:0.5 - timing_s/gen:3.250")
    assert step == 12
    assert metrics == {"actor/pg_loss": 0.1, "critic/score/mean": 0.5, "timing_s/gen": 3.25}


def test_parse_ray_prefixed_numpy_line():
    line = (
        "\x1b[36m(TaskRunner pid=4242)\x1b[0m step:7 - actor/entropy:np.float64(0.6931) - "
        "actor/lr:1e-06 - training/global_step:7 - val-core/acc:nan - flag:True - note:abc "
        "[repeated 2x across cluster]"
    )
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
    log = "\n".join(
        [
            "Running entrypoint for job x",
            "(TaskRunner pid=1) step:1 - actor/pg_loss:0.30 - critic/score/mean:0.10",
            "(TaskRunner pid=1) step:2 - actor/pg_loss:0.20 - critic/score/mean:0.25",
            "(WorkerDict pid=9) some warning",
        ]
    )
    assert last_progress(log) == (2, {"actor/pg_loss": 0.2, "critic/score/mean": 0.25})
    assert last_progress("no progress here") == (None, {})
    assert last_progress(None) == (None, {})


def test_token_file_is_read_where_the_module_runs(tmp_path, monkeypatch):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, resolve_token

    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    token_file = tmp_path / "auth_token"
    token_file.write_text("from-file\n")
    assert resolve_token(None, str(token_file)) == "from-file"  # the file wins over the environment
    assert resolve_token("explicit", str(token_file)) == "explicit"
    assert resolve_token(None, None) == "from-env"
    with pytest.raises(
        RayError,
        match=r"^cannot read the Ray token file %s/missing: No such file or directory "
        r"\(site.yml writes it on every node" % tmp_path,
    ):
        resolve_token(None, str(tmp_path / "missing"))


# The rlinfra_ray local fact: where a module without an address connects, and which token file it reads ------


@pytest.fixture
def fact(tmp_path, monkeypatch):
    """Points FACT_PATH at a file in tmp_path (absent until written); returns a writer: a dict is written as
    JSON, a str as it is."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client

    path = tmp_path / "facts.d" / "rlinfra_ray.fact"
    monkeypatch.setattr(ray_client, "FACT_PATH", str(path))

    def write(content):
        path.parent.mkdir(exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        return path

    write.path = path
    return write


FACT = {
    "role": "head",
    "cluster": "c1",
    "node_ip": "10.0.0.5",
    "gcs_address": "10.0.0.5:6379",
    "dashboard_url": "http://10.0.0.5:8265",
    "token_path": "/etc/ray/auth_token",
    "venv": "/opt/rlinfra/venv",
    "temp_dir": "/tmp/ray",
}


def test_the_fact_gives_address_and_token_path(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import dashboard_target, local_ray_fact

    fact(FACT)
    assert local_ray_fact() == FACT
    target = dashboard_target("", None, None)
    assert (target["address"], target["auth_token_path"], target["warning"]) == (
        "http://10.0.0.5:8265",
        "/etc/ray/auth_token",
        None,
    )
    assert target["fact"]["venv"] == "/opt/rlinfra/venv"
    # None (an option set to null) is as unset as ''
    assert dashboard_target(None)["address"] == "http://10.0.0.5:8265"


def test_explicit_options_win_over_the_fact(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import dashboard_target

    fact(FACT)
    target = dashboard_target("http://127.0.0.1:1", None, "/run/my_token")
    assert (target["address"], target["auth_token_path"]) == ("http://127.0.0.1:1", "/run/my_token")
    # a token given as a value: no token file at all, not even the fact's
    assert dashboard_target("", "tok", None)["auth_token_path"] is None
    # a blank address is a mistake to report, not a request for the fact
    assert dashboard_target("  ")["address"] == "  "


def test_the_fact_token_file_comes_before_the_environment(fact, tmp_path, monkeypatch):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import dashboard_target, resolve_token

    token_file = tmp_path / "auth_token"
    token_file.write_text("from-fact-file\n")
    fact(dict(FACT, token_path=str(token_file)))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-env")
    target = dashboard_target("", None, None)
    assert resolve_token(None, target["auth_token_path"]) == "from-fact-file"
    fact(dict(FACT, token_path=""))  # a cluster without token auth: the environment still counts
    assert resolve_token(None, dashboard_target("", None, None)["auth_token_path"]) == "from-env"


def test_no_fact_and_no_address_is_one_line(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, dashboard_target

    with pytest.raises(RayError) as err:
        dashboard_target("", None, None)
    assert str(err.value) == (
        "no Ray dashboard address on this host: it has no rlinfra_ray local fact (%s, written by "
        "site.yml) and address is not set" % fact.path
    )
    # with an address, a host without the fact is fine: the token then comes from the environment
    assert dashboard_target("http://10.0.0.5:8265", None, None) == dict(
        address="http://10.0.0.5:8265", auth_token_path=None, fact={}, warning=None
    )


def test_a_fact_without_dashboard_url_is_one_line(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, dashboard_target

    fact({k: v for k, v in FACT.items() if k != "dashboard_url"})
    with pytest.raises(
        RayError,
        match=r"^no Ray dashboard address on this host: its rlinfra_ray local fact \(%s\) "
        r"has no dashboard_url \(run site.yml again\) and address is not set$" % fact.path,
    ):
        dashboard_target("")


@pytest.mark.parametrize(
    "content,reason",
    [
        (
            '{"role": "head", "dashboard_url": "http://10.0',
            "not valid JSON (Unterminated string starting at: line 1 "
            "column 35 (char 34)): it is half-written or damaged",
        ),
        ("", "not valid JSON (Expecting value: line 1 column 1 (char 0)): it is half-written or damaged"),
        ('["http://10.0.0.5:8265"]', "not a JSON object but list: it is damaged"),
    ],
)
def test_a_broken_fact_is_one_line_naming_the_file(fact, content, reason):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
        RayError,
        dashboard_target,
        local_ray_fact,
    )

    fact(content)
    line = "the rlinfra_ray local fact %s is %s; run site.yml again to rewrite it" % (fact.path, reason)
    for call in (local_ray_fact, lambda: dashboard_target("")):
        with pytest.raises(RayError) as err:
            call()
        assert str(err.value) == line and "\n" not in line


def test_a_broken_fact_only_looked_at_for_the_token_is_a_warning(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, dashboard_target

    fact("{")
    target = dashboard_target("http://10.0.0.5:8265", None, None)
    assert target["address"] == "http://10.0.0.5:8265" and target["auth_token_path"] is None
    assert target["warning"].startswith("the rlinfra_ray local fact %s is not valid JSON" % fact.path)
    assert target["warning"].endswith("; its token_path was not used")
    fact(dict(FACT, dashboard_url=8265))
    with pytest.raises(RayError) as err:
        dashboard_target("")
    assert str(err.value) == (
        "the rlinfra_ray local fact %s is damaged: dashboard_url is int (8265), not a string; run "
        "site.yml again to rewrite it" % fact.path
    )


def test_an_unusable_dashboard_url_in_the_fact_names_the_fact(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, dashboard_target

    fact(dict(FACT, dashboard_url="http://10.0.0.5:8265/#/jobs"))
    with pytest.raises(RayError) as err:
        dashboard_target("")
    assert str(err.value) == (
        "the dashboard_url of the rlinfra_ray local fact %s is not usable: address must be an "
        "http:// or https:// URL without a query string or fragment (a token does not belong in a "
        "URL), got http://10.0.0.5:8265/..." % fact.path
    )


def test_an_unreadable_fact_is_one_line(fact):
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayError, local_ray_fact

    fact.path.mkdir(parents=True)  # a directory where the file should be: open() fails like a permission error
    with pytest.raises(
        RayError,
        match=r"^cannot read the rlinfra_ray local fact %s: Is a directory \(does the play "
        r"run with become\?\)$" % fact.path,
    ):
        local_ray_fact()


def test_the_watchdog_poll_sees_a_short_job_end_promptly(ray_head):
    """ray_job_poll's watch (one chunk of submit.yml's wait) uses the same early-then-back-off pauses:
    a 2 s job is seen ending well before the 5 s poll_interval experiments default to."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.job_poll import watch

    pauses = []

    def sleep(seconds):
        pauses.append(seconds)
        time.sleep(seconds)

    client = ray_head.client()
    sid = new_id("watch")
    client.submit_job(sid, "sleep 2")
    job, nodes, error = watch(client, sid, timeout=60, poll_interval=5.0, sleep=sleep)
    seen = time.time()
    assert error is None and job["status"] == "SUCCEEDED", (job, error)
    assert nodes and pauses[0] == 0.1 and max(pauses) < 5.0, pauses
    # Seen within one early pause of the end (the head is on this machine: one clock), not a poll_interval later;
    # measured from the job's own end, so a loaded machine's slow job start does not count.
    ran = (job["end_time"] - job["start_time"]) / 1000.0
    assert seen - job["end_time"] / 1000.0 < 0.6 * ran + 0.5, (pauses, ran)


def test_poll_pauses_start_small_grow_and_pick_up_from_the_time_waited():
    from itertools import islice

    fresh = list(islice(poll_pauses(5.0), 60))
    assert fresh[0] == FIRST_POLL_PAUSE and fresh[-1] == 5.0 and fresh == sorted(fresh)
    # After an hour the next pause is poll_interval at once; after 8 s about a tenth of it.
    assert next(poll_pauses(5.0, waited=3600)) == 5.0
    assert next(poll_pauses(5.0, waited=8)) == pytest.approx(8 * (POLL_BACKOFF - 1))
    assert next(poll_pauses(0.2, waited=-30)) == FIRST_POLL_PAUSE  # a clock behind the head's
