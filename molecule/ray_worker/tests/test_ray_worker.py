"""The worker joined its head with the head's token, under systemd."""

import json

import pytest

testinfra_hosts = ["rlinfra-mol-worker"]


def test_service_running(host):
    assert host.service("ray-worker").is_running
    assert host.service("ray-worker").is_enabled


def test_joined_the_head(host):
    fact = json.loads(host.file("/etc/ansible/facts.d/rlinfra_ray.fact").content_string)
    assert fact["role"] == "worker"
    url = fact["dashboard_url"]
    out = host.check_output(
        f"curl -sf -H \"Authorization: Bearer $(cat /etc/ray/auth_token)\" '{url}/nodes?view=summary'"
    )
    assert fact["node_ip"] in out


@pytest.mark.parametrize("path", ["/etc/ray/auth_token", "/etc/ray/ray-secrets.env"])
def test_secret_files_root_only(host, path):
    f = host.file(path)
    assert f.mode == 0o600 and f.user == "root"


def test_unit_joins_by_private_address(host):
    unit = host.file("/etc/systemd/system/ray-worker.service").content_string
    assert "--address=" in unit and "0.0.0.0" not in unit and "--head" not in unit
