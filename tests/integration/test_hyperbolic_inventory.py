"""End to end: ``ansible-inventory`` (and ``ansible``/``ansible-playbook``) with the
``rlinfra.verl.hyperbolic`` plugin against the fake Hyperbolic API on 127.0.0.1.

Every command runs from the repository root, so ansible.cfg (collections path and
``[inventory] enable_plugins``) applies exactly as it does for users.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.fake_hyperbolic.server import marketplace_instance, on_demand_rental
from tests.fake_hyperbolic.testing import HYPERBOLIC_TEST_KEY, ROOT, ansible_env, load_failures, run, venv_bin

CLUSTER_RE = "^verl-(?P<cluster>[^-]+)-"


def groups_of(data):
    return {name: sorted(body.get("hosts", [])) for name, body in data.items() if name != "_meta"}


def assert_no_key(result):
    assert HYPERBOLIC_TEST_KEY not in result.stdout
    assert HYPERBOLIC_TEST_KEY not in result.stderr


# ----------------------------------------------------------------------------- basics
def test_hosts_hostvars_groups_and_clusters(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(8, clusters=["a", "b"])
    result = ansible_inventory(inventory_file({"cluster_from": CLUSTER_RE}))
    assert result.rc == 0, result.stderr
    assert "Failed to parse" not in result.stderr
    data = result.data
    hostvars = data["_meta"]["hostvars"]
    assert len(hostvars) == 8

    rental = hostvars["verl-a-00002"]  # on_demand, sshNetworking, non-default port
    assert rental == {
        "ansible_host": "10.0.0.2",
        "ansible_port": 20002,
        "ansible_user": "ubuntu",
        "hyperbolic_id": "vm-000002",
        "hyperbolic_label": "verl-a-00002",
        "hyperbolic_status": "running",
        "hyperbolic_gpu_type": "H100-SXM5-80GB",
        "hyperbolic_gpu_count": 8,
        "hyperbolic_region": "us-east-1",
        "hyperbolic_source": "on_demand",
        "ray_cluster": "a",
        "hyperbolic_kind": "virtual-machine",
        "hyperbolic_node": None,
        "hyperbolic_private_ip": None,
        "hyperbolic_cost_per_hour": None,
        "hyperbolic_user_metadata": None,
    }
    market = hostvars["verl-b-00003"]  # marketplace, "ssh -p P user@h"
    assert (market["ansible_host"], market["ansible_port"], market["ansible_user"]) == ("10.0.0.3", 22, "ubuntu")
    assert market["hyperbolic_source"] == "marketplace" and market["hyperbolic_status"] == "online"
    assert market["hyperbolic_gpu_type"] == "NVIDIA-H100-80GB-HBM3"
    assert hostvars["verl-b-00007"]["ansible_port"] == 20007  # "ssh -p P user@h" with a non-default port
    assert hostvars["verl-b-00001"]["ansible_port"] == 20001  # "ssh user@h -p P"

    groups = groups_of(data)
    assert groups["ray_head"] == ["verl-a-00000", "verl-b-00001"]
    assert groups["ray_workers"] == [
        "verl-a-00002",
        "verl-a-00004",
        "verl-a-00006",
        "verl-b-00003",
        "verl-b-00005",
        "verl-b-00007",
    ]
    assert groups["ray_cluster_a"] == ["verl-a-00000", "verl-a-00002", "verl-a-00004", "verl-a-00006"]
    assert groups["ray_cluster_b"] == ["verl-b-00001", "verl-b-00003", "verl-b-00005", "verl-b-00007"]
    assert {h["ray_cluster"] for h in hostvars.values()} == {"a", "b"}
    assert fake_hyperbolic.request_count == 2
    assert all(ok for (_m, _p, _s, ok) in fake_hyperbolic.requests), "Bearer key not sent"


def test_head_selector_and_same_head_every_run(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(6, clusters=["a", "b"])
    path = inventory_file({"cluster_from": CLUSTER_RE, "head_selector": "*-0000[45]"})
    first = ansible_inventory(path)
    assert first.rc == 0, first.stderr
    assert groups_of(first.data)["ray_head"] == ["verl-a-00004", "verl-b-00005"]
    # reversed API order: same inventory, same heads
    fake_hyperbolic.set_instances(
        on_demand=list(reversed(fake_hyperbolic.on_demand)), marketplace=list(reversed(fake_hyperbolic.marketplace))
    )
    second = ansible_inventory(path)
    assert second.data == first.data


def test_fixture_shapes_filters_and_unique_names(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_instances(
        on_demand=[
            on_demand_rental("vm-1", "dup", "203.0.113.1"),
            on_demand_rental("vm-2", "dup", "203.0.113.2", port=2222, user="root"),
            on_demand_rental("vm-3", "gone", "203.0.113.3", status="terminated"),
            on_demand_rental("vm-4", "Odd Label / #1", "203.0.113.4", status="Running"),
        ],
        marketplace=[
            marketplace_instance("swift-cat", "ssh.example.net", port=31065),
            marketplace_instance("slow-dog", "ssh.example.net", port=31066, status="offline"),
        ],
    )
    result = ansible_inventory(inventory_file())
    assert result.rc == 0, result.stderr
    hostvars = result.data["_meta"]["hostvars"]
    assert sorted(hostvars) == ["Odd-Label-1", "dup", "dup-vm-2", "swift-cat"]
    assert hostvars["dup-vm-2"]["ansible_user"] == "root" and hostvars["dup-vm-2"]["ansible_port"] == 2222
    assert hostvars["swift-cat"]["ansible_port"] == 31065
    assert {h["ray_cluster"] for h in hostvars.values()} == {"default"}
    assert len(groups_of(result.data)["ray_head"]) == 1


# ----------------------------------------------------------------------------- cache
def test_cache_hit_makes_no_request_and_gives_same_output(fake_hyperbolic, inventory_file, ansible_inventory, tmp_path):
    fake_hyperbolic.set_fleet(20, clusters=["a", "b"])
    path = inventory_file(
        {
            "cluster_from": CLUSTER_RE,
            "cache": True,
            "cache_plugin": "ansible.builtin.jsonfile",
            "cache_connection": str(tmp_path / "cache"),
            "cache_timeout": 600,
            "compose": {"gpu_total": "hyperbolic_gpu_count * 1"},
            "keyed_groups": [{"key": "hyperbolic_source", "prefix": "src"}],
            "groups": {"first_ten": "hyperbolic_label is not none and hyperbolic_label is match('verl-a-0000')"},
        }
    )
    first = ansible_inventory(path)
    assert first.rc == 0, first.stderr
    assert fake_hyperbolic.request_count == 2
    fake_hyperbolic.reset_stats()

    second = ansible_inventory(path)
    assert second.rc == 0, second.stderr
    assert fake_hyperbolic.request_count == 0, "cache hit made HTTP requests"
    assert second.stdout == first.stdout
    assert "src_marketplace" in second.data and second.data["_meta"]["hostvars"]["verl-a-00000"]["gpu_total"] == 8

    cache_files = list((tmp_path / "cache").iterdir())
    assert cache_files
    for f in cache_files:
        assert HYPERBOLIC_TEST_KEY not in f.read_text()

    third = ansible_inventory(path, "--flush-cache")
    assert third.rc == 0 and fake_hyperbolic.request_count == 2
    assert third.stdout == first.stdout


# ----------------------------------------------------------------------------- failures
def test_404_source_is_skipped_with_warning(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(4)
    fake_hyperbolic.set_source_status("marketplace", 404)
    result = ansible_inventory(inventory_file())
    assert result.rc == 0, result.stderr
    assert re.search(r"WARNING.*source 'marketplace' skipped: HTTP 404", result.stderr), result.stderr
    assert "Failed to parse" not in result.stderr
    hostvars = result.data["_meta"]["hostvars"]
    assert sorted(hostvars) == ["verl-default-00000", "verl-default-00002"]
    assert {h["hyperbolic_source"] for h in hostvars.values()} == {"on_demand"}


@pytest.mark.parametrize("status, word", [(401, "Unauthorized"), (403, "Forbidden")])
def test_rejected_key_gives_one_clear_line(fake_hyperbolic, inventory_file, ansible_inventory, tmp_path, status, word):
    fake_hyperbolic.set_fleet(2)
    if status == 401:
        env = ansible_env(tmp_path, HYPERBOLIC_API_KEY="sk-wrong-key-0000")
    else:
        fake_hyperbolic.auth_status = 403
        fake_hyperbolic.auth_message = "API key lacks the compute scope"
        env = None
    path = inventory_file()
    result = ansible_inventory(path, "-vvv", env=env)
    expected = (
        "rlinfra.verl.hyperbolic: cannot load %s: Hyperbolic API rejected the API key: HTTP %d %s "
        "on GET /v2/on-demand/virtual-machine-rentals: %s; check HYPERBOLIC_API_KEY (or api_key)"
        % (path, status, word, "Invalid API key" if status == 401 else "API key lacks the compute scope")
    )
    assert load_failures(result.stderr) == [expected], result.stderr
    # both sources are asked concurrently; neither is retried, nor asked again by the 'auto' plugin
    paths = [p for (_m, p, _s, _ok) in fake_hyperbolic.requests]
    assert 1 <= len(paths) <= 2 and len(set(paths)) == len(paths), paths
    assert result.rc == 0 and result.data["_meta"]["hostvars"] == {}
    assert_no_key(result)
    assert "sk-wrong-key-0000" not in result.stdout + result.stderr


def test_500_and_429_are_retried_then_succeed(fake_hyperbolic, inventory_file, ansible_inventory):
    """HTTP 500, then 429 with Retry-After: 1 (honoured), then success."""
    fake_hyperbolic.set_fleet(4)
    fake_hyperbolic.fail_next(1, status=500)
    fake_hyperbolic.fail_next(1, status=429, retry_after=1)
    path = inventory_file({"retry_backoff": 0.01, "retries": 3})
    start = time.monotonic()
    result = ansible_inventory(path)
    assert result.rc == 0, result.stderr
    assert "Failed to parse" not in result.stderr
    assert len(result.data["_meta"]["hostvars"]) == 4
    assert sorted(s for (_m, _p, s, _ok) in fake_hyperbolic.requests) == [200, 200, 429, 500]
    assert time.monotonic() - start >= 1.0, "Retry-After was not honoured"


def test_5xx_forever_fails_clearly(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(2)
    fake_hyperbolic.fail_next(50, status=503)
    result = ansible_inventory(inventory_file({"retries": 2}))
    assert (
        "Hyperbolic API GET %s/v2/on-demand/virtual-machine-rentals failed after 3 attempts: HTTP 503"
        % (fake_hyperbolic.url)
        in result.stderr
    )
    assert result.rc == 0 and result.data["_meta"]["hostvars"] == {}
    # 3 attempts per source (asked concurrently), and not all over again by the 'auto' plugin
    assert fake_hyperbolic.stats()["by_path"] == {
        "/v2/on-demand/virtual-machine-rentals": 3,
        "/v1/marketplace/instances": 3,
    }


def test_timeout_then_failure_message(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(2)
    fake_hyperbolic.set_delay(3)
    result = ansible_inventory(inventory_file({"timeout": 0.5, "retries": 1}))
    assert "failed after 2 attempts: no answer within 0.5s (timed out)" in result.stderr, result.stderr
    assert result.rc == 0 and result.data["_meta"]["hostvars"] == {}
    assert fake_hyperbolic.request_count == 4  # 2 attempts for each of the 2 sources
    assert result.elapsed < 15


def test_slow_then_fast_recovers(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(2)
    fake_hyperbolic.set_delay(2, count=1)
    result = ansible_inventory(inventory_file({"timeout": 0.5, "retries": 2}))
    assert result.rc == 0, result.stderr
    assert len(result.data["_meta"]["hostvars"]) == 2


def test_unparsed_is_failed_makes_a_hard_error(fake_hyperbolic, inventory_file, ansible_inventory, tmp_path):
    env = ansible_env(tmp_path, HYPERBOLIC_API_KEY="nope", ANSIBLE_INVENTORY_UNPARSED_FAILED="true")
    result = ansible_inventory(inventory_file(), env=env)
    assert result.rc != 0
    assert "HTTP 401 Unauthorized" in result.stderr


def test_missing_key_is_reported(fake_hyperbolic, inventory_file, ansible_inventory, tmp_path):
    env = ansible_env(tmp_path, HYPERBOLIC_API_KEY=None)
    result = ansible_inventory(inventory_file(), env=env)
    assert "no API key: set HYPERBOLIC_API_KEY or the api_key option" in result.stderr
    assert fake_hyperbolic.request_count == 0


def test_key_never_in_output_even_with_vvvv(fake_hyperbolic, inventory_file, ansible_inventory):
    fake_hyperbolic.set_fleet(3)
    # the key both in the environment and in the file (the file wins), maximum verbosity
    result = ansible_inventory(inventory_file({"api_key": HYPERBOLIC_TEST_KEY}), "-vvvv")
    assert result.rc == 0, result.stderr
    assert len(result.data["_meta"]["hostvars"]) == 3
    assert all(ok for (_m, _p, _s, ok) in fake_hyperbolic.requests)
    assert_no_key(result)


# ----------------------------------------------------------------------------- Jinja from the API
JINJA_HOSTS = ["verl-x-00000", "lookup-pipe-touch-MARKER"]


def _jinja_fleet(fake, marker):
    evil = "{{ lookup('pipe', 'touch %s') }}" % marker
    fake.set_instances(
        on_demand=[
            on_demand_rental("vm-evil", evil, "203.0.113.66"),
            on_demand_rental(
                "vm-ok", "verl-x-00000", "203.0.113.67", gpu_type="{{ lookup('pipe', 'touch %s-gpu') }}" % marker
            ),
        ],
        marketplace=[],
    )
    return evil


def test_jinja_in_label_is_plain_text_in_inventory(fake_hyperbolic, inventory_file, ansible_inventory, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _jinja_fleet(fake_hyperbolic, marker)
    path = inventory_file(
        {
            "cluster_from": "{{ hyperbolic_label }}",
            "compose": {"copied_label": "hyperbolic_label"},
            "keyed_groups": [{"key": "hyperbolic_gpu_type", "prefix": "gpu"}],
        }
    )
    result = ansible_inventory(path)
    assert result.rc == 0, result.stderr
    hostvars = result.data["_meta"]["hostvars"]
    evil_host = [h for h, v in hostvars.items() if v["hyperbolic_id"] == "vm-evil"][0]
    assert hostvars[evil_host]["hyperbolic_label"] == evil
    assert hostvars[evil_host]["copied_label"] == evil
    assert hostvars[evil_host]["ray_cluster"] == evil
    raw = json.loads(result.stdout)["_meta"]["hostvars"][evil_host]["hyperbolic_label"]
    assert raw == {"__ansible_unsafe": evil}, "API text must be marked unsafe in the inventory"
    assert not marker.exists() and not (tmp_path / "PWNED-gpu").exists()


def test_jinja_in_label_never_runs_in_adhoc_or_playbook(fake_hyperbolic, inventory_file, tmp_path):
    marker = tmp_path / "PWNED"
    evil = _jinja_fleet(fake_hyperbolic, marker)
    path = inventory_file()
    env = ansible_env(tmp_path, ANSIBLE_CALLBACK_RESULT_FORMAT="json")  # no YAML line folding

    adhoc = run(
        [
            venv_bin("ansible"),
            "all",
            "-i",
            str(path),
            "-c",
            "local",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "var=hyperbolic_label",
        ],
        env,
    )
    assert adhoc.rc == 0, adhoc.stdout + adhoc.stderr
    assert evil in adhoc.stdout
    assert not marker.exists()

    playbook = tmp_path / "show.yml"
    playbook.write_text(
        "- hosts: all\n"
        "  gather_facts: false\n"
        "  connection: local\n"
        "  tasks:\n"
        "    - ansible.builtin.debug:\n"
        "        msg: 'label={{ hyperbolic_label }} gpu={{ hyperbolic_gpu_type }}'\n"
        "    - ansible.builtin.debug:\n"
        "        var: hyperbolic_gpu_type\n"
        "    - ansible.builtin.set_fact:\n"
        "        again: '{{ hyperbolic_label }}'\n"
        "    - ansible.builtin.debug:\n"
        "        msg: '{{ again }}'\n"
    )
    play = run([venv_bin("ansible-playbook"), "-i", str(path), str(playbook)], env)
    assert play.rc == 0, play.stdout + play.stderr
    assert "label=" + evil in play.stdout
    assert "touch %s-gpu" % marker in play.stdout
    assert not marker.exists() and not (tmp_path / "PWNED-gpu").exists()
    assert_no_key(play)


# ----------------------------------------------------------------------------- CLI server + sandbox
def test_cli_server_from_sandbox_end_to_end(tmp_path):
    key_file = tmp_path / "id_ed25519"
    key_file.write_text("not a real key\n")
    state = {
        "nodes": [
            {"name": "rlinfra-sbx-1", "ip": "172.30.0.2", "ssh_port": 22, "user": "root", "role": "head"},
            {"name": "rlinfra-sbx-2", "ip": "172.30.0.3", "ssh_port": 2202, "user": "root", "role": "worker"},
            {"name": "rlinfra-sbx-3", "ip": "172.30.0.4", "ssh_port": 22, "user": "root", "role": "worker"},
            {"name": "rlinfra-sbx-10", "ip": "172.30.0.11", "ssh_port": 22, "user": "root", "role": "worker"},
        ],
        "ssh_key": str(key_file),
    }
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(state))
    inv = tmp_path / "sandbox.hyperbolic.yml"
    env = ansible_env(tmp_path)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.fake_hyperbolic.server",
            "--from-sandbox",
            str(state_path),
            "--write-inventory",
            str(inv),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("FAKE_HYPERBOLIC_URL=http://127.0.0.1:"), line + proc.stderr.read()
        assert HYPERBOLIC_TEST_KEY not in line
        result = run([venv_bin("ansible-inventory"), "-i", str(inv), "--list"], env)
        assert result.rc == 0, result.stderr
        data = result.data
        hostvars = data["_meta"]["hostvars"]
        assert sorted(hostvars) == ["rlinfra-sbx-1", "rlinfra-sbx-10", "rlinfra-sbx-2", "rlinfra-sbx-3"]
        assert {h["hyperbolic_source"] for h in hostvars.values()} == {"on_demand", "marketplace"}
        for node in state["nodes"]:
            hv = hostvars[node["name"]]
            assert (hv["ansible_host"], hv["ansible_port"], hv["ansible_user"]) == (
                node["ip"],
                node["ssh_port"],
                node["user"],
            )
            assert hv["ansible_ssh_private_key_file"] == str(key_file)
            assert (hv["python_env_offline"], hv["python_env_wheelhouse"]) == (True, "/data/wheelhouse")
        assert groups_of(data)["ray_head"] == ["rlinfra-sbx-1"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_cli_server_fleet_and_control_endpoints(tmp_path):
    import urllib.request

    env = ansible_env(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_hyperbolic.server", "--fleet", "3000", "--fail-first", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = proc.stdout.readline().strip().split("=", 1)[1]
        req = urllib.request.Request(
            url + "/v1/marketplace/instances", headers={"Authorization": "Bearer " + HYPERBOLIC_TEST_KEY}
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 500
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert len(json.load(resp)["instances"]) == 1500
        with urllib.request.urlopen(url + "/_fake/stats", timeout=10) as resp:
            stats = json.load(resp)
        assert stats["requests"] == 2 and stats["on_demand"] == 1500
        unauth = urllib.request.Request(url + "/v1/marketplace/instances")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(unauth, timeout=10)
        assert err.value.code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----------------------------------------------------------------------------- docs
def test_ansible_doc_renders(tmp_path):
    result = run([venv_bin("ansible-doc"), "-t", "inventory", "rlinfra.verl.hyperbolic"], ansible_env(tmp_path))
    assert result.rc == 0, result.stderr
    for word in (
        "api_key",
        "HYPERBOLIC_API_KEY",
        "head_selector",
        "cluster_from",
        "keyed_groups",
        "cache_plugin",
        "EXAMPLES",
    ):
        assert word in result.stdout


def test_example_inventory_is_valid(fake_hyperbolic, ansible_inventory, tmp_path):
    """inventories/hyperbolic.yml works as shipped (only the URL redirected to the fake API)."""
    import yaml

    fake_hyperbolic.set_fleet(4, clusters=["a"], prefix="exp")
    example = yaml.safe_load((ROOT / "inventories" / "hyperbolic.yml").read_text())
    assert example["plugin"] == "rlinfra.verl.hyperbolic"
    assert "api_key" not in example, "the example must take the key from the environment"
    example.pop("cache_connection", None)
    example["cache"] = False
    path = tmp_path / "example.hyperbolic.yml"
    path.write_text(yaml.safe_dump(example))
    result = ansible_inventory(path, HYPERBOLIC_API_URL=fake_hyperbolic.url)
    assert result.rc == 0, result.stderr
    assert "Failed to parse" not in result.stderr
    assert len(result.data["_meta"]["hostvars"]) == 4
    assert len(groups_of(result.data)["ray_head"]) == 1
