"""The idle guard's decision and one run of it against the fake Hyperbolic API and a real HTTP stand-in for the
head's dashboard (Ray's /api/jobs/ shape): busy -> nothing; idle past the limit -> Ray stopped, exactly the
label's instances released; jobs unreadable -> nothing released, said in one line. The program the role ray_head
copies to the head (filter node_program) runs without Ansible (checked in a python3 without it); the module removes
only the guard's own directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.node_program import node_program
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import idle_guard
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent
from tests.fake_hyperbolic.server import FakeHyperbolic, machine_item, marketplace_instance, rental_option
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY

NOW = 1_800_000_000.0


def job(sid, status, start=None, end=None):
    return {"submission_id": sid, "status": status, "start_time": start, "end_time": end}


def test_decide():
    assert idle_guard.decide([job("a", "RUNNING", start=1)], NOW, 10_000, 60) == (
        False,
        "busy: job(s) a running or pending; nothing to do",
    )
    ended = [job("a", "SUCCEEDED", end=(NOW - 30) * 1000), job("b", "FAILED", end=(NOW - 500) * 1000)]
    release, line = idle_guard.decide(ended, NOW, 10_000, 60)
    assert (
        not release and line == "idle for 30s (the last job, a, ended 30s ago), below the limit of 60s; nothing to do"
    )
    release, line = idle_guard.decide(ended, NOW + 100, 10_000, 60)
    assert release and line.startswith("idle for 130s (the last job, a, ended 130s ago), at or over the limit of 60s")
    # Ray restarted after the last job: idle counts from Ray's start.
    assert idle_guard.decide(ended, NOW + 100, 20, 60)[0] is False
    assert idle_guard.decide([], NOW, 7200, 3600) == (
        True,
        "idle for 7200s (no job has run since Ray started 7200s ago), at or over "
        "the limit of 3600s (idle_release_after): stopping Ray and releasing the cluster's instances",
    )
    assert idle_guard.decide([], NOW, None, 60)[0] is False
    assert idle_guard.since_ray_started("ActiveEnterTimestampMonotonic=5000000\n", "125.50 100.0\n") == 120.5
    assert idle_guard.since_ray_started("ActiveEnterTimestampMonotonic=0", "1 1") is None


class Dashboard:
    def __init__(self, jobs):
        self.jobs, self.auth = jobs, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                outer.auth.append(self.headers.get("Authorization"))
                body = json.dumps(outer.jobs).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]


@pytest.fixture
def cluster(tmp_path):
    with FakeHyperbolic(api_key=HYPERBOLIC_TEST_KEY) as fake:
        # Documentation addresses: listed, never connected to (the guard only releases); never loopback, which a
        # rental's SSH host may not be.
        fake.set_machines([machine_item("gpu-a", gpus_total=16)], host_pool=[("203.0.113.71", 22, "root")] * 3)
        other = marketplace_instance("keep-me", "203.0.113.72", status="online")
        other["userMetadata"] = {"rlinfra": {"label": "other", "name": "other-0"}}
        fake.set_instances(marketplace=[other])
        client = HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url, retries=0)
        Rent(client, probe=lambda h, p: "").present("exp-a", 2, gpu_model="H100", wait=False)
        token = tmp_path / "token"
        token.write_text("tok-123\n")
        yield fake, token


def run_once(fake, token, jobs, limit=60, url=None, record=None):
    dash = Dashboard(jobs)
    calls, lines = [], []

    def systemctl(args):
        calls.append(args)
        if args[0] == "show":
            return subprocess.CompletedProcess(args, 0, "ActiveEnterTimestampMonotonic=1000000\n", "")
        return subprocess.CompletedProcess(args, 0, "", "")

    config = dict(
        label="exp-a",
        idle_release_after=limit,
        api_key=HYPERBOLIC_TEST_KEY,
        api_url=fake.url,
        dashboard_url=url or dash.url,
        token_path=str(token),
        release_timeout=5,
        record=str(record or token.parent / "no-record.json"),
    )
    rc = idle_guard.run(config, out=lines.append, systemctl=systemctl, now=lambda: NOW)
    dash.server.shutdown()
    return rc, lines, calls, dash


def test_a_busy_cluster_is_kept_an_idle_one_released(cluster):
    fake, token = cluster
    rc, lines, calls, dash = run_once(fake, token, [job("r1", "RUNNING", start=(NOW - 9000) * 1000)])
    assert rc == 0 and lines == ["idle guard (exp-a): busy: job(s) r1 running or pending; nothing to do"]
    assert ("stop", "ray-head.service") not in calls and len(fake.rented) == 2 and dash.auth == ["Bearer tok-123"]

    rc, lines, calls, dash = run_once(fake, token, [job("r1", "SUCCEEDED", end=(NOW - 90) * 1000)])
    assert rc == 0 and lines[0].startswith(
        "idle guard (exp-a): idle for 90s (the last job, r1, ended 90s ago), at or over"
    )
    assert lines[1] == "idle guard (exp-a): Ray stopped" and ("stop", "ray-head.service") in calls
    assert lines[2] == "idle guard (exp-a): released fake-instance-0001, fake-instance-0002"
    assert fake.rented == [] and [i["id"] for i in fake.marketplace] == ["keep-me"]
    assert all(HYPERBOLIC_TEST_KEY not in line for line in lines)


def test_on_demand_rentals_are_released_by_name_and_by_the_heads_record(cluster):
    """The current API (docs/INVENTORY.md): one rental keeps its label exp-a-0; another, whose label the API did not
    keep, is the cluster's only by the record provision.yml copied to the head. Both go; another label's stays."""
    fake, token = cluster
    fake.set_options(
        [rental_option("h100", 8, "us-east-1", cents=2552)], host_pool=[("203.0.113.73", 22, "ubuntu")] * 3
    )
    client = HyperbolicClient(HYPERBOLIC_TEST_KEY, fake.url, retries=0)
    Rent(client, probe=lambda h, p: "", api="on_demand").present(
        "exp-a", 2, gpu_model="H100", region="us-east-1", wait=False
    )
    Rent(client, probe=lambda h, p: "", api="on_demand").present(
        "other", 1, gpu_model="H100", region="us-east-1", wait=False
    )
    unnamed = fake.od_rentals[1]["record"]
    unnamed["label"] = "soft-apricot-%d" % unnamed["id"]
    record = token.parent / "hyperbolic-exp-a.json"
    record.write_text(
        json.dumps({"label": "exp-a", "rentals": {str(unnamed["id"]): {"api": "on_demand", "name": "exp-a-1"}}})
    )
    rc, lines, calls, dash = run_once(fake, token, [job("r1", "SUCCEEDED", end=(NOW - 90) * 1000)], record=record)
    ids = [str(r["record"]["id"]) for r in fake.od_rentals]
    # by name, the record's unnamed one first
    assert rc == 0 and lines[2] == "idle guard (exp-a): released %s, %s, fake-instance-0001, fake-instance-0002" % (
        ids[1],
        ids[0],
    ), lines
    assert [r["label"] for r in fake.active_rentals()] == ["other-0"]

    record.write_text("{half")
    rc, lines, calls, dash = run_once(fake, token, [job("r1", "SUCCEEDED", end=(NOW - 90) * 1000)], record=record)
    assert lines[2].startswith("idle guard (exp-a): the record %s cannot be read" % record), lines
    assert lines[2].endswith("; releasing by name only") and [r["label"] for r in fake.active_rentals()] == ["other-0"]


def test_unreadable_jobs_release_nothing(cluster):
    fake, token = cluster
    rc, lines, calls, dash = run_once(fake, token, [], url="http://127.0.0.1:9")
    assert rc == 1 and lines[0].startswith("idle guard (exp-a): cannot read Ray's jobs at http://127.0.0.1:9")
    assert lines[0].endswith("not releasing anything") and calls == [] and len(fake.rented) == 2


def test_the_program_copied_to_the_head_runs_without_ansible(tmp_path):
    """One file, as the head's rlinfra-idle-guard.service runs it: a check that cannot read Ray's jobs says so in one
    line and releases nothing, in a python3 where Ansible cannot be imported."""
    program = tmp_path / "idle-guard.py"
    program.write_text(node_program("hyperbolic.idle_guard"))
    config = tmp_path / "idle-guard.json"
    config.write_text(
        json.dumps(
            dict(
                label="exp-a",
                idle_release_after=60,
                api_key=HYPERBOLIC_TEST_KEY,
                api_url="http://127.0.0.1:9",
                dashboard_url="http://127.0.0.1:9",
                token_path=str(tmp_path / "no-token"),
            )
        )
    )
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    probe = "import sys; sys.modules['ansible'] = None; sys.argv = ['idle-guard.py', %r]; " % str(config)
    probe += "exec(compile(open(%r).read(), 'idle-guard.py', 'exec'))" % str(program)
    proc = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stdout.startswith("idle guard (exp-a): cannot read Ray's jobs at http://127.0.0.1:9"), proc.stdout
    assert proc.stdout.rstrip().endswith("not releasing anything") and HYPERBOLIC_TEST_KEY not in proc.stdout


# Removing the guard removes only its own code directory --------------------------------------------------------


@pytest.mark.parametrize(
    "setup,why",
    [
        (
            lambda root: (root / "notes.txt").write_text("mine"),
            "it holds files but not idle-guard.py or ansible_collections, so it was not made by rlinfra",
        ),
        (lambda root: os.symlink(root.parent / "elsewhere", root), "it is a symbolic link (to {t}/elsewhere)"),
    ],
)
def test_removing_the_guard_refuses_a_root_that_is_not_its_own(tmp_path, module_runner, setup, why):
    from ansible_collections.rlinfra.verl.plugins.modules import idle_guard as module

    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data.bin").write_text("keep")
    root = tmp_path / "guard"
    if "link" not in why:
        root.mkdir()
    setup(root)
    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "rlinfra-idle-guard.service").write_text("[Unit]\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    out = module_runner(
        module.main,
        {
            "state": "absent",
            "root": str(root),
            "unit_dir": str(tmp_path / "units"),
            "config_path": str(tmp_path / "etc" / "idle-guard.json"),
        },
    )
    assert (
        out["failed"]
        and not out.get("changed")
        and out["msg"] == ("refusing to remove the idle guard's code directory %s: %s" % (root, why.format(t=tmp_path)))
    )
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "elsewhere" / "data.bin").read_text() == "keep"


def test_removing_the_guard_takes_its_program_units_and_config(tmp_path, module_runner, monkeypatch):
    """What the role ray_head installs (the program in root, the root-only config, the units) and the package tree an
    earlier version copied: all gone, the config's directory too once empty; again, nothing to do."""
    from ansible_collections.rlinfra.verl.plugins.modules import idle_guard as module

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text('#!/bin/sh\necho "$@" >> %s\n' % (tmp_path / "systemctl.log"))
    (bin_dir / "systemctl").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ.get("PATH", "")))
    root, units, etc = tmp_path / "guard", tmp_path / "units", tmp_path / "etc"
    for d in (root / "ansible_collections" / "rlinfra", units, etc):
        d.mkdir(parents=True)
    (root / "idle-guard.py").write_text("print('guard')\n")
    (etc / "idle-guard.json").write_text("{}\n")
    for name in ("rlinfra-idle-guard.service", "rlinfra-idle-guard.timer"):
        (units / name).write_text("[Unit]\n")
    args = {"root": str(root), "unit_dir": str(units), "config_path": str(etc / "idle-guard.json")}
    dry = module_runner(module.main, args, check_mode=True)
    assert dry["changed"] and len(dry["files"]) == 4 and (root / "idle-guard.py").exists()
    out = module_runner(module.main, args)
    assert out["changed"] and sorted(os.listdir(tmp_path)) == ["bin", "systemctl.log", "units"]
    assert os.listdir(units) == []
    assert "disable --now rlinfra-idle-guard.timer" in (tmp_path / "systemctl.log").read_text()
    assert module_runner(module.main, args)["changed"] is False
