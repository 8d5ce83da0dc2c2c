"""Fit to train, on the sandbox (shared cluster, restored after each test):

* Multi-homed nodes: one worker gets a second network that carries its default route (``docker network connect``, as
  a rented machine's public NIC), another has its interface renamed ens5. site.yml converges the cluster whole; each
  node's Ray advertises the address on its route to the head and its Ray processes carry NCCL_SOCKET_IFNAME,
  GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME naming that node's own interface; a wrong ray_net_ifname is one line per
  node and nothing changes.
* fitness.yml measures for real (agents, Ray's object store): it passes, prints its table and writes
  artifacts/fitness/<cluster>-<time>.json; a slow link made with ``tc`` on one node is named (that node, its
  interface, the threshold); removed, it passes again.
* A bad GPU: a stand-in nvidia-smi printing a real ``-q -x`` document (one GPU edited to show uncorrectable ECC errors,
  tests/unit/fixtures/gpu/SOURCES.md) and a stand-in dmesg printing a real Xid 79 line on one worker: fitness.yml
  names the node, the GPU and the reason and fails; with fitness_exclude_unfit the worker leaves the cluster (Ray
  stopped, site.yml and status.yml name it, the cluster is 2 nodes, a run on it succeeds and its report names the
  worker left out and why); the stand-ins gone, fitness.yml takes it back and site.yml starts its Ray.
"""

from __future__ import annotations

import glob
import json
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.conftest import ROOT, report_of, sandbox_nodes, sandbox_playbook
from tests.integration.test_sandbox_firewall import recap
from tests.integration.test_sandbox_job import on_node

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "gpu"
EXTRA_NET = "rlinfra-sbx-fitness"
TAG = secrets.token_hex(4)
CKPT_ROOT = "/data/checkpoints-fit-" + TAG
# docker's bridge on a busy 2-core runner: well above (the object store measured 0.42 Gbit/s there once, under the
# suite's load); a tc-slowed link: far below
LOW = "fitness_min_gbit=0.2 fitness_ray_min_gbit=0.1"


def flat(text):
    return " ".join(text.split()).replace("''", "'")


def docker(*args, check=True):
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=check)


def ray_env(node):
    """NAME=value of the environment of the node's raylet (what every Ray worker on it inherits)."""
    pid = on_node(node, "pgrep -f 'raylet/raylet' | head -1").strip()
    text = on_node(node, "tr '\\0' '\\n' < /proc/%s/environ" % pid)
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def fact(node):
    return json.loads(on_node(node, "cat /etc/ansible/facts.d/rlinfra_ray.fact") or "{}")


@pytest.fixture
def nodes(sandbox):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    workers = [n for n in nodes if n["role"] != "head"]
    yield head, workers
    # The suite shares this sandbox: whatever a failed test left out is taken back before the next one.
    for n in nodes:
        on_node(
            n["name"], "rm -f /etc/ansible/facts.d/rlinfra_excluded.fact /usr/local/bin/nvidia-smi /usr/local/bin/dmesg"
        )
    restore = sandbox_playbook("site.yml")
    assert restore.returncode == 0, restore.output[-4000:]


