"""Ray's ports closed to strangers (ray_firewall, nftables table inet rlinfra_ray) on the sandbox.

After site.yml: every port Ray listens on outside loopback is one the firewall names; a container on the
sandbox's network that is not a member reaches none of them on any node (GCS, dashboard, raylet, object
manager, agents, metrics, Ray Client, a live worker port) but still reaches SSH; the members still form one
cluster (3 alive nodes, a worker's raylet reachable from the head) and the controller still reads the
dashboard; a second site.yml changes nothing anywhere.
"""

from __future__ import annotations

import json
import re

from tests.integration.conftest import SANDBOX_STATE, sandbox_nodes
from tests.integration.test_sandbox_job import on_node, playbook

IMAGE = "rlinfra/debian-systemd:bookworm"
# The roles' defaults (roles/ray/defaults/main.yml).
FIXED = {
    "gcs": 6379,
    "dashboard": 8265,
    "node_manager": 6380,
    "object_manager": 6381,
    "dashboard_agent_grpc": 6382,
    "runtime_env_agent": 6383,
    "metrics_export": 6384,
    "dashboard_agent_listen": 52365,
    "client_server": 10001,
    "autoscaler_metrics": 44217,
    "dashboard_metrics": 44227,
    # ray_metrics (on by default): Prometheus on the head, node_exporter on every node - fenced as Ray's are.
    "prometheus": 9090,
    "node_exporter": 9100,
}
WORKERS = (10002, 19999)
NOT_RAY = ("sshd", "rpcbind", "systemd")

PROBE = r"""
import json, socket, sys
from concurrent.futures import ThreadPoolExecutor
def probe(target):
    ip, port = target
    s = socket.socket(); s.settimeout(2)
    try:
        s.connect((ip, port)); return "open"
    except socket.timeout:
        return "timeout"
    except OSError as e:
        return "refused" if e.errno == 111 else "error %s" % e.errno
    finally:
        s.close()
targets = [tuple(t) for t in json.loads(sys.argv[1])]
with ThreadPoolExecutor(64) as pool:
    print(json.dumps({"%s:%d" % t: r for t, r in zip(targets, pool.map(probe, targets))}))
"""


def recap(output):
    return {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)\s+unreachable=\d+\s+failed=\d+", output, re.M)
    }


def listeners(node):
    """``[(address, port, process)]`` of the TCP listeners outside loopback."""
    out = []
    for line in on_node(node, "ss -Hltnp").splitlines():
        fields = line.split()
        local = fields[3]
        addr, port = local.rsplit(":", 1)
        proc = re.search(r'users:\(\("([^"]+)"', line)
        if addr.startswith("127.") or addr in ("[::1]",):
            continue
        out.append((addr, int(port), proc.group(1) if proc else "?"))
    return out


def in_ray_ports(port):
    return port in FIXED.values() or WORKERS[0] <= port <= WORKERS[1]


def test_ray_ports_closed_to_strangers(sandbox):
    nodes = sandbox_nodes()
    network = json.loads(SANDBOX_STATE.read_text())["network"]
    head = next(n for n in nodes if n["role"] == "head")
    site = playbook("site.yml")
    assert site.returncode == 0, site.output[-4000:]
    assert "NOT filtered" not in site.output, site.output[-4000:]

    targets, wide = [], {}
    for n in nodes:
        assert "rlinfra_ray" in on_node(n["name"], "nft list tables"), n["name"]
        seen = listeners(n["name"])
        # Every Ray listener outside loopback is on a port the firewall names.
        stray = [s for s in seen if s[2] not in NOT_RAY and not in_ray_ports(s[1])]
        assert not stray, "%s: Ray listens outside the fenced ports: %s" % (n["name"], stray)
        wide[n["name"]] = sorted(
            {"%s %s:%d" % (s[2], s[0], s[1]) for s in seen if s[0] in ("0.0.0.0", "*", "[::]") and s[2] not in NOT_RAY}
        )
        # Ray starts workers on demand: a stand-in holds the top of the worker range on every node.
        worker_ports = sorted(s[1] for s in seen if WORKERS[0] <= s[1] <= WORKERS[1] and s[1] != WORKERS[1])
        on_node(
            n["name"],
            "setsid python3 -m http.server %d --bind %s >/dev/null 2>&1 & echo $! >/run/fw-standin.pid"
            % (WORKERS[1], n["ip"]),
        )
        targets += [(n["ip"], p) for p in list(FIXED.values()) + worker_ports[:2] + [WORKERS[1], 22]]
    print("Ray listeners on every address (fenced by nftables):", json.dumps(wide, indent=1))

    stranger = _run(["docker", "run", "--rm", "--network", network, IMAGE, "python3", "-c", PROBE, json.dumps(targets)])
    results = json.loads(stranger)
    opened = {t: r for t, r in results.items() if r == "open" and not t.endswith(":22")}
    assert not opened, "a stranger reaches Ray ports: %s" % opened
    assert all(results["%s:22" % n["ip"]] == "open" for n in nodes), results

    # Members: the cluster is whole, and the head reaches a worker's raylet and object manager.
    worker = next(n for n in nodes if n["role"] != "head")
    member = on_node(
        head["name"],
        "python3 -c %s %s"
        % (
            _quote(PROBE),
            _quote(
                json.dumps(
                    [
                        [worker["ip"], FIXED["node_manager"]],
                        [worker["ip"], FIXED["object_manager"]],
                        [worker["ip"], WORKERS[1]],
                        [worker["ip"], FIXED["node_exporter"]],
                    ]
                )
            ),
        ),
    )
    assert set(json.loads(member).values()) == {"open"}, member
    for n in nodes:
        on_node(n["name"], "kill $(cat /run/fw-standin.pid); rm -f /run/fw-standin.pid")

    # The controller (this host, the source of the SSH connections) reads the dashboard.
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient

    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    alive = [
        x
        for x in RayClient("http://%s:%d" % (head["ip"], FIXED["dashboard"]), token=token, timeout=10).list_nodes()
        if x["state"] == "ALIVE"
    ]
    assert sorted(x["node_ip"] for x in alive) == sorted(n["ip"] for n in nodes)

    again = playbook("site.yml")
    assert again.returncode == 0, again.output[-4000:]
    changed = recap(again.output)
    assert changed and set(changed) >= {n["name"] for n in nodes} and not any(changed.values()), changed


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


def _run(argv):
    import subprocess

    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout
