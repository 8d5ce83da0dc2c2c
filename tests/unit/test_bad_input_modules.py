"""Bad module arguments, one table: every row runs a module's ``main()`` in-process (as Ansible
would) with one careless or hostile option, expects the exact line (or a precise pattern) it must
fail with, and proves that nothing reached the dashboard: the address is a loopback stub that
records every request. The real Ray head is used once, for the two inputs Ray itself would have
accepted (a ``/`` in the id, a GPU asked as a custom resource).
"""

from __future__ import annotations

import collections
import json
import os
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient, RayError
from ansible_collections.rlinfra.verl.plugins.modules import ray_cluster_info, ray_job, ray_job_poll, ray_package

SECRET = "s3cr3t-value-4711"
PKG = "gcs://_ray_pkg_" + "0" * 40 + ".zip"


class _Recorder(BaseHTTPRequestHandler):
    requests = []
    bodies = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        type(self).requests.append((self.command, self.path))
        type(self).bodies.append(self.rfile.read(length) if length else b"")
        body = b"not found"
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def stub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


MODULES = {
    "ray_job": ray_job.main,
    "ray_job_poll": ray_job_poll.main,
    "ray_cluster_info": ray_cluster_info.main,
    "ray_package": ray_package.main,
}
Row = collections.namedtuple("Row", "id module args expected")


def row(id, module, expected, **args):
    return Row(id, module, args, expected)


def job(id, expected, **args):
    args.setdefault("submission_id", "ok-job")
    args.setdefault("entrypoint", "echo hi")
    return row(id, "ray_job", expected, **args)


ID_RULE = (
    "1-200 letters, digits, '_', '.' or '-', starting with a letter or digit (Ray cannot read, stop nor delete a "
    "job whose id has '/' or other characters)"
)
SID = "submission_id must be " + ID_RULE + ", got %r"
URL = "address must be an http:// or https:// URL"
NO_QUERY = URL + " without a query string or fragment (a token does not belong in a URL), got {stub}/..."
BUILTIN = "Ray takes CPUs, GPUs and memory through their own options, not as custom resources; use %s"