def test_multi_homed_nodes_get_their_own_address_and_interface_and_a_slow_link_is_named(nodes):
    head, (w1, w2) = nodes[0], nodes[1][:2]
    docker("network", "rm", EXTRA_NET, check=False)
    # Outside Docker's default pools (172.17-31.x, 192.168.x), from which the networks other stages create meanwhile
    # (molecule's) get theirs: a fixed subnet there can overlap one of them.
    docker("network", "create", "--internal", "--subnet", "10.231.250.0/24", EXTRA_NET)
    routes = {n["name"]: on_node(n["name"], "ip -4 route show default").strip() for n in (w1, w2)}
    try:
        docker("network", "connect", EXTRA_NET, w1["name"])
        extra = re.search(
            r"^\d+:\s+(\S+)\s+inet 10\.231\.250\.", on_node(w1["name"], "ip -o -4 addr show"), re.M
        ).group(1)
        # the default route goes out over the new NIC, as over a rented machine's public one
        on_node(w1["name"], "ip route replace default via 10.231.250.1 dev %s" % extra)
        assert "dev %s" % extra in on_node(w1["name"], "ip -4 route show default")
        on_node(
            w2["name"],
            "ip link set eth0 down && ip link set eth0 name ens5 && ip link set ens5 up && "
            "ip route replace default dev ens5 2>/dev/null; true",
        )
        assert "ens5" in on_node(w2["name"], "ip -o -4 addr show")

        site = sandbox_playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]
        assert re.search(r"Cluster 'default': 3 nodes alive", flat(site.output)), site.output[-3000:]
        assert fact(w1["name"])["node_ip"] == w1["ip"]  # not its eth1 (default route) address
        for node, ifname in ((head, "eth0"), (w1, "eth0"), (w2, "ens5")):
            env = ray_env(node["name"])
            assert (env.get("NCCL_SOCKET_IFNAME"), env.get("GLOO_SOCKET_IFNAME"), env.get("TP_SOCKET_IFNAME")) == (
                "=" + ifname,
                ifname,
                ifname,
            ), (node["name"], {k: v for k, v in env.items() if "IFNAME" in k})

        pids = {n["name"]: on_node(n["name"], "pgrep -f 'raylet/raylet' | head -1").strip() for n in (head, w1, w2)}
        wrong = sandbox_playbook("site.yml", "ray_net_ifname=%s" % extra)
        assert wrong.returncode != 0
        assert (
            "%s: ray_net_ifname '%s' matches no up interface with an IPv4 address that reaches the head %s"
            % (w1["name"], extra, head["ip"])
        ) in flat(wrong.output), wrong.output[-4000:]
        assert "; nothing was changed" in flat(wrong.output)
        assert {
            n["name"]: on_node(n["name"], "pgrep -f 'raylet/raylet' | head -1").strip() for n in (head, w1, w2)
        } == pids

        # --check: each node's own checks only; nothing measured between nodes or through Ray, no failure for it,
        # nothing written (no report, no verdict on the head).
        verdict = on_node(head["name"], "cat /etc/ray/rlinfra-fitness.json 2>/dev/null")
        before = set(glob.glob(str(ROOT / "artifacts" / "fitness" / "default-*.json")))
        checked = sandbox_playbook("fitness.yml", LOW, "--check")
        assert checked.returncode == 0, checked.output[-4000:]
        assert "Cluster default: fit" in checked.output and "check mode: only each node's own checks ran" in flat(
            checked.output
        ), checked.output[-3000:]
        assert "not run (" not in checked.output
        assert set(glob.glob(str(ROOT / "artifacts" / "fitness" / "default-*.json"))) == before
        assert on_node(head["name"], "cat /etc/ray/rlinfra-fitness.json 2>/dev/null") == verdict

        start = time.monotonic()
        fit = sandbox_playbook("fitness.yml", LOW)
        took = time.monotonic() - start
        assert fit.returncode == 0, fit.output[-4000:]
        assert "Cluster default: fit" in fit.output and re.search(
            r"%s\s+%s\s+ens5\s+[0-9.]+ Gb/s" % (re.escape(w2["name"]), re.escape(w2["ip"])), fit.output
        ), fit.output[-3000:]
        written = set(glob.glob(str(ROOT / "artifacts" / "fitness" / "default-*.json"))) - before
        assert len(written) == 1
        doc = json.loads(Path(written.pop()).read_text())
        assert doc["fit"] is True and len(doc["links"]) == 6 and all(l["gbit"] >= 0.2 for l in doc["links"])
        assert len(doc["ray"]["objects"]) == 6 and doc["ray"]["allreduce"] == {
            "skipped": "torch is not in the cluster's environment"
        }
        print("fitness.yml on 3 nodes: %.1f s" % took)

        on_node(w2["name"], "tc qdisc add dev ens5 root tbf rate 8mbit burst 16kbit latency 200ms")
        slow = sandbox_playbook("fitness.yml", LOW, "fitness_ray_object_mib=1")
        assert slow.returncode != 0
        assert re.search(
            r"%s -> %s: 0\.0[0-9]+ Gbit/s over ens5 \(threshold 0\.2 Gbit/s\)"
            % (re.escape(w2["name"]), re.escape(head["name"])),
            slow.output,
        ), slow.output[-4000:]
        assert "cluster default is not fit to train" in slow.output
        on_node(w2["name"], "tc qdisc del dev ens5 root")
        again = sandbox_playbook("fitness.yml", LOW)
        assert again.returncode == 0, again.output[-4000:]
    finally:
        on_node(
            w2["name"],
            "tc qdisc del dev ens5 root 2>/dev/null; ip link set ens5 down 2>/dev/null && "
            "ip link set ens5 name eth0 && ip link set eth0 up; true",
        )
        docker("network", "disconnect", EXTRA_NET, w1["name"], check=False)
        docker("network", "rm", EXTRA_NET, check=False)
        for name, route in routes.items():
            if route:
                on_node(name, "ip route replace %s 2>/dev/null; true" % route)


def test_site_runs_the_checks_when_asked(nodes):
    """ray_fitness_check: true makes site.yml end with fitness.yml's checks (its table), on a converged cluster too;
    without it a no-op re-run has no fitness play hosts at all."""
    head, dummy = nodes
    run = sandbox_playbook("site.yml", "ray_fitness_check=true", LOW)
    assert run.returncode == 0, run.output[-4000:]
    text = flat(run.output)
    assert re.search(r"Cluster default: fit - \S+/artifacts/fitness/default-\d{8}T\d{6}Z\.json", text), text[-3000:]
    # the checks' Ray job and the new verdict kept on the head are the only changes; the nodes are as they were
    # (localhost: site.yml's first play reads the switches there and changes nothing)
    assert {h: c for h, c in recap(run.output).items() if h not in (head["name"], "localhost")} == {
        n["name"]: 0 for n in nodes[1]
    }
    assert recap(run.output).get("localhost", 0) == 0
    assert recap(run.output)[head["name"]] <= 2
    plain = sandbox_playbook("site.yml")
    assert (
        plain.returncode == 0
        and "Run fitness.yml's checks" not in plain.output
        and set(recap(plain.output).values()) == {0}
    )


