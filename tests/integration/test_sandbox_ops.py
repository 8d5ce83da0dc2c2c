"""Day-2 playbooks on the sandbox: logs.yml (per-node logs, secrets masked on the nodes) and teardown.yml
(refuses under a running job, stops it when asked, idempotent), then site.yml builds the cluster again.

One slow `smoke` run (fake HF_TOKEN) serves both tests. Every test shares the suite's sandbox cluster, so
the teardown test leaves it converged again, whatever happens (site.yml in a finally); for that rebuild one worker has
a stand-in dcgm-exporter serving a real exporter's answer, which the head's Prometheus then scrapes and status.yml
reports as that worker's GPU use.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import time

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient
from tests.fake_hyperbolic.testing import venv_bin
from tests.integration.conftest import ROOT, SANDBOX_INVENTORY, sandbox_nodes
from tests.integration.localhost_play import flat
from tests.integration.test_sandbox_metrics import prometheus

TAG = secrets.token_hex(5)
RUN = "ops-" + TAG
SID = "rlinfra-smoke-default-" + RUN
HF_TOKEN = "hf_FAKE_ops_" + secrets.token_hex(12)
CKPT_ROOT = "/data/checkpoints-ops-" + TAG
MARKER = "/data/ops-marker-" + TAG
# Long enough to outlive logs.yml and the refused teardown; teardown_stop_jobs=true ends it.
SLOW = {"trainer": {"total_training_steps": 900, "save_freq": 1000, "step_sleep_s": 1.0}}
RECAP = re.compile(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
LOGS = "/workspace/ray/session_latest/logs"
DCGM = ROOT / "tests" / "unit" / "fixtures" / "gpu" / "dcgm_exporter_metrics_t4_drv460_datadog_EXCERPT.txt"
# A stand-in dcgm-exporter: a real exporter's answer (tests/unit/fixtures/gpu/SOURCES.md) on its port, as Prometheus
# scrapes it. ray_metrics finds the binary on the node and the head's Prometheus scrapes it.
DCGM_STAND_IN = """#!/usr/bin/python3
import http.server
BODY = open("/usr/local/share/rlinfra-test/dcgm-metrics.txt", "rb").read()
class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path != "/metrics":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("0.0.0.0", 9400), Answer).serve_forever()
"""


def playbook(name, *extra, secret=False):
    args = [
        venv_bin("ansible-playbook"),
        "-i",
        str(SANDBOX_INVENTORY),
        name,
        "-e",
        json.dumps({"verl_job_checkpoint_root": CKPT_ROOT}),
    ]
    for item in extra:
        args += [item] if item.startswith("--") else ["-e", item]  # a flag (--check) as it is, else extra vars
    env = {k: v for k, v in os.environ.items() if k != "HF_TOKEN" and not k.startswith("ANSIBLE_")}
    env["ANSIBLE_NOCOLOR"] = "1"
    if secret:
        env["HF_TOKEN"] = HF_TOKEN
    proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    proc.output = proc.stdout + proc.stderr
    proc.recap = {
        h: dict(changed=int(c), unreachable=int(u), failed=int(f)) for h, c, u, f in RECAP.findall(proc.stdout)
    }
    return proc


def on_node(node, script, stdin=""):
    return subprocess.run(
        ["docker", "exec", "-i", node, "sh", "-c", script], input=stdin, capture_output=True, text=True, timeout=300
    ).stdout


def head_of(nodes):
    return next(n for n in nodes if n["role"] == "head")


def ray_up(nodes):
    return all(on_node(n["name"], "systemctl is-active ray-%s.service" % n["role"]).strip() == "active" for n in nodes)


def job_status(head):
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    return (RayClient("http://%s:8265" % head["ip"], token=token, retries=1).get_job(SID) or {}).get("status")


@pytest.fixture(scope="module")
def running_job(sandbox):
    """A slow smoke run, RUNNING on every node, given a fake HF_TOKEN."""
    nodes = sandbox_nodes()
    head = head_of(nodes)
    if not ray_up(nodes):
        site = playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]
    submit = playbook(
        "submit.yml", "exp=smoke", "run=" + RUN, "wait=false", json.dumps({"verl_job_params": SLOW}), secret=True
    )
    assert submit.returncode == 0, submit.output[-4000:]
    assert "Submitted %s" % SID in flat(submit.output)
    driver_log = "%s/job-driver-%s.log" % (LOGS, SID)
    deadline = time.monotonic() + 240
    while "step:3 " not in on_node(head["name"], "cat %s 2>/dev/null" % driver_log) and time.monotonic() < deadline:
        time.sleep(2)
    assert "step:3 " in on_node(head["name"], "cat " + driver_log), "the smoke run made no 3 steps in 240 s"
    yield dict(nodes=nodes, head=head, outputs=[submit.output])
    on_node(head["name"], "rm -rf %s %s" % (CKPT_ROOT, MARKER))
    shutil.rmtree(ROOT / "artifacts" / "smoke" / SID, ignore_errors=True)
    (ROOT / "artifacts" / "smoke" / (SID + ".log")).unlink(missing_ok=True)


def test_logs_bundle_has_every_node_and_no_secret(running_job):
    nodes, head = running_job["nodes"], running_job["head"]
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    assert len(token) >= 32
    # Not blind: put both values where Ray might have written them, on a worker and in the driver log.
    worker = next(n for n in nodes if n["role"] == "worker")
    planted = "planted HF_TOKEN value %s and ray token %s\n" % (HF_TOKEN, token)
    on_node(worker["name"], "cat >> %s/raylet.out" % LOGS, planted)
    on_node(head["name"], "cat >> %s/job-driver-%s.log" % (LOGS, SID), planted)

    t0 = time.monotonic()
    logs = playbook("logs.yml", "exp=smoke", "run=" + RUN, secret=True)
    took = time.monotonic() - t0
    assert logs.returncode == 0, logs.output[-4000:]
    root = ROOT / "artifacts" / "smoke" / SID / "nodes"
    assert "Per-node logs of %s (Ray job " % SID in flat(logs.output) and str(root) in flat(logs.output)

    for n in nodes:
        d = root / n["name"]
        manifest = json.loads((d / "MANIFEST.json").read_text())
        job_id = manifest["job_id"]
        assert job_id and manifest["submission_id"] == SID, manifest
        assert (d / "raylet.out").stat().st_size > 0, n["name"]
        # One rollout actor of the job runs on every node: its worker logs are there.
        assert [p for p in os.listdir(d) if re.match(r"worker-[0-9a-f]+-%s-\d+\.out$" % job_id, p)], os.listdir(d)
    assert (root / head["name"] / ("job-driver-%s.log" % SID)).read_text().count("step:") >= 3
    assert (
        "planted HF_TOKEN value ******** and ray token ********" in (root / worker["name"] / "raylet.out").read_text()
    )

    for path, _dirs, files in os.walk(root.parent):
        assert os.stat(path).st_mode & 0o777 == 0o700, path
        for f in files:
            assert os.stat(os.path.join(path, f)).st_mode & 0o777 == 0o600, os.path.join(path, f)
    grep = subprocess.run(
        ["grep", "-rlF", "-e", HF_TOKEN, "-e", token, str(root.parent)], capture_output=True, text=True
    )
    assert grep.returncode == 1 and not grep.stdout, grep.stdout
    assert HF_TOKEN not in logs.output and token not in logs.output
    # Nothing was left behind on the nodes.
    assert not [n for n in nodes if on_node(n["name"], "ls -d /tmp/rlinfra-logs-* 2>/dev/null").strip()]
    print("logs.yml on %d nodes took %.1f s" % (len(nodes), took))


def test_teardown_refuses_under_a_job_stops_it_when_asked_then_site_rebuilds(running_job):
    nodes, head = running_job["nodes"], running_job["head"]
    old_token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    on_node(head["name"], "echo keep > " + MARKER)
    outputs = []
    try:
        typo = playbook("teardown.yml", "teardown_stop_jobs=ture")
        outputs.append(typo.output)
        assert typo.returncode != 0
        # (the YAML callback doubles the quotes around 'ture')
        assert re.search(
            r"Bad command line for teardown.yml, nothing was done: teardown_stop_jobs must be true or "
            r"false \(also yes/no/1/0, any case\), got '+ture'+",
            flat(typo.output),
        ), typo.output[-2000:]
        assert set(typo.recap) == {"localhost"}

        refused = playbook("teardown.yml")
        outputs.append(refused.output)
        assert refused.returncode != 0
        assert (
            "refusing to tear down Ray: 1 job(s) still running: %s (RUNNING, cluster default); stop them first" % SID
        ) in flat(refused.output)
        assert "-e teardown_stop_jobs=true" in flat(refused.output)
        assert all(r["changed"] == 0 for r in refused.recap.values()), refused.recap
        assert ray_up(nodes) and job_status(head) == "RUNNING"

        stop = playbook("teardown.yml", "teardown_stop_jobs=true")
        outputs.append(stop.output)
        assert stop.returncode == 0, stop.output[-4000:]
        assert "%s: stopped, now STOPPED" % SID in flat(stop.output)
        for n in nodes:
            state = on_node(
                n["name"],
                "systemctl is-active ray-head.service ray-worker.service; "
                "ls /etc/systemd/system/ray-*.service /etc/ray /etc/ansible/facts.d/rlinfra_ray.fact "
                "2>/dev/null; pgrep -x raylet >/dev/null && echo RAYLET",
            )
            assert state.split() == ["inactive", "inactive"], (n["name"], state)
            assert on_node(
                n["name"], "cat %s; test -d /workspace/ray && test -x /opt/rlinfra/venv/bin/ray && echo kept" % MARKER
            ).split() == ["keep", "kept"], n["name"]
            # The metrics went with Ray (units, configs, password).
            metrics = on_node(
                n["name"],
                "systemctl is-active rlinfra-node-exporter.service rlinfra-prometheus.service; "
                "ls /etc/systemd/system/rlinfra-*.service 2>/dev/null; "
                "pgrep -f '[/]usr/bin/prometheus' >/dev/null && echo RUNNING",
            )
            assert metrics.split() == ["inactive", "inactive"], (n["name"], metrics)
        # Prometheus's data stays with a plain teardown: only a purge removes it.
        assert on_node(head["name"], "test -d /workspace/prometheus && echo kept").strip() == "kept"

        again = playbook("teardown.yml")
        outputs.append(again.output)
        assert again.returncode == 0, again.output[-4000:]
        assert set(again.recap) == {"localhost"} | {n["name"] for n in nodes}
        assert all(r["changed"] == 0 for r in again.recap.values()), again.recap

        # A purge removes only what is provably the collection's own (module_utils/common/owned.py), checked on every node
        # before anything goes: a temp dir set on the shared volume is refused in one line, and nothing is removed.
        unsafe = playbook("teardown.yml", "teardown_purge=true", json.dumps({"ray_temp_dir": "/data/ray-tmp"}))
        outputs.append(unsafe.output)
        assert unsafe.returncode != 0
        assert (
            "refusing to remove the Ray temp dir /data/ray-tmp: it lies inside the kept directory /data, which a "
            "teardown never removes"
        ) in flat(unsafe.output), unsafe.output[-3000:]
        assert all(r["changed"] == 0 for r in unsafe.recap.values()), unsafe.recap
        purge = playbook("teardown.yml", "teardown_purge=true")
        outputs.append(purge.output)
        assert purge.returncode == 0, purge.output[-4000:]
        for n in nodes:
            assert on_node(
                n["name"], "ls -d /opt/rlinfra/venv /workspace/ray /workspace/prometheus 2>/dev/null; cat " + MARKER
            ).split() == ["keep"], n["name"]

        # The nodes now hold nothing of the collection's, as just rented: --check --diff says what each would get and
        # changes nothing (it died in a template error at the environment-fingerprint check before).
        check = playbook("site.yml", "--check", "--diff")
        outputs.append(check.output)
        assert check.returncode == 0, check.output[-4000:]
        for n in nodes:
            assert re.search(
                r"%s would get: a new Python environment with the pinned package set; \d+ file\(s\) written"
                % n["name"],
                flat(check.output),
            ), check.output[-3000:]
            assert (
                on_node(
                    n["name"],
                    "ls -d /opt/rlinfra/venv /etc/ray /etc/systemd/system/ray-*.service "
                    "/etc/ansible/facts.d/rlinfra_ray.fact 2>/dev/null",
                ).split()
                == []
            ), n["name"]
        assert (
            "Cluster 'default' (check mode): would start Ray where it is not running and wait for its %d nodes"
            % len(nodes)
            in flat(check.output).replace("''", "'")
        )
        for sign in ("NoneType", "Error rendering template", "Traceback"):
            assert sign not in check.output
        # --diff shows each file ray_node would write, node by node; the token's and the secrets' only as changing.
        assert check.output.count("+++ after: /etc/systemd/system/ray-head.service") == 1, check.output[-3000:]
        assert check.output.count("+++ after: /etc/systemd/system/ray-worker.service") == len(nodes) - 1
        assert re.search(r"^\+ExecStart=.*ray start", check.output, re.M), check.output[-3000:]
        assert check.output.count("+(a secret file: its new content is not shown)") >= len(nodes)
    finally:
        worker = next(n for n in nodes if n["role"] != "head")
        on_node(
            worker["name"],
            "mkdir -p /usr/local/share/rlinfra-test && cat > /usr/local/share/rlinfra-test/dcgm-metrics.txt",
            DCGM.read_text(),
        )
        on_node(
            worker["name"],
            "cat > /usr/local/bin/dcgm-exporter && chmod 755 /usr/local/bin/dcgm-exporter "
            "&& (nohup /usr/local/bin/dcgm-exporter </dev/null >/dev/null 2>&1 &)",
            DCGM_STAND_IN,
        )
        site = playbook("site.yml")
        outputs.append(site.output)
    assert site.returncode == 0, site.output[-4000:]
    assert re.search(r"Cluster '+default'+: %d nodes alive" % len(nodes), flat(site.output)), site.output[-3000:]
    assert ray_up(nodes)
    # Metrics are on by default: every exporter and the head's Prometheus run again.
    for n in nodes:
        units = "rlinfra-node-exporter.service" + (" rlinfra-prometheus.service" if n["role"] == "head" else "")
        assert set(on_node(n["name"], "systemctl is-active " + units).split()) == {"active"}, n["name"]
    # The DCGM exporter where one is installed: the worker's stand-in is scraped, its GPU series is the worker's, and
    # status.yml's line for the worker gives its GPU use (the exporter's 0%).
    try:
        password = on_node(head["name"], "cat /etc/ray/metrics/password").strip()
        deadline = time.monotonic() + 90
        while True:
            status, body = prometheus(head["ip"], password, "/api/v1/query", query="DCGM_FI_DEV_GPU_UTIL")
            series = [r["metric"] for r in ((body or {}).get("data") or {}).get("result") or []]
            if series:
                break
            assert time.monotonic() < deadline, (status, body)
            time.sleep(3)
        assert [(m["instance"], m["modelName"]) for m in series] == [("%s:9400" % worker["ip"], "Tesla T4")], series
        status = playbook("status.yml", "exp=smoke")
        # (CPU is a rate over two scrapes: right after the rebuild it may still be "unknown"; the GPU is a gauge.)
        lines = dict(
            re.findall(r"^\s*- '?(%s): (.*?)'?$" % "|".join(re.escape(n["name"]) for n in nodes), status.output, re.M)
        )
        assert sorted(lines) == sorted(n["name"] for n in nodes), status.output[-3000:]
        assert lines[worker["name"]].endswith(", GPU 0%"), lines
        assert all("GPU" not in text for name, text in lines.items() if name != worker["name"]), lines
    finally:
        # Apart: a pkill -f in the same shell as the rm would match (and end) that shell first.
        on_node(worker["name"], "pkill -f '[/]usr/local/bin/dcgm-exporter'")
        on_node(worker["name"], "rm -rf /usr/local/bin/dcgm-exporter /usr/local/share/rlinfra-test")
        assert not on_node(worker["name"], "pgrep -f '[/]usr/local/bin/dcgm-exporter'").strip()
    new_token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    assert len(new_token) >= 32 and new_token != old_token
    for out in outputs + running_job["outputs"]:
        assert HF_TOKEN not in out and old_token not in out and new_token not in out
