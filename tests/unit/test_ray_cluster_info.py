"""rlinfra.verl.ray_cluster_info driven in-process against a real one-node Ray head."""

from __future__ import annotations

import json
import socket
import time

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.cluster_info import missing_hosts
from ansible_collections.rlinfra.verl.plugins.modules import ray_cluster_info

ABSENT_IP = "10.255.255.7"  # never contacted: only compared with the node list


@pytest.fixture(autouse=True)
def fact_path(tmp_path, monkeypatch):
    """This host's rlinfra_ray local fact, in tmp_path: absent unless a test writes it."""
    path = tmp_path / "rlinfra_ray.fact"
    monkeypatch.setattr(ray_client, "FACT_PATH", str(path))
    return path


def write_fact(path, ray_head, **changes):
    fact = dict(
        role="head",
        cluster="c1",
        node_ip=ray_head.node_ip,
        gcs_address=ray_head.gcs_address,
        dashboard_url=ray_head.address,
        token_path=ray_head.token_path,
        venv="/opt/rlinfra/venv",
        temp_dir=ray_head.temp_dir,
    )
    fact.update(changes)
    path.write_text(json.dumps(fact, indent=2) + "\n")


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
    assert (res["address"], res["venv"]) == (ray_head.address, "")  # no local fact on this host
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


# Without address (and token): the head's rlinfra_ray local fact ----------------------------------------------


def test_address_token_path_and_venv_from_the_fact(ray_head, fact_path, module_runner):
    write_fact(fact_path, ray_head)
    res = module_runner(ray_cluster_info.main, {"jobs": True})
    assert res.get("failed") is not True, res
    assert (res["address"], res["venv"], res["alive_nodes"]) == (ray_head.address, "/opt/rlinfra/venv", 1)
    assert isinstance(res["jobs"], list)
    assert ray_head.token not in json.dumps(res)


def test_the_fact_token_file_is_what_authenticates(ray_head, fact_path, tmp_path, module_runner):
    wrong = tmp_path / "wrong_token"
    wrong.write_text("not-the-token-31415\n")
    write_fact(fact_path, ray_head, token_path=str(wrong))
    res = module_runner(ray_cluster_info.main, {})
    assert res["failed"] is True and "HTTP 403" in res["msg"] and res["address"] == ray_head.address
    write_fact(fact_path, ray_head, token_path="")  # no token file in the fact, nor given: Ray asks for one
    res = module_runner(ray_cluster_info.main, {})
    assert res["failed"] is True and "HTTP 401" in res["msg"]


def test_explicit_options_win_over_the_fact(ray_head, fact_path, tmp_path, module_runner):
    wrong = tmp_path / "wrong_token"
    wrong.write_text("not-the-token-27182\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nowhere = "http://127.0.0.1:%d" % s.getsockname()[1]  # closed once the block ends: nothing answers
    write_fact(fact_path, ray_head, dashboard_url=nowhere, token_path=str(wrong))
    res = module_runner(ray_cluster_info.main, dict(address=ray_head.address, auth_token=ray_head.token))
    assert res.get("failed") is not True, res
    assert (res["address"], res["venv"]) == (ray_head.address, "/opt/rlinfra/venv")
    res = module_runner(ray_cluster_info.main, dict(address=ray_head.address, auth_token_path=ray_head.token_path))
    assert res.get("failed") is not True, res
    res = module_runner(ray_cluster_info.main, dict(auth_token=ray_head.token))  # the fact's (dead) address
    assert res["failed"] is True and res["msg"].startswith("Ray dashboard at %s is unreachable" % nowhere)


def test_no_fact_and_no_address_is_one_line(fact_path, module_runner):
    res = module_runner(ray_cluster_info.main, {"wait_for_nodes": 1})
    assert res["failed"] is True
    assert res["msg"] == (
        "no Ray dashboard address on this host: it has no rlinfra_ray local fact (%s, written by "
        "site.yml) and address is not set" % fact_path
    )


def test_a_half_written_fact_is_one_line(ray_head, fact_path, module_runner):
    fact_path.write_text('{\n  "role": "head",\n  "dashboard_url": "http://')
    res = module_runner(ray_cluster_info.main, {})
    assert res["failed"] is True and "\n" not in res["msg"]
    assert res["msg"].startswith("the rlinfra_ray local fact %s is not valid JSON (" % fact_path)
    assert res["msg"].endswith("): it is half-written or damaged; run site.yml again to rewrite it")
    # Given an address and a token, the module does not need the fact and works.
    res = module_runner(ray_cluster_info.main, dict(address=ray_head.address, auth_token=ray_head.token))
    assert res.get("failed") is not True and res["venv"] == "", res