XID_LINE = "2026-11-26T12:03:44,000000+00:00 NVRM: Xid (PCI:%s): 79, pid=0, GPU has fallen off the bus."


def test_a_bad_gpu_is_named_and_its_worker_left_out_then_taken_back(nodes):
    head, workers = nodes
    w1 = workers[0]
    xml = (FIXTURES / "nvidia_smi_q_x_v100s_8gpu_drv460_TRIMMED_VARIANT_bad.xml").read_text()
    # nvidia-smi's 00000000:3B:00.0 is the kernel's 0000:3b:00
    bus = [
        "%s:%s" % (d[-4:], rest.lower())
        for d, rest in re.findall(r'<gpu id="([0-9A-Fa-f]{8}):([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.0"', xml)
    ]
    stand_in = '#!/bin/sh\n[ "$1 $2" = "-q -x" ] && cat /usr/local/share/rlinfra-test/nvidia.xml && exit 0\nexit 9\n'
    on_node(
        w1["name"],
        "mkdir -p /usr/local/share/rlinfra-test && cat > /usr/local/share/rlinfra-test/nvidia.xml",
        stdin=xml,
    )
    on_node(w1["name"], "cat > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi", stdin=stand_in)
    on_node(
        w1["name"],
        "cat > /usr/local/bin/dmesg && chmod 755 /usr/local/bin/dmesg",
        stdin="#!/bin/sh\necho '%s'\n" % (XID_LINE % bus[3]),
    )
    try:
        bad = sandbox_playbook("fitness.yml", LOW)
        assert bad.returncode != 0
        out = flat(bad.output)
        assert re.search(r"%s GPU 3 \([0-9A-F:.]+\): \d+ uncorrectable ECC error" % re.escape(w1["name"]), out), out[
            -4000:
        ]
        assert re.search(
            r"%s GPU 3 \([0-9A-F:.]+\): Xid 79 \(GPU has fallen off the bus\)" % re.escape(w1["name"]), out
        ), out[-4000:]
        assert "cluster default is not fit to train, 1 unfit node(s): %s" % w1["name"] in out

        left = sandbox_playbook("fitness.yml", LOW, "fitness_exclude_unfit=true")
        assert left.returncode == 0, left.output[-4000:]
        assert "%s left out of the cluster" % w1["name"] in left.output
        assert on_node(w1["name"], "systemctl is-active ray-worker; systemctl is-enabled ray-worker").split() == [
            "inactive",
            "disabled",
        ]
        site = sandbox_playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]
        text = flat(site.output)
        assert "%s is left out (fitness.yml, since" % w1["name"] in text and "Cluster 'default': 2 nodes alive" in text
        assert on_node(w1["name"], "systemctl is-active ray-worker").strip() == "inactive"
        status = sandbox_playbook("status.yml", "exp=smoke")
        assert re.search(r"left out: +%s \(fitness\.yml" % re.escape(w1["name"]), status.output), status.output[-3000:]
        # A run on the cluster without it: the run report's header names the worker left out and why.
        run = "leftout-" + TAG
        submit = sandbox_playbook(
            "submit.yml",
            "exp=smoke",
            "run=" + run,
            json.dumps(
                {"verl_job_checkpoint_root": CKPT_ROOT, "verl_job_params": {"trainer": {"total_training_steps": 4}}}
            ),
        )
        assert submit.returncode == 0 and "SUCCEEDED" in submit.output, submit.output[-4000:]
        page = report_of("smoke", run)[1].read_text()
        assert re.search(
            r"<th>left out</th><td>%s \(fitness\.yml, \w+\): [^<]*GPU 3 \([0-9A-F:.]+\): 2 uncorrectable ECC"
            % re.escape(w1["name"]),
            page,
        ), page[:3000]
    finally:
        on_node(
            w1["name"], "rm -f /usr/local/bin/nvidia-smi /usr/local/bin/dmesg; rm -rf /usr/local/share/rlinfra-test"
        )
        on_node(head["name"], "rm -rf " + CKPT_ROOT)
    back = sandbox_playbook("fitness.yml", LOW)
    assert back.returncode == 0, back.output[-4000:]
    assert "%s is fit again: site.yml starts its Ray" % w1["name"] in back.output
    assert on_node(w1["name"], "ls /etc/ansible/facts.d/rlinfra_excluded.fact 2>&1").count("No such file") == 1
    site = sandbox_playbook("site.yml")
    assert site.returncode == 0 and "Cluster 'default': 3 nodes alive" in flat(site.output), site.output[-3000:]
    assert set(recap(site.output)) >= {head["name"], w1["name"]}
