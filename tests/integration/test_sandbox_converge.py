"""An unchanged site.yml re-run on the sandbox checks each node in one call and converges nothing; a node that
drifted sends its cluster through the full converge, which repairs it.

On the shared 3-node cluster: after a converge, a re-run reports changed=0, says every node is as its last
converge left it, runs none of the roles' tasks and restarts no Ray. Then three kinds of drift at once - Ray
stopped on a worker, the firewall table deleted on the other, the Ray local fact's mode changed on the head:
the re-run names each, converges the cluster in full, repairs all three (changed only where something was
repaired), and the run after it is unchanged again. The record is root-only and holds no token.
"""

from __future__ import annotations

import re

from tests.integration.conftest import sandbox_nodes
from tests.integration.test_sandbox_firewall import recap
from tests.integration.test_sandbox_job import on_node, playbook

RECORD = "/etc/ray/rlinfra-converged.json"
FACT = "/etc/ansible/facts.d/rlinfra_ray.fact"


def flat(text):
    """The output as one line, with YAML's doubled quotes undone."""
    return " ".join(text.split()).replace("''", "'")


def pids(nodes):
    return {
        n["name"]: on_node(n["name"], "systemctl show -p MainPID --value ray-%s.service" % n["role"]).strip()
        for n in nodes
    }


def test_unchanged_rerun_checks_in_one_call_and_drift_is_repaired(sandbox):
    nodes = sandbox_nodes()
    head = next(n for n in nodes if n["role"] == "head")
    workers = [n for n in nodes if n["role"] == "worker"]
    first = playbook("site.yml")
    assert first.returncode == 0, first.output[-4000:]
    before = pids(nodes)

    again = playbook("site.yml")
    assert again.returncode == 0, again.output[-4000:]
    assert set(recap(again.output).values()) == {0}, again.output[-3000:]
    assert "all %d node(s) as their last converge left them" % len(nodes) in flat(again.output), again.output[-3000:]
    # None of the roles ran; the cluster was still found whole.
    assert "TASK [rlinfra.verl.ray : Run Ray under systemd" not in again.output
    assert "TASK [rlinfra.verl.python_env" not in again.output
    assert re.search(r"Cluster '+default'+: %d nodes alive" % len(nodes), flat(again.output)), again.output[-3000:]
    assert pids(nodes) == before

    for n in nodes:
        assert on_node(n["name"], "stat -c %a " + RECORD).strip() == "600", n["name"]
    token = on_node(head["name"], "cat /etc/ray/auth_token").strip()
    assert token and token not in on_node(head["name"], "cat " + RECORD)

    on_node(workers[0]["name"], "systemctl stop ray-worker.service")
    on_node(workers[1]["name"], "nft delete table inet rlinfra_ray")
    on_node(head["name"], "chmod 0600 " + FACT)
    try:
        repaired = playbook("site.yml")
        assert repaired.returncode == 0, repaired.output[-4000:]
        text = flat(repaired.output)
        assert "Cluster 'default': converging its %d node(s) in full" % len(nodes) in text, repaired.output[-3000:]
        # Stopped by hand, Ray's worker ends failed or inactive, as its exit code falls.
        assert re.search(r"%s: ray-worker.service is (inactive|failed) \(enabled\)" % workers[0]["name"], text), text[
            -3000:
        ]
        assert "%s: the live firewall table rlinfra_ray changed" % workers[1]["name"] in text, text[-3000:]
        assert "%s: %s changed (mode or owner)" % (head["name"], FACT) in text, text[-3000:]
        changed = recap(repaired.output)
        assert changed[workers[0]["name"]] > 0 and changed[workers[1]["name"]] > 0 and changed[head["name"]] > 0, (
            changed
        )
        assert on_node(workers[0]["name"], "systemctl is-active ray-worker.service").strip() == "active"
        assert "rlinfra_ray" in on_node(workers[1]["name"], "nft list tables")
        assert on_node(head["name"], "stat -c %a " + FACT).strip() == "644"
        # Only the stopped worker's Ray started again.
        now = pids(nodes)
        assert now[head["name"]] == before[head["name"]] and now[workers[1]["name"]] == before[workers[1]["name"]], (
            before,
            now,
        )
    finally:
        on_node(workers[0]["name"], "systemctl start ray-worker.service")
        on_node(head["name"], "chmod 0644 " + FACT)

    settled = playbook("site.yml")
    assert settled.returncode == 0, settled.output[-4000:]
    assert set(recap(settled.output).values()) == {0}, settled.output[-3000:]
    assert "all %d node(s) as their last converge left them" % len(nodes) in flat(settled.output), settled.output[
        -3000:
    ]
