"""HyperbolicClient: auth header, errors, retries and backoff (plugins/module_utils/hyperbolic/client.py)."""

from __future__ import annotations

import io
import json
import socket
from email.message import Message
from urllib.error import HTTPError, URLError

import conftest_hyperbolic  # noqa: F401  (sys.path set-up)
import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import client as hyperbolic
from tests.fake_hyperbolic.server import FakeHyperbolic, make_fleet

KEY = "sk-unit-test-0123456789abcdef"


class _Resp:
    def __init__(self, body):
        self._body = body if isinstance(body, bytes) else json.dumps(body).encode()

    def read(self, size=-1):
        return self._body if size is None or size < 0 else self._body[:size]

    def close(self):
        pass


def _http_error(url, status, body=b"", headers=None):
    msg = Message()
    for k, v in (headers or {}).items():
        msg[k] = v
    return HTTPError(url, status, "status %d" % status, msg, io.BytesIO(body))


class Script:
    """A fake ``open_url``: plays a list of answers (objects to return or exceptions to raise)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, url, **kwargs):
        self.calls.append((url, kwargs))
        answer = self.answers.pop(0)
        if callable(answer) and not isinstance(answer, _Resp):
            answer = answer(url)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def client(opener, sleeps=None, **kwargs):
    params = dict(
        api_key=KEY,
        api_url="https://api.example.test/",
        retries=3,
        retry_backoff=0.5,
        retry_max_wait=10,
        opener=opener,
        sleep=(sleeps.append if sleeps is not None else lambda s: None),
    )
    params.update(kwargs)
    return hyperbolic.HyperbolicClient(**params)


def test_bearer_header_and_url():
    opener = Script(_Resp([{"id": "a"}]))
    assert client(opener).list_source("on_demand") == [{"id": "a"}]
    url, kwargs = opener.calls[0]
    assert url == "https://api.example.test/v2/on-demand/virtual-machine-rentals"
    assert kwargs["headers"]["Authorization"] == "Bearer " + KEY
    assert kwargs["method"] == "GET"
    assert kwargs["use_netrc"] is False
    assert "Authorization" in kwargs["unredirected_headers"]


def test_marketplace_envelope():
    opener = Script(_Resp({"instances": [{"id": "m"}]}))
    assert client(opener).list_source("marketplace") == [{"id": "m"}]
    assert opener.calls[0][0].endswith("/v1/marketplace/instances")


@pytest.mark.parametrize("status, word", [(401, "Unauthorized"), (403, "Forbidden")])
def test_auth_error_one_line_with_api_message_no_key(status, word):
    body = json.dumps({"detail": "Invalid API key %s" % KEY}).encode()  # even if the API echoes it
    opener = Script(lambda url: _http_error(url, status, body))
    with pytest.raises(hyperbolic.HyperbolicAuthError) as err:
        client(opener).list_source("on_demand")
    text = str(err.value)
    assert "HTTP %d %s" % (status, word) in text
    assert "Invalid API key" in text
    assert KEY not in text and "\n" not in text
    assert len(opener.calls) == 1  # never retried


def by_path(answers):
    """A thread-safe fake ``open_url`` answering per URL path (fetch() asks sources concurrently)."""
    calls = []

    def opener(url, **kwargs):
        calls.append(url)
        for suffix, answer in answers.items():
            if url.endswith(suffix):
                answer = answer(url) if callable(answer) else answer
                if isinstance(answer, BaseException):
                    raise answer
                return answer
        raise AssertionError(url)

    opener.calls = calls
    return opener


def test_404_is_not_found_and_fetch_skips_it():
    opener = by_path(
        {
            "/virtual-machine-rentals": _Resp([{"id": "a"}]),
            "/marketplace/instances": lambda url: _http_error(url, 404, b'{"detail": "Not Found"}'),
        }
    )
    result = client(opener).fetch(["on_demand", "marketplace"])
    assert result["sources"] == {"on_demand": [{"id": "a"}]}
    assert "404" in result["skipped"]["marketplace"]


def test_fetch_failure_of_any_source_raises_first_in_order():
    opener = by_path(
        {
            "/virtual-machine-rentals": lambda url: _http_error(url, 401, b'{"detail": "bad key"}'),
            "/marketplace/instances": lambda url: _http_error(url, 403, b'{"detail": "no"}'),
        }
    )
    with pytest.raises(hyperbolic.HyperbolicAuthError, match="HTTP 401"):
        client(opener).fetch(["on_demand", "marketplace"])
    opener = by_path(
        {"/virtual-machine-rentals": _Resp([]), "/marketplace/instances": lambda url: _http_error(url, 422, b"")}
    )
    with pytest.raises(hyperbolic.HyperbolicError, match="HTTP 422"):
        client(opener).fetch(["on_demand", "marketplace"])


def test_5xx_then_success_with_exponential_backoff():
    sleeps = []
    opener = Script(lambda u: _http_error(u, 500), lambda u: _http_error(u, 502), _Resp([]))
    assert client(opener, sleeps).list_source("on_demand") == []
    assert len(opener.calls) == 3
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0  # equal jitter around 0.5 * 2**n


def test_429_honours_retry_after():
    sleeps = []
    opener = Script(lambda u: _http_error(u, 429, b'{"detail": "slow down"}', {"Retry-After": "7"}), _Resp([]))
    client(opener, sleeps).list_source("on_demand")
    assert sleeps == [7.0]


def test_retry_after_is_capped():
    sleeps = []
    opener = Script(lambda u: _http_error(u, 503, b"", {"Retry-After": "3600"}), _Resp([]))
    client(opener, sleeps, retry_max_wait=2).list_source("on_demand")
    assert sleeps == [2.0]


def test_gives_up_after_retries_with_clear_message():
    sleeps = []
    opener = Script(*[(lambda u: _http_error(u, 500, b'{"detail": "boom"}'))] * 4)
    with pytest.raises(hyperbolic.HyperbolicUnavailable) as err:
        client(opener, sleeps).list_source("on_demand")
    assert "after 4 attempts" in str(err.value) and "HTTP 500: boom" in str(err.value)
    assert len(sleeps) == 3


@pytest.mark.parametrize("exc", [socket.timeout("timed out"), TimeoutError(), URLError(socket.timeout("timed out"))])
def test_timeouts_are_retried_then_fail(exc):
    opener = Script(exc, exc)
    with pytest.raises(hyperbolic.HyperbolicUnavailable, match="timed out"):
        client(opener, retries=1, timeout=2).list_source("on_demand")
    assert len(opener.calls) == 2


def test_connection_refused_is_retried():
    opener = Script(URLError(ConnectionRefusedError(111, "Connection refused")), _Resp([]))
    assert client(opener).list_source("on_demand") == []


def test_other_4xx_fails_without_retry():
    opener = Script(lambda u: _http_error(u, 422, b'{"detail": [{"msg": "bad"}]}'))
    with pytest.raises(hyperbolic.HyperbolicError, match="HTTP 422") as err:
        client(opener).list_source("on_demand")
    assert not isinstance(err.value, hyperbolic.HyperbolicUnavailable)
    assert len(opener.calls) == 1


def test_not_json_fails_clearly():
    opener = Script(_Resp(b"<html>maintenance</html>"))
    with pytest.raises(hyperbolic.HyperbolicResponseError, match="malformed JSON from https://api.example.test/v2/"):
        client(opener).list_source("on_demand")


def test_missing_key_and_repr():
    with pytest.raises(hyperbolic.HyperbolicError, match="HYPERBOLIC_API_KEY"):
        hyperbolic.HyperbolicClient(api_key="")
    assert KEY not in repr(client(Script()))
    assert client(Script()).scrub("x %s y" % KEY) == "x ******** y"


# ----------------------------------------------------------------------------- real HTTP
def test_against_fake_server_over_loopback():
    with FakeHyperbolic(api_key=KEY) as fake:
        fake.set_fleet(10)
        fake.fail_next(1, status=500)
        c = hyperbolic.HyperbolicClient(api_key=KEY, api_url=fake.url, retries=2, retry_backoff=0.01, timeout=5)
        result = c.fetch(["on_demand", "marketplace"])
        assert len(result["sources"]["on_demand"]) == 5
        assert len(result["sources"]["marketplace"]) == 5
        assert fake.request_count == 3
        assert all(ok for (_m, _p, status, ok) in fake.requests if status == 200)

        bad = hyperbolic.HyperbolicClient(api_key="wrong", api_url=fake.url, retries=0)
        with pytest.raises(hyperbolic.HyperbolicAuthError, match="HTTP 401 Unauthorized.*Invalid API key"):
            bad.list_source("on_demand")


def test_fake_fleet_is_deterministic_and_mixed():
    od1, mk1 = make_fleet(8, clusters=["a", "b"])
    od2, mk2 = make_fleet(8, clusters=["a", "b"])
    assert (od1, mk1) == (od2, mk2)
    commands = [m["sshCommand"] for m in mk1]
    assert any(c.startswith("ssh -p") for c in commands) and any(
        " -p " in c and not c.startswith("ssh -p") for c in commands
    )


def test_certificate_failure_is_not_retried():
    import ssl

    err = URLError(ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] self-signed"))
    opener = Script(err, err)
    with pytest.raises(hyperbolic.HyperbolicError, match="TLS certificate verification failed") as exc:
        client(opener).list_source("on_demand")
    assert not isinstance(exc.value, hyperbolic.HyperbolicUnavailable)
    assert len(opener.calls) == 1


def test_an_answer_over_the_bound_is_not_read_whole():
    """A 76 MB answer was read whole (65 s, 1.4 GB): now at most max_response_mib + 1 byte is read, and one line."""
    big = b"[" + b"{}," * (2 * 1024 * 1024) + b"{}]"
    script = Script(_Resp(big))
    client = hyperbolic.HyperbolicClient(
        KEY, api_url="https://api.example.test", opener=script, sleep=lambda s: None, max_response_mib=1
    )
    with pytest.raises(hyperbolic.HyperbolicError) as err:
        client.list_source("on_demand")
    assert str(err.value) == (
        "the answer to GET /v2/on-demand/virtual-machine-rentals is over 1 MiB, more than an "
        "instance list can be: not read; if the account really holds that much, raise "
        "max_response_mib"
    )


def test_a_null_instance_list_is_said():
    script = Script(_Resp({"instances": None}))
    client = hyperbolic.HyperbolicClient(KEY, api_url="https://api.example.test", opener=script, sleep=lambda s: None)
    raw = client.fetch(["marketplace"])
    assert raw["sources"]["marketplace"] == []
    assert raw["notes"] == {
        "marketplace": "marketplace answer from https://api.example.test/v1/marketplace/instances "
        "holds instances: null, read as no instances"
    }