ROWS = [
    # --- submission ids Ray cannot address again ------------------------------------------------
    job("sid_slash", SID % "team/run-1", submission_id="team/run-1"),
    job("sid_space", SID % "my run", submission_id="my run"),
    job("sid_empty", "submission_id must not be empty (it must be %s), got ''" % ID_RULE, submission_id=""),
    job("sid_dot_dot", SID % "..", submission_id=".."),
    job(
        "sid_too_long",
        "submission_id must be at most 200 characters long, got '%s...'" % ("a" * 77),
        submission_id="a" * 201,
    ),
    job("sid_unicode", SID % "j\u00f6b", submission_id="j\u00f6b"),
    job("sid_query", SID % "x?delete=1", submission_id="x?delete=1"),
    # --- addresses: never shown beyond scheme, host and port (a token can hide in the rest) ------
    job(
        "address_unclosed_ipv6",
        URL + " (invalid ipv6 url), got a value that is not a URL (not shown)",
        address="http://[::1",
    ),
    job("address_dashboard_page", NO_QUERY, address="{stub}/#/jobs"),
    job("address_query", NO_QUERY, address="{stub}?token=x"),
    job(
        "address_api_path",
        URL + " without a path (scheme, host and port only), got {stub}/...",
        address="{stub}/api/jobs",
    ),
    job("address_scheme", URL + ", got ftp://127.0.0.1:8265", address="ftp://127.0.0.1:8265"),
    job(
        "address_port_range",
        URL + " (port out of range 0-65535), got a value that is not a URL (not shown)",
        address="http://127.0.0.1:70000",
    ),
    job(
        "address_credentials",
        URL + " without credentials before '@' (give a token through its own secret option), got "
        "http://********@127.0.0.1:8265",
        address="http://ray:%s@127.0.0.1:8265" % SECRET,
    ),
    job("address_blank", "address is empty: give the Ray dashboard URL, e.g. http://10.0.0.5:8265", address="  "),
    job(
        "address_space",
        URL + " without spaces, got a value with spaces or line breaks (not shown)",
        address="127.0.0.1 :8265",
    ),
    job(
        "auth_token_line_break",
        "auth_token must be the secret alone, without spaces, line breaks or other characters "
        "a token cannot have (the value is not shown)",
        auth_token=SECRET + "\nHost: evil",
    ),
    # --- the entrypoint -------------------------------------------------------------------------
    job(
        "entrypoint_blank",
        "entrypoint is empty: give the shell command that starts the driver (leave entrypoint out "
        "only to look up, stop or delete an existing job)",
        entrypoint=" \t ",
    ),
    job(
        "entrypoint_nul",
        "entrypoint contains a NUL character (\\0), which no command line can carry",
        entrypoint="echo a\0b",
    ),
    job(
        "entrypoint_too_long",
        "entrypoint is 131078 bytes, over the 131071 Linux allows for one command line argument "
        "(Ray runs it with /bin/sh -c); move long values into a file",
        entrypoint="echo " + "x" * 131073,
    ),
    # --- durations and counts -------------------------------------------------------------------
    job(
        "wait_timeout_zero",
        "wait_timeout must be a number of seconds from 1 to 31622400, got 0 (use state=submitted not to wait)",
        wait_timeout=0,
        state="finished",
    ),
    job(
        "wait_timeout_negative",
        "wait_timeout must be a number of seconds from 1 to 31622400, got -5 (use state=submitted not to wait)",
        wait_timeout=-5,
    ),
    job(
        "poll_interval_zero", "poll_interval must be a number of seconds from 0.1 to 31622400, got 0.0", poll_interval=0
    ),
    job("poll_interval_nan", "poll_interval must be a finite number, got nan", poll_interval="nan"),
    job("poll_interval_inf", "poll_interval must be a finite number, got inf", poll_interval="inf"),
    job(
        "poll_interval_tiny",
        "poll_interval must be a number of seconds from 0.1 to 31622400, got 0.001",
        poll_interval=0.001,
    ),
    # Seconds past a year overflowed the C time types a socket or sleep takes, after the job was submitted.
    job(
        "wait_timeout_huge",
        "wait_timeout must be a number of seconds from 1 to 31622400, got 1000000000000 (use "
        "state=submitted not to wait)",
        wait_timeout=10**12,
    ),
    job(
        "poll_interval_huge",
        "poll_interval must be a number of seconds from 0.1 to 31622400, got 1e+300",
        poll_interval=1e300,
    ),
    job(
        "logs_tail_lines_huge",
        "logs_tail_lines must be a whole number from 0 to 10000, got 1000000000",
        logs_tail_lines=10**9,
    ),
    job(
        "logs_tail_lines_negative", "logs_tail_lines must be a whole number from 0 to 10000, got -1", logs_tail_lines=-1
    ),
    # --- metadata and runtime_env shapes --------------------------------------------------------
    job(
        "metadata_mapping_value",
        "metadata.owner: expected a string, got a mapping ({'name': 'x'}); quote it to pass text",
        metadata={"owner": {"name": "x"}},
    ),
    job(
        "metadata_boolean",
        "metadata.flag: expected a string, got a boolean (True); quote it to pass text",
        metadata={"flag": True},
    ),
    job("metadata_null", "metadata.x: expected a string, got null; quote it to pass text", metadata={"x": None}),
    job(
        "env_vars_list",
        "runtime_env.env_vars must be a mapping of NAME: value, got list",
        runtime_env={"env_vars": ["A=1"]},
    ),
    job(
        "env_value_boolean",
        "runtime_env.env_vars.DEBUG: expected a string, got a boolean (True); quote it to pass text",
        runtime_env={"env_vars": {"DEBUG": True}},
    ),
    job(
        "env_value_mapping",
        "runtime_env.env_vars.CFG: expected a string, got a mapping ({'a': 1}); quote it to pass text",
        runtime_env={"env_vars": {"CFG": {"a": 1}}},
    ),
    job(
        "env_name_with_equals",
        "runtime_env.env_vars: 'A=B' is not a valid variable name ('=' ends a name in the environment)",
        runtime_env={"env_vars": {"A=B": "1"}},
    ),
    job(
        "env_value_nul",
        "runtime_env.env_vars.X: the value contains a NUL character (\\0), which Ray cannot carry",
        runtime_env={"env_vars": {"X": "a\0b"}},
    ),
    job(
        "working_dir_number",
        "runtime_env.working_dir must be a non-empty string (a URI or a path), got 5",
        runtime_env={"working_dir": 5},
    ),
    # --- resources ------------------------------------------------------------------------------
    job(
        "gpu_as_custom_resource",
        "entrypoint_resources.GPU: " + BUILTIN % "entrypoint_num_gpus",
        entrypoint_resources={"GPU": 1},
    ),
    job(
        "memory_as_custom_resource",
        "entrypoint_resources.memory: " + BUILTIN % "entrypoint_memory",
        entrypoint_resources={"memory": 10**9},
    ),
    job("negative_cpus", "entrypoint_num_cpus must not be negative, got -1.0", entrypoint_num_cpus=-1),
    job("nan_gpus", "entrypoint_num_gpus must be a finite number, got nan", entrypoint_num_gpus="nan"),
    job(
        "cpus_below_precision",
        "entrypoint_num_cpus: 1e-05 is below Ray's resource precision; use 0 or at least 0.0001",
        entrypoint_num_cpus=0.00001,
    ),
    job(
        "custom_resource_text",
        "entrypoint_resources.accel must be a finite number, got 'lots'",
        entrypoint_resources={"accel": "lots"},
    ),
    # --- wrong types: Ansible's own one line ----------------------------------------------------
    job(
        "wrong_type_wait_timeout",
        re.compile(
            r"^argument 'wait_timeout' is of type str and we were unable to convert "
            r"to int: .*'soon'"
        ),
        wait_timeout="soon",
    ),
    job(
        "wrong_type_state",
        re.compile(
            r"^value of state must be one of: submitted, finished, stopped, absent, got: "
            r"done$"
        ),
        state="done",
    ),
    # --- the other modules ----------------------------------------------------------------------
    row("poll_sid_slash", "ray_job_poll", SID % "a/b", submission_id="a/b"),
    row(
        "poll_negative_timeout",
        "ray_job_poll",
        "timeout must be a number of seconds from 0 to 31622400, got -1",
        submission_id="x",
        timeout=-1,
    ),
    row(
        "poll_zero_interval",
        "ray_job_poll",
        "poll_interval must be a number of seconds from 0.1 to 31622400, got 0.0",
        submission_id="x",
        poll_interval=0,
    ),
    # ray_job_poll has no upper bound: ray_job_wait reads the whole log through it, to save it.
    row(
        "poll_tail_negative",
        "ray_job_poll",
        "logs_tail_lines must not be negative, got -5 (0 does not read the log)",
        submission_id="x",
        logs_tail_lines=-5,
    ),
    row(
        "info_negative_timeout",
        "ray_cluster_info",
        "timeout must be a number of seconds from 0 to 31622400, got -10",
        timeout=-10,
    ),
    row("info_negative_nodes", "ray_cluster_info", "wait_for_nodes must not be negative, got -2", wait_for_nodes=-2),
    row(
        "info_empty_host",
        "ray_cluster_info",
        "expected_hosts: an entry is empty (an inventory variable that is not set?)",
        expected_hosts=["10.0.0.5", ""],
    ),
    row(
        "info_bad_address",
        "ray_cluster_info",
        URL + " (invalid ipv6 url), got a value that is not a URL (not shown)",
        address="http://[::1",
    ),
    row(
        "package_bad_uri",
        "ray_package",
        "uri must be a package URI made by rlinfra, gcs://_ray_pkg_<sha1 of the zip>.zip, got 'gcs://../../etc/passwd'",
        uri="gcs://../../etc/passwd",
        src="{tmp}/pkg.zip",
    ),
    row(
        "package_src_directory",
        "ray_package",
        "src {tmp} is not a file (the working_dir zip made by rlinfra.verl.verl_experiment)",
        uri=PKG,
        src="{tmp}",
    ),
    row(
        "package_src_too_large",
        "ray_package",
        "src {tmp}/huge.zip is 101.0 MiB, over the 100.0 MiB Ray accepts "
        "through the dashboard; leave large files out of the working_dir",
        uri=PKG,
        src="{tmp}/huge.zip",
    ),
]
assert len({r.id for r in ROWS}) == len(ROWS)


def _fill(value, stub, tmp):
    if isinstance(value, str):
        return value.replace("{stub}", stub).replace("{tmp}", tmp)
    return value


@pytest.mark.parametrize("r", ROWS, ids=[r.id for r in ROWS])
def test_one_clear_line_and_no_request(r, module_runner, stub, tmp_path):
    tmp = str(tmp_path)
    with open(os.path.join(tmp, "huge.zip"), "wb") as f:
        f.truncate(101 * 1024 * 1024)  # sparse: the module must refuse it before reading
    args = dict(address=stub, auth_token=SECRET)
    args.update({k: _fill(v, stub, tmp) for k, v in r.args.items()})
    _Recorder.requests.clear()
    res = module_runner(MODULES[r.module], args)
    assert res.get("failed") is True, res
    msg = res["msg"]
    if isinstance(r.expected, re.Pattern):
        assert r.expected.search(msg), msg
    else:
        assert msg == _fill(r.expected, stub, tmp)
    assert "\n" not in msg and "Traceback" not in json.dumps(res)
    assert _Recorder.requests == []  # refused before any request
    assert res.get("changed") in (None, False)
    assert SECRET not in json.dumps(res)


def test_table_is_large_enough():
    assert len(ROWS) >= 30


def test_several_problems_one_line_each(module_runner, stub):
    res = module_runner(
        ray_job.main,
        dict(address=stub, submission_id="a b", entrypoint=" ", wait_timeout=0, entrypoint_resources={"CPU": 1}),
    )
    assert res["msg"].splitlines() == [
        SID % "a b",
        "entrypoint is empty: give the shell command that starts the driver (leave entrypoint out only to look up, "
        "stop or delete an existing job)",
        "entrypoint_resources.CPU: " + BUILTIN % "entrypoint_num_cpus",
        "wait_timeout must be a number of seconds from 1 to 31622400, got 0 (use state=submitted not to wait)",
    ]


