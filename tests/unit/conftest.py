"""Shared unit-test fixtures: one real Ray head on loopback with token auth, and a module runner.

``ray_head`` starts ``ray start --head`` once per test session. Ray's own ``ray stop`` kills every
Ray process on the machine (other clusters included), so teardown kills only the processes of the
session this fixture started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from ansible.module_utils import _internal as ansible_internal
from ansible.module_utils.common import warnings as ansible_warnings
from ansible.module_utils.testing import patch_module_args

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient, RayError
from tests.fake_hyperbolic.testing import own_address

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT = 360


@dataclasses.dataclass(frozen=True)
class RayHead:
    address: str  # dashboard URL, e.g. http://127.0.0.1:8265
    gcs_address: str  # for `ray start --address` / `ray.init`
    temp_dir: str
    token_path: str
    node_ip: str  # what Ray registered: it rewrites 127.0.0.1 to a routable address
    token: str = dataclasses.field(repr=False)  # keep the secret out of pytest's failure output

    def env(self, base=None):
        """Environment for ray CLIs and drivers talking to this head (token through the file)."""
        env = dict(os.environ if base is None else base)
        env.pop("RAY_AUTH_TOKEN", None)
        env.pop("RAY_ADDRESS", None)
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=self.token_path, RAY_USAGE_STATS_ENABLED="0")
        return env

    def client(self, **kwargs):
        return RayClient(self.address, token=self.token, **kwargs)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_table():
    """pid -> (ppid, session id) for every process, from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):  # zombies are dead already, only waiting to be reaped
            table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def session_processes(sid):
    """Processes of session ``sid`` plus their descendants (Ray starts job drivers in new sessions)."""
    table = _proc_table()
    pids = {pid for pid, (_, s) in table.items() if s == sid}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _) in table.items() if ppid in pids} - pids
        pids |= children
        grew = bool(children)
    pids.discard(os.getpid())
    return pids


def kill_session(sid, grace=8.0):
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        pids = session_processes(sid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while session_processes(sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session_processes(sid):
            return


def start_ray_head(attempts=3):
    """Start a head; returns (RayHead, session id to kill, base dir to remove).

    A head that never gets an alive node is torn down and started again from scratch: on a
    loaded machine the raylet can abort while waiting (a fixed 15 s in Ray 2.60) for the
    dashboard agent's port files ("Timed out waiting for file ... WaitForDashboardAgentPorts").
    """
    for attempt in range(attempts):
        try:
            return _start_ray_head_once()
        except RuntimeError:
            if attempt + 1 == attempts:
                raise
            time.sleep(5)


def _start_ray_head_once():
    base = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's unix socket paths live below it
    token = secrets.token_hex(32)
    token_path = os.path.join(base, "token")
    fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    gcs_port, dash_port = free_port(), free_port()
    head = RayHead(
        address="http://127.0.0.1:%d" % dash_port,
        gcs_address="127.0.0.1:%d" % gcs_port,
        temp_dir=os.path.join(base, "r"),
        token_path=token_path,
        node_ip="",
        token=token,
    )
    cmd = [
        RAY,
        "start",
        "--head",
        "--node-ip-address=127.0.0.1",
        "--port=%d" % gcs_port,
        "--dashboard-host=127.0.0.1",
        "--dashboard-port=%d" % dash_port,
        "--num-cpus=2",
        "--temp-dir=" + head.temp_dir,
        "--disable-usage-stats",
        # Ray's fixed defaults (10001, 52365) would collide with other heads on this machine.
        "--ray-client-server-port=%d" % free_port(),
        "--dashboard-agent-listen-port=%d" % free_port(),
    ]
    log = open(os.path.join(base, "ray-start.log"), "wb")
    # More time than Ray's defaults for agents and workers (job supervisors) to register: a loaded
    # 2-core machine needs it.
    env = dict(head.env(), RAY_agent_register_timeout_ms="300000", RAY_worker_register_timeout_seconds="300")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    sid = proc.pid
    try:
        # `ray start` gives the raylet a fixed 30 s (ray/_private/node.py) and then exits non-zero,
        # but leaves the head's processes running; the head counts as started once it answers.
        proc.wait(timeout=START_TIMEOUT)
        output = "ray start exited %s:\n%s" % (proc.returncode, Path(log.name).read_text()[-3000:])
        node_ip = _wait_ready(head, sid, output)
    except BaseException:
        kill_session(sid)
        shutil.rmtree(base, ignore_errors=True)
        raise
    finally:
        log.close()
    return dataclasses.replace(head, node_ip=node_ip), sid, base


def _raylet_alive(sid):
    for pid in session_processes(sid):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                if f.read().split(b"\0")[0].endswith(b"/raylet"):
                    return True
        except OSError:
            pass
    return False


def _wait_ready(head, sid, start_output):
    client = head.client(retries=0, timeout=10)
    deadline = time.monotonic() + START_TIMEOUT
    last = None
    while time.monotonic() < deadline:
        try:
            client.list_jobs()
            alive = [n for n in client.list_nodes() if n["state"] == "ALIVE"]
            if alive:
                return alive[0]["node_ip"]
        except RayError as e:
            last = e
        if not _raylet_alive(sid):
            break  # the raylet died (or never started): this head will never have a node
        time.sleep(0.5)
    raylet_err = Path(head.temp_dir, "session_latest", "logs", "raylet.err")
    crash = raylet_err.read_text(errors="replace")[:1500] if raylet_err.exists() else ""
    raise RuntimeError(
        "Ray head at %s never got an alive node (last error: %s)\nraylet.err: %s\n%s"
        % (head.address, last, crash or "(empty)", start_output)
    )


@pytest.fixture(scope="session")
def ray_head():
    """A real Ray head on 127.0.0.1 with token auth, shared by the whole test session.

    Gives ``.address`` (dashboard URL), ``.token``, ``.token_path``, ``.gcs_address``,
    ``.node_ip``, ``.env()`` and ``.client()``.
    """
    head, sid, base = start_ray_head()
    try:
        yield head
    finally:
        kill_session(sid)
        shutil.rmtree(base, ignore_errors=True)


def run_module(main, args, check_mode=False):
    """Run a module's ``main()`` in-process as Ansible would and return its JSON result.

    The result is what the module prints, so no_log masking is applied as in real runs.
    """
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    for name in ("_global_warnings", "_global_deprecations"):
        getattr(ansible_warnings, name, {}).clear()  # they are process-wide; keep runs independent
    out = io.StringIO()
    # Once any test imports controller code in this process, module warnings would go to the
    # controller's display instead of the result; a real module never runs as the controller.
    with patch_module_args(args), contextlib.redirect_stdout(out), mock.patch.object(
        ansible_internal, "is_controller", False
    ):
        try:
            main()
        except SystemExit:
            pass
    text = out.getvalue().strip()
    assert text, "module printed nothing"
    return json.loads(text.splitlines()[-1])


@pytest.fixture
def module_runner():
    return run_module


@pytest.fixture(autouse=True)
def _no_ambient_ray_env(monkeypatch):
    # A developer's own RAY_AUTH_TOKEN must not leak into tests that check missing/wrong tokens.
    for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def sshd():
    """A listener on this machine's own address that greets like sshd: the SSH probe's real counterpart (a rental's
    SSH host is never loopback)."""
    if own_address() is None:
        pytest.skip("this machine has no address but loopback, which a rental's SSH host may never be")
    server = socket.socket()
    server.bind((own_address(), 0))
    server.listen(16)
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, dummy = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2 fake\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    server.close()
