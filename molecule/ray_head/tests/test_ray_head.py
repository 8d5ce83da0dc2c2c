"""The head runs under systemd, bound to its private address, with token auth and a root-only token."""

import json


def _fact(host):
    return json.loads(host.file("/etc/ansible/facts.d/rlinfra_ray.fact").content_string)


def test_service_running_and_enabled(host):
    svc = host.service("ray-head")
    assert svc.is_running
    assert svc.is_enabled


def test_unit_binds_private_address_with_limits(host):
    unit = host.file("/etc/systemd/system/ray-head.service").content_string
    ip = _fact(host)["node_ip"]
    assert f"--node-ip-address={ip}" in unit
    assert f"--dashboard-host={ip}" in unit
    assert "0.0.0.0" not in unit
    assert "--block" in unit and "Restart=on-failure" in unit
    assert "LimitNOFILE=1048576" in unit and "LimitNPROC=" in unit


def test_token_is_root_only_and_not_in_argv(host):
    token = host.file("/etc/ray/auth_token")
    assert token.mode == 0o600 and token.user == "root"
    secret = token.content_string.strip()
    assert len(secret) >= 32
    assert secret not in host.check_output("ps -eo args")
    assert secret not in host.file("/etc/systemd/system/ray-head.service").content_string
    assert "RAY_AUTH_MODE=token" in host.file("/etc/ray/ray.env").content_string


def test_dashboard_requires_the_token(host):
    url = _fact(host)["dashboard_url"]
    no_token = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' {url}/api/jobs/")
    assert no_token.stdout.strip() == "401"
    with_token = host.run(
        f"curl -s -o /dev/null -w '%{{http_code}}' -H \"Authorization: Bearer $(cat /etc/ray/auth_token)\" {url}/api/jobs/"
    )
    assert with_token.stdout.strip() == "200"


def test_temp_dir_in_use(host):
    assert host.file("/workspace/ray/session_latest").exists


def test_restart_record_is_root_only_and_holds_no_secret(host):
    record = host.file("/etc/ray/rlinfra-state.json")
    assert record.mode == 0o600 and record.user == "root"
    data = json.loads(record.content_string)
    assert set(data["parts"]) == {"ray_env", "token", "unit"} and len(data["fingerprint"]) == 64
    assert host.file("/etc/ray/auth_token").content_string.strip() not in record.content_string
