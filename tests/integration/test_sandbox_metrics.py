"""Metrics on the cluster (issue: observability), on the shared sandbox as site.yml leaves it (ray_metrics is on by
default): Prometheus on the head with every node's node_exporter and Ray's own metrics as targets, all ``up`` (read
through its HTTP API, as the report and status.yml read it); a Ray metric with a series per node; nothing answers
without the password, which is in no process's arguments on any node; Ray's dashboard finds Prometheus; status.yml
prints one utilisation line per node; a smoke run's report holds every node's CPU and memory over the run.

The role ray_metrics is templates and handlers: ``site.yml --check --diff`` with one metrics variable and one Ray
variable changed shows exactly the files they change, each with its changed lines, no secret, and changes nothing;
a full converge of an unchanged cluster changes nothing and restarts nothing. ``ray_metrics: false`` removing every
exporter and Prometheus, and a second such run changing nothing, is molecule/cluster's side_effect.yml (in the side
lane). Strangers reaching neither Prometheus nor an exporter is test_sandbox_firewall's (their ports are in its table).
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request

from tests.integration.conftest import ROOT, report_of, sandbox_nodes, sandbox_playbook
from tests.integration.localhost_play import changed_tasks
from tests.integration.test_sandbox_container import SHOTS, on_node
from tests.integration.test_sandbox_dashboard import browser  # noqa: F401 pylint: disable=unused-import
from tests.integration.test_sandbox_firewall import recap

TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-metrics-" + TAG
PORT = 9090
RECORD = "/etc/ray/rlinfra-converged.json"


def prometheus(head_ip, password, path, **params):
    """``(status, body)`` of Prometheus's HTTP API on the head, from the controller (a member of its firewall list)."""
    url = "http://%s:%d%s%s" % (head_ip, PORT, path, "?" + urllib.parse.urlencode(params) if params else "")
    request = urllib.request.Request(url)
    if password is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(("rlinfra:" + password).encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, None


def wait_for_targets(head_ip, password, nodes, seconds=90):
    deadline = time.monotonic() + seconds
    while True:
        status, body = prometheus(head_ip, password, "/api/v1/targets")
        assert status == 200, status
        targets = body["data"]["activeTargets"]
        healthy = [t for t in targets if t["health"] == "up"]
        jobs = {}
        for t in healthy:
            jobs.setdefault(t["labels"]["job"], set()).add(t["scrapeUrl"].split("//")[1].split(":")[0])
        if jobs.get("node") == {n["ip"] for n in nodes} and {n["ip"] for n in nodes} <= jobs.get("ray", set()):
            return targets
        assert time.monotonic() < deadline, [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
        time.sleep(3)


def test_prometheus_scrapes_every_node_and_the_report_shows_them(sandbox, browser):  # noqa: F811 pylint: disable=redefined-outer-name
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    site = sandbox_playbook("site.yml")
    assert site.returncode == 0, site.output[-4000:]
    password = on_node(head["name"], "cat /etc/ray/metrics/password").strip()
    assert len(password) >= 16
    flat = " ".join(site.output.split())
    assert "Prometheus: ssh -N -L 9090:%s:9090" % head["ip"] in flat, site.output[-3000:]
    assert password not in site.output

    # Ray's generated Grafana dashboards, copied to the controller for import (when the head was last converged).
    dashboards = sorted((ROOT / "artifacts" / "grafana" / "default").glob("*.json"))
    assert "default_grafana_dashboard.json" in [d.name for d in dashboards], dashboards
    assert json.loads((ROOT / "artifacts" / "grafana" / "default" / "default_grafana_dashboard.json").read_text())[
        "panels"
    ]

    # Nothing without the password; every node's exporter and Ray's own endpoints up.
    assert prometheus(head["ip"], None, "/api/v1/targets")[0] == 401
    assert prometheus(head["ip"], "wrong-" + password, "/api/v1/targets")[0] == 401
    wait_for_targets(head["ip"], password, nodes)
    for n in nodes:  # each exporter asks for the password too
        probe = on_node(head["name"], "curl -s -o /dev/null -w '%%{http_code}' http://%s:9100/metrics" % n["ip"])
        assert probe == "401", (n["name"], probe)
    # A Ray metric with a series per node.
    status, body = prometheus(head["ip"], password, "/api/v1/query", query="ray_node_cpu_utilization")
    assert status == 200 and body["status"] == "success", body
    ips = {r["metric"].get("ip") or r["metric"]["instance"].split(":")[0] for r in body["data"]["result"]}
    assert ips == {n["ip"] for n in nodes}, body["data"]["result"]
    # Ray's dashboard knows Prometheus (RAY_PROMETHEUS_HOST, and its login through RAY_PROMETHEUS_HEADERS).
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    health = urllib.request.Request(
        "http://%s:8265/api/prometheus_health" % head["ip"], headers={"Authorization": "Bearer " + token}
    )
    with urllib.request.urlopen(health, timeout=10) as answer:
        assert json.loads(answer.read().decode())["result"] is True
    assert "RAY_PROMETHEUS_HEADERS" not in on_node(head["name"], "cat /etc/ray/ray.env")
    assert on_node(head["name"], "stat -c %a /etc/ray/ray-secrets.env /etc/ray/metrics/password").split() == [
        "600",
        "600",
    ]
    for n in nodes:  # the password in no process's arguments
        argv = on_node(n["name"], "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '")
        assert argv and password not in argv, n["name"]

    # A smoke run long enough for a few scrapes: its report holds every node's CPU and memory over the run.
    exp = "smoke"
    # 15 s: Prometheus's query_range step is 15 s, so two points; each reads the samples of the minute before it.
    params = {"trainer": {"total_training_steps": 15, "save_freq": 10, "step_sleep_s": 1.0}}
    try:
        run = "metrics-" + TAG
        submit = sandbox_playbook(
            "submit.yml",
            "exp=" + exp,
            "run=" + run,
            json.dumps({"verl_job_checkpoint_root": CKPT_ROOT, "verl_job_params": params}),
        )
        assert submit.returncode == 0 and "SUCCEEDED" in submit.output, submit.output[-4000:]
        found = re.search(r"report:\s+(\S+/report\.html)", submit.output)
        assert found, submit.output[-3000:]
        data, path = report_of(exp, run)
        assert (ROOT / found.group(1)).resolve() == path.resolve(), (path, found.group(1))
        util = {u["kind"]: u for u in data["util"]}
        names = sorted(n["name"] for n in nodes)
        for kind in ("cpu", "memory"):
            assert util[kind]["nodes"] == names, util.get(kind)
            for series in util[kind]["series"]:
                values = [v for v in series[1] if v is not None]
                assert values and all(0 <= v <= 100 for v in values), series

        # Opened offline in Chromium: every chart drawn (each metric's, each utilisation kind's); a screenshot kept.
        from selenium.webdriver.common.by import By

        browser.set_window_size(1400, 2400)
        browser.get(path.resolve().as_uri())
        time.sleep(1)
        assert len(browser.find_elements(By.CSS_SELECTOR, "canvas")) >= len(data["metrics"]) + len(data["util"])
        SHOTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(SHOTS / "report-metrics.png"))

        status = sandbox_playbook("status.yml", "exp=" + exp)
        assert status.returncode == 0, status.output[-3000:]
        for n in nodes:
            assert re.search(r"%s: CPU \d+%%, memory \d+%%" % re.escape(n["name"]), status.output), status.output[
                -3000:
            ]
    finally:
        on_node(head["name"], "rm -rf " + CKPT_ROOT)
        shutil.rmtree(ROOT / "artifacts" / exp / ("rlinfra-%s-default-%s" % (exp, run)), ignore_errors=True)


# ---- templates and handlers: --check --diff, a full converge of an unchanged cluster ---------------------------------


def units_of(node):
    return ["ray-%s.service" % node["role"], "rlinfra-node-exporter.service"] + (
        ["rlinfra-prometheus.service"] if node["role"] == "head" else []
    )


def snapshot(nodes):
    """Every node's files of the collection (checksums of /etc/ray, the units, the local facts) and each service's
    process and start."""
    out = {}
    for n in nodes:
        # The converge record is the run's cache (rewritten by a real run, never by --check): left out.
        files = on_node(
            n["name"],
            "find /etc/ray /etc/ansible/facts.d /etc/systemd/system -maxdepth 2 \\( -type f -o -type l \\) "
            "! -path %s | sort | xargs -r sha256sum" % RECORD,
        )
        services = on_node(
            n["name"],
            "systemctl show -p Id -p MainPID -p ActiveEnterTimestampMonotonic %s" % " ".join(units_of(n)),
        )
        out[n["name"]] = (files, services)
    return out


def diffs(output):
    """``[(path, [changed lines])]`` of every file diff in a playbook's output, in order (the path as its ``before``
    header names it)."""
    found, current = [], None
    for line in output.splitlines():
        if line.startswith("--- before"):
            current = (line.split(":", 1)[1].strip() if ":" in line else "", [])
            found.append(current)
        elif current is not None and line.startswith(("+++ ", "@@ ")):
            continue
        elif current is not None and line[:1] in ("+", "-"):
            current[1].append(line)
        elif current is not None and not line.startswith(" "):
            current = None
    return found


def test_check_diff_shows_exactly_the_changed_files_and_changes_nothing(sandbox):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    site = sandbox_playbook("site.yml")
    assert site.returncode == 0, site.output[-4000:]
    unit = on_node(head["name"], "cat /etc/systemd/system/ray-head.service")
    nofile = re.search(r"^LimitNOFILE=(\d+)$", unit, re.M).group(1)
    retention = re.search(
        r"--storage.tsdb.retention.time=(\S+)",
        on_node(head["name"], "cat /etc/systemd/system/rlinfra-prometheus.service"),
    ).group(1)
    new_nofile, new_retention = str(int(nofile) // 2), "31d" if retention != "31d" else "32d"
    before = snapshot(nodes)

    started = time.monotonic()
    check = sandbox_playbook(
        "site.yml", "--check", "--diff", "ray_metrics_retention=" + new_retention, "ray_limit_nofile=" + new_nofile
    )
    took = time.monotonic() - started
    assert check.returncode == 0, check.output[-4000:]
    print("\n[timing] site.yml --check --diff with two variables changed: %.1f s" % took)

    # Exactly the files the two variables change: each node's Ray unit with its limit, the head's Prometheus unit with
    # its retention, and the record of what each node's Ray was started with (root-only: that it changes, not how).
    found = diffs(check.output)
    hidden = ["-(a secret file: its content is not shown)", "+(a secret file: its new content is not shown)"]
    want = sorted(
        [
            ("/etc/systemd/system/ray-%s.service" % n["role"], ["-LimitNOFILE=" + nofile, "+LimitNOFILE=" + new_nofile])
            for n in nodes
        ]
        + [("/etc/ray/rlinfra-state.json", hidden)] * len(nodes)
    )
    prometheus = [d for d in found if d[0] == "/etc/systemd/system/rlinfra-prometheus.service"]
    assert sorted(d for d in found if d[0] != "/etc/systemd/system/rlinfra-prometheus.service") == want, found
    assert len(prometheus) == 1, found
    [(dummy, lines)] = prometheus
    assert len(lines) == 2 and lines[0].startswith("-ExecStart=") and lines[1].startswith("+ExecStart="), lines
    assert lines[0].replace("retention.time=" + retention, "retention.time=" + new_retention)[1:] == lines[1][1:]

    # No secret: the metrics password, the cluster token, a bcrypt hash of the password.
    password = on_node(head["name"], "cat /etc/ray/metrics/password").strip()
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    assert password and token
    for secret in (password, token, "$2b$", "$2y$"):
        assert secret not in check.output
    # Nothing changed on any node: files, and each service's process since its start.
    assert snapshot(nodes) == before


def test_a_full_converge_of_an_unchanged_cluster_changes_nothing(sandbox):
    """Without its record every node is converged in full: role ray_metrics reads each node once, finds every file
    as its templates would write it and both services running, and skips its file tasks - changed=0 everywhere, no
    handler, no service restarted. Then one worker's web config made readable by hand: that node alone goes through
    the templates, which put the mode back and restart its node_exporter; the others still skip them."""
    nodes = sandbox_nodes()
    site = sandbox_playbook("site.yml")
    assert site.returncode == 0, site.output[-4000:]
    before = snapshot(nodes)
    for n in nodes:
        on_node(n["name"], "rm -f " + RECORD)
    full = sandbox_playbook("site.yml")
    assert full.returncode == 0, full.output[-4000:]
    read = re.search(
        r"TASK \[rlinfra\.verl\.ray_metrics : Read what this node has and needs for its metrics\]", full.output
    )
    assert read, full.output[-4000:]  # walked through the role in full
    assert "TASK [rlinfra.verl.ray_metrics : Write node_exporter's unit]" not in full.output, full.output[-4000:]
    assert set(recap(full.output).values()) == {0}, full.output[-4000:]
    assert "RUNNING HANDLER" not in full.output
    assert snapshot(nodes) == before

    worker = nodes[-1]["name"]
    web = "/etc/ray/metrics/exporter-web.yml"
    on_node(worker, "chmod 0644 " + web)
    exporter = on_node(worker, "systemctl show -p MainPID --value rlinfra-node-exporter").strip()
    fixed = sandbox_playbook("site.yml")
    assert fixed.returncode == 0, fixed.output[-4000:]
    assert changed_tasks(fixed.output) == [
        "TASK rlinfra.verl.ray_metrics : Write node_exporter's web config (basic auth, the password's bcrypt hash): "
        + worker,
        "TASK rlinfra.verl.ray_metrics : Restart node_exporter: " + worker,
    ], changed_tasks(fixed.output)
    assert on_node(worker, "stat -c %a " + web).strip() == "600"
    assert on_node(worker, "systemctl show -p MainPID --value rlinfra-node-exporter").strip() not in ("", "0", exporter)


# The opt-out (ray_metrics: false removes the stack, a second run changes nothing) is molecule/cluster's side_effect,
# in scripts/test.sh's side lane: here it would restart the head's Ray twice, over three minutes of the critical lane.