def test_numbers_in_metadata_and_env_vars_become_text(module_runner, stub):
    """What stays accepted: Ansible turns "3" into 3; the job gets "3", as written."""
    _Recorder.requests.clear()
    _Recorder.bodies.clear()
    res = module_runner(
        ray_job.main,
        dict(
            address=stub,
            submission_id="fine-1",
            entrypoint="echo",
            metadata={"n": 3},
            runtime_env={"env_vars": {"N": 1, "LR": 0.5}},
            state="submitted",
        ),
    )
    # The stub says 404 to everything: the POST went out, with strings, and then failed.
    assert [m for m, dummy in _Recorder.requests] == ["GET", "POST"] and res["failed"] is True
    sent = json.loads(_Recorder.bodies[1])
    assert sent["metadata"] == {"n": "3"} and sent["runtime_env"] == {"env_vars": {"N": "1", "LR": "0.5"}}


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_job("a/b"),
        lambda c: c.submit_job("x y", "true"),
        lambda c: c.stop_job("../x"),
        lambda c: c.delete_job("a/logs"),
        lambda c: c.get_logs(""),
    ],
)
def test_client_refuses_ids_before_any_request(stub, call):
    _Recorder.requests.clear()
    with pytest.raises(RayError) as err:
        call(RayClient(stub))
    assert str(err.value).startswith("submission_id must ") and ID_RULE in str(err.value) and _Recorder.requests == []


def test_client_refuses_a_token_that_cannot_be_a_header():
    with pytest.raises(RayError) as err:
        RayClient("http://127.0.0.1:1", token="abc\r\nX-Injected: 1")
    assert "abc" not in str(err.value) and "token" in str(err.value)


def test_ray_would_have_accepted_these(ray_head, module_runner):
    """Against the real head: the id with '/' and the GPU custom resource are refused, and Ray's job
    list does not change (Ray 2.60 creates both jobs: the first can then never be deleted, the second fails)."""
    client = ray_head.client()
    before = {j["submission_id"] for j in client.list_jobs()}
    base = dict(address=ray_head.address, auth_token=ray_head.token, entrypoint="echo never")
    res = module_runner(ray_job.main, dict(base, submission_id="team/%s" % uuid.uuid4().hex[:6]))
    assert res["failed"] is True and res["msg"].startswith("submission_id must be 1-200 letters")
    res = module_runner(
        ray_job.main, dict(base, submission_id="gpu-%s" % uuid.uuid4().hex[:6], entrypoint_resources={"GPU": 1})
    )
    assert res["failed"] is True and res["msg"] == "entrypoint_resources.GPU: " + BUILTIN % "entrypoint_num_gpus"
    assert {j["submission_id"] for j in client.list_jobs()} == before
