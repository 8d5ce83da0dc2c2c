"""The lines site.yml prints to reach a dashboard (filter rlinfra.verl.dashboard_access): ready-to-paste commands
that connect the way Ansible did, and never the token. The browser follows them in
tests/integration/test_sandbox_dashboard.py."""

from __future__ import annotations

import shlex

from ansible_collections.rlinfra.verl.plugins.filter.dashboard_access import dashboard_access


def test_the_tunnel_and_token_commands_carry_the_inventorys_connection():
    hv = {
        "ansible_host": "203.0.113.7",
        "ansible_user": "ubuntu",
        "ansible_port": 2222,
        "ansible_ssh_private_key_file": "/home/me/.ssh/hyperbolic key",
        "ansible_ssh_common_args": "-o ProxyJump=bastion",
        "ray_node_ip": "10.0.0.5",
        "ray_dashboard_port": 8266,
    }
    tunnel, token, cli = dashboard_access(
        "gpu-0", hv, "/etc/ray/auth_token", "-C -o ControlMaster=auto -o ControlPersist=60s"
    )
    cmd, url = tunnel[len("Dashboard: ") :].split("   then open ")
    assert shlex.split(cmd) == [
        "ssh",
        "-N",
        "-L",
        "8266:10.0.0.5:8266",
        "-p",
        "2222",
        "-i",
        "/home/me/.ssh/hyperbolic key",
        "-o",
        "ProxyJump=bastion",
        "ubuntu@203.0.113.7",
    ]
    assert url == "http://127.0.0.1:8266"
    assert token.startswith("Dashboard token (it asks for it once; root-only in /etc/ray/auth_token on gpu-0): ")
    assert shlex.split(token.split("): ", 1)[1]) == [
        "ssh",
        "-p",
        "2222",
        "-i",
        "/home/me/.ssh/hyperbolic key",
        "-o",
        "ProxyJump=bastion",
        "ubuntu@203.0.113.7",
        "sudo",
        "cat",
        "/etc/ray/auth_token",
    ]
    assert cli.endswith("RAY_ADDRESS=http://127.0.0.1:8266")


def test_ansibles_own_ssh_settings_carry_over_once():
    args = "-o ControlMaster=auto -o ControlPersist=120s -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
    tunnel = dashboard_access(
        "h", {"ansible_host": "172.18.0.2", "ansible_user": "root"}, ssh_args=args, host_key_checking="False"
    )[0]
    words = shlex.split(tunnel[len("Dashboard: ") :].split("   then open ")[0])
    assert words == [
        "ssh",
        "-N",
        "-L",
        "8265:172.18.0.2:8265",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "root@172.18.0.2",
    ]
    # host_key_checking false and nothing in ssh_args about it: the option Ansible adds.
    words = shlex.split(
        dashboard_access("h", {}, ssh_args="", host_key_checking=False)[0][len("Dashboard: ") :].split("   then open ")[
            0
        ]
    )
    assert words == ["ssh", "-N", "-L", "8265:h:8265", "-o", "StrictHostKeyChecking=no", "h"]


def test_an_ipv6_head_is_bracketed_in_the_tunnel():
    # ssh -L reads "port:host:port"; an IPv6 host without brackets would be split at its colons.
    hv = {"ansible_host": "203.0.113.7", "ray_node_ip": "fd00::5"}
    tunnel = dashboard_access("gpu-0", hv)[0]
    assert shlex.split(tunnel[len("Dashboard: ") :].split("   then open ")[0])[:4] == [
        "ssh",
        "-N",
        "-L",
        "8265:[fd00::5]:8265",
    ]
