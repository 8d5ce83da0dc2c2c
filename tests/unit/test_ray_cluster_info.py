"""rlinfra.verl.ray_cluster_info driven in-process against a real one-node Ray head."""

from __future__ import annotations

import time

import pytest

from ansible_collections.rlinfra.verl.plugins.modules import ray_cluster_info
from ansible_collections.rlinfra.verl.plugins.modules.ray_cluster_info import missing_hosts

ABSENT_IP = "10.255.255.7"  # never contacted: only compared with the node list


@pytest.fixture
def info(ray_head, module_runner):
    def run(check_mode=False, **options):
        args = dict(address=ray_head.address, auth_token=ray_head.token)
        args.update(options)
        return module_runner(ray_cluster_info.main, args, check_mode=check_mode)
    return run


def test_counts_and_resources(ray_head, info):
    res = info()
    assert res.get("failed") is not True, res
    assert (res["changed"], res["alive_nodes"], res["total_cpus"], res["total_gpus"]) == (False, 1, 2, 0)
    (node,) = res["nodes"]
    assert node["is_head"] is True and node["node_ip"] == ray_head.node_ip and node["state"] == "ALIVE"
    assert node["resources"]["CPU"] == 2 and node["resources"]["memory"] > 0
    assert "missing_hosts" not in res


def test_wait_for_reached_count_and_hosts(ray_head, info):
    res = info(wait_for_nodes=1, expected_hosts=[ray_head.node_ip], timeout=30, check_mode=True)
    assert res.get("failed") is not True, res
    assert res["alive_nodes"] == 1 and res["missing_hosts"] == []


def test_wait_for_nodes_times_out_naming_missing_host(ray_head, info):
    t0 = time.monotonic()
    res = info(wait_for_nodes=2, expected_hosts=[ray_head.node_ip, ABSENT_IP], timeout=2)
    assert res["failed"] is True and 2 <= time.monotonic() - t0 < 15
    assert "1 alive node(s) after 2s, expected 2" in res["msg"]
    assert res["msg"].endswith("missing: " + ABSENT_IP) and res["missing_hosts"] == [ABSENT_IP]
    assert res["alive_nodes"] == 1


def test_wait_for_nodes_without_hosts_says_how_to_name_them(info):
    res = info(wait_for_nodes=3, timeout=1)
    assert res["failed"] is True
    assert "1 alive node(s) after 1s, expected 3" in res["msg"] and "expected_hosts" in res["msg"]


def test_wrong_token(info):
    res = info(auth_token="not-the-token-2718")
    assert res["failed"] is True and "HTTP 403" in res["msg"] and "not-the-token-2718" not in res["msg"]


def test_token_from_environment(ray_head, info, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", ray_head.token_path)
    res = info(auth_token=None)
    assert res.get("failed") is not True and res["alive_nodes"] == 1


def test_missing_hosts_matching():
    nodes = [{"node_ip": "10.0.0.5", "node_name": "10.0.0.5"}, {"node_ip": "10.0.0.6", "node_name": "gpu-b"}]
    resolved = {"gpu-a": {"10.0.0.5"}, "gpu-c": set()}
    assert missing_hosts(["10.0.0.5", "gpu-a", "gpu-b", "gpu-c", "10.0.0.9"], nodes, resolved) == ["gpu-c", "10.0.0.9"]
