"""Which ports and addresses the Ray firewall lets through, and the nftables script it writes
(module_utils/ray/firewall.py, filter ray_firewall_members, module rlinfra.verl.ray_firewall)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.filter.ray_firewall import ray_firewall_members
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import firewall
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import nft as ray_nft
from ansible_collections.rlinfra.verl.plugins.modules import ray_firewall

PORTS = {
    "gcs": 6379,
    "dashboard": "8265",
    "node_manager": 6380,
    "object_manager": 6381,
    "workers": "10002-19999",
    "client_server": 10001,
    "agent_listen": 52365,
}
MEMBERS = [{"host": "head", "address": "10.0.0.5"}, {"host": "w1", "address": "10.0.0.6"}]


# --- ports ----------------------------------------------------------------------------------------------


def test_ports_are_checked_and_merged():
    by_name, merged = firewall.ray_ports(PORTS)
    assert by_name["workers"] == (10002, 19999) and by_name["dashboard"] == (8265, 8265)
    assert merged == [(6379, 6381), (8265, 8265), (10001, 19999), (52365, 52365)]


@pytest.mark.parametrize("value", ["abc", "0", "70000", "20-10", True, None, 1.5, "1-2-3", ""])
def test_a_bad_port_is_one_line_naming_it(value):
    with pytest.raises(firewall.FirewallError) as err:
        firewall.ray_ports({"gcs": value})
    assert "port gcs" in str(err.value) and "\n" not in str(err.value)


def test_a_fixed_port_inside_the_worker_range_is_refused():
    with pytest.raises(firewall.FirewallError, match="overlap: workers .*metrics"):
        firewall.ray_ports({"workers": "10002-19999", "metrics": 12000})


@pytest.mark.parametrize("protected", [(22,), (22, 2222)])
def test_ssh_is_never_a_ray_port(protected):
    with pytest.raises(firewall.FirewallError, match="SSH port %d" % protected[-1]):
        firewall.ray_ports({"workers": "%d-%d" % (protected[-1] - 1, protected[-1] + 1)}, protected=protected)


def test_no_ports_is_an_error():
    with pytest.raises(firewall.FirewallError):
        firewall.ray_ports({})


# --- addresses ------------------------------------------------------------------------------------------


def test_members_controller_and_extra_are_allowed():
    v4, v6, origin = firewall.allowed_sources(MEMBERS, "172.18.0.1", ["192.168.7.0/24", "fd00::/64", "10.0.0.5"])
    assert v4 == ["10.0.0.5", "10.0.0.6", "172.18.0.1", "192.168.7.0/24"]
    assert v6 == ["fd00::/64"]
    assert origin["10.0.0.5"] == "member head" and origin["172.18.0.1"] == "controller"


def test_an_ipv4_mapped_network_keeps_its_prefix():
    """::ffff:10.0.0.0/104 is 10.0.0.0/8 as nftables sees its (IPv4) packets; it became 10.0.0.0/32 before."""
    v4, v6, _ = firewall.allowed_sources([{"host": "a", "address": "::ffff:10.1.0.4"}], "", ["::ffff:192.168.7.0/120"])
    assert v4 == ["10.1.0.4", "192.168.7.0/24"] and v6 == []


def test_neighbouring_addresses_collapse():
    v4, _, _ = firewall.allowed_sources([{"host": "a", "address": "10.0.0.4"}, {"host": "b", "address": "10.0.0.5"}])
    assert v4 == ["10.0.0.4/31"]


def test_a_member_without_address_fails_naming_it():
    with pytest.raises(firewall.FirewallError, match="member.*w2 is unknown.*--limit"):
        firewall.allowed_sources(MEMBERS + [{"host": "w2", "address": ""}])


def test_a_bad_address_fails_naming_where_it_came_from():
    with pytest.raises(firewall.FirewallError, match="ray_firewall_allow: 'nope'"):
        firewall.allowed_sources(MEMBERS, "", ["nope"])


@pytest.mark.parametrize(
    "raw, want",
    [
        ("172.18.0.1 40022 172.18.0.2 22", "172.18.0.1"),
        ("fe80::1 4 fe80::2 22", "fe80::1"),
        ("", ""),
        ("garbage 1 2 3", ""),
    ],
)
def test_controller_from_ssh_connection(raw, want):
    assert firewall.controller_address(raw) == want


@pytest.mark.parametrize(
    "hv, want",
    [
        ({"ray_node_ip": "10.1.1.1", "ray_private_ip": "10.2.2.2"}, "10.1.1.1"),
        ({"ray_private_ip": "10.2.2.2", "ansible_default_ipv4": {"address": "10.3.3.3"}}, "10.2.2.2"),
        ({"ansible_default_ipv4": {"address": "10.3.3.3"}}, "10.3.3.3"),
        ({"ansible_default_ipv4": {}, "ansible_all_ipv4_addresses": ["127.0.0.1", "10.4.4.4"]}, "10.4.4.4"),
        ({"ansible_local": {"rlinfra_ray": {"node_ip": "10.5.5.5"}}, "ansible_host": "1.2.3.4"}, "10.5.5.5"),
        ({"ansible_host": "10.6.6.6"}, "10.6.6.6"),
        ({"ansible_host": "gpu-1.example"}, ""),
        ({}, ""),
    ],
)
def test_member_address_follows_the_roles(hv, want):
    assert firewall.member_address(hv) == want


def test_members_filter_keeps_order_and_unknown_hosts():
    hostvars = {"b": {"ray_private_ip": "10.0.0.2"}, "a": {"ansible_default_ipv4": {"address": "10.0.0.1"}}}
    assert ray_firewall_members(["b", "a", "c"], hostvars) == [
        {"host": "b", "address": "10.0.0.2"},
        {"host": "a", "address": "10.0.0.1"},
        {"host": "c", "address": ""},
    ]


# --- the script -----------------------------------------------------------------------------------------


def rules(v6=()):
    _, merged = firewall.ray_ports(PORTS)
    v4, v6s, _ = firewall.allowed_sources(MEMBERS, "172.18.0.1", list(v6))
    return firewall.render(merged, v4, v6s)


def test_script_replaces_only_its_own_table():
    text = rules()
    lines = text.splitlines()
    assert lines[2:5] == ["table inet rlinfra_ray", "delete table inet rlinfra_ray", "table inet rlinfra_ray {"]
    assert "flush ruleset" not in text and text.count("table ") == 3
    assert "elements = { 6379-6381, 8265, 10001-19999, 52365 }" in text
    assert "elements = { 10.0.0.5, 10.0.0.6, 172.18.0.1 }" in text
    # Only Ray's ports are judged; loopback and established traffic pass; the rest of a Ray port's traffic drops.
    chain = text[text.index("chain input") :]
    order = [
        'iif "lo" accept',
        "th dport != @ray_ports accept",
        "ct state established,related accept",
        "ip saddr @allowed_v4 accept",
        "ip6 saddr @allowed_v6 accept",
        "counter drop",
    ]
    assert [chain.index(o) for o in order] == sorted(chain.index(o) for o in order)
    assert "policy accept" in chain


def test_script_is_stable():
    assert rules() == rules()


def test_bad_table_name_is_refused():
    with pytest.raises(firewall.FirewallError):
        firewall.render([(1, 2)], [], [], table="x; flush ruleset")


@pytest.mark.skipif(not shutil.which("nft"), reason="no nft here (scripts/bootstrap.sh installs nftables)")
def test_nft_accepts_the_script(tmp_path):
    path = tmp_path / "r.nft"
    path.write_text(rules(["fd00::/64"]))
    proc = subprocess.run(["nft", "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0 and ("Operation not permitted" in proc.stderr or "cache" in proc.stderr.lower()):
        pytest.skip("nft -c needs CAP_NET_ADMIN here: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr


@pytest.mark.skipif(not (shutil.which("nft") and shutil.which("unshare")), reason="no nft/unshare here")
def test_a_changed_shape_replaces_the_live_table(tmp_path):
    """The kernel really applies one script over another whose interval sets changed shape (a port range moved,
    three addresses became a /31 and one more): ``flush table`` kept the old elements and failed "File exists"."""
    first, second = tmp_path / "a.nft", tmp_path / "b.nft"
    _, merged = firewall.ray_ports(PORTS)
    first.write_text(firewall.render(merged, ["172.25.0.1", "172.25.0.2", "172.25.0.3"], []))
    moved = [(lo + 1 if lo == 10001 else lo, hi) for lo, hi in merged]
    second.write_text(firewall.render(moved, ["172.25.0.1", "172.25.0.2/31", "172.25.0.4"], []))
    script = "nft -f %s && nft -f %s && nft -f %s && nft list table inet rlinfra_ray" % (first, second, second)
    proc = subprocess.run(["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, check=False)
    if proc.returncode != 0 and "Operation not permitted" in proc.stderr:
        pytest.skip("needs CAP_SYS_ADMIN for a network namespace: " + proc.stderr.strip())
    assert proc.returncode == 0, proc.stderr
    assert "10002-19999" in proc.stdout and "172.25.0.4" in proc.stdout and "172.25.0.3," not in proc.stdout


# --- the module, over a fake nft ------------------------------------------------------------------------


class FakeNft(ray_nft.Nft):
    """nft as the module drives it: a live table that ``-f FILE`` replaces and ``delete table`` removes."""

    live = None
    works = True
    calls = []

    def __init__(self, module):
        self.module, self.path = module, "/usr/sbin/nft"

    def run(self, *args):
        FakeNft.calls.append(args)
        if args[:2] == ("list", "tables"):
            return (0, "", "") if FakeNft.works else (1, "", "Error: Operation not permitted\n")
        if args[:3] == ("-s", "list", "table"):
            return (0, FakeNft.live, "") if FakeNft.live is not None else (1, "", "No such file or directory")
        if args[0] == "-c":
            return 0, "", ""
        if args[0] == "-f":
            with open(args[1]) as handle:
                FakeNft.live = handle.read()
            return 0, "", ""
        if args[0] == "delete":
            FakeNft.live = None
            return 0, "", ""
        raise AssertionError(args)


@pytest.fixture
def fw_module(tmp_path, module_runner, monkeypatch):
    monkeypatch.setattr(ray_nft, "Nft", FakeNft)
    FakeNft.live, FakeNft.works, FakeNft.calls = None, True, []
    path = tmp_path / "etc" / "rlinfra-firewall.nft"

    def run(check_mode=False, **options):
        args = dict(ports=PORTS, members=MEMBERS, ssh_connection="172.18.0.1 40022 10.0.0.5 22", path=str(path))
        args.update(options)
        return module_runner(ray_firewall.main, args, check_mode=check_mode)

    run.path = path
    return run


def test_module_applies_once_then_changes_nothing(fw_module):
    dry = fw_module(check_mode=True)
    assert dry["changed"] and dry["active"] and not fw_module.path.exists() and FakeNft.live is None
    first = fw_module()
    assert first["changed"] and first["controller"] == "172.18.0.1"
    assert first["ports"] == ["6379-6381", "8265", "10001-19999", "52365"]
    assert oct(fw_module.path.stat().st_mode & 0o777) == "0o600" and FakeNft.live == fw_module.path.read_text()
    assert fw_module()["changed"] is False
    FakeNft.live = "table inet rlinfra_ray {}\n"  # flushed or edited by hand: applied again
    assert fw_module()["changed"] is True and FakeNft.live == fw_module.path.read_text()
    assert fw_module(allow=["192.168.0.0/16"])["changed"] is True


def test_module_warns_and_skips_without_nftables(fw_module):
    FakeNft.works = False
    result = fw_module()
    assert result["active"] is False and result["changed"] is False and not fw_module.path.exists()
    warned = json.dumps(result.get("warnings"))
    assert "NOT filtered" in warned and "Operation not permitted" in warned, result


def test_module_fails_in_one_line_on_bad_input(fw_module):
    result = fw_module(members=MEMBERS + [{"host": "w9"}])
    assert result["failed"] and "w9" in result["msg"] and "\n" not in result["msg"]
    assert fw_module(protected_ports=[10500])["msg"].count("SSH port 10500") == 1


@pytest.mark.parametrize("world", ["0.0.0.0/0", "::/0", "0.0.0.0/1", "0.0.0.0/0.0.0.0", "128.0.0.0/2"])
def test_module_refuses_a_world_open_allow_unless_allow_world(fw_module, world):
    refused = fw_module(allow=["192.168.0.0/16", world])
    assert refused["failed"] is True and refused["changed"] is False and FakeNft.calls == []
    assert refused["msg"].startswith("allow[1] must be a network narrower than /") and "\n" not in refused["msg"]
    assert "(set allow_world: true if that is really meant)" in refused["msg"] and not fw_module.path.exists()
    opened = fw_module(allow=["192.168.0.0/16", world], allow_world=True)
    assert opened.get("failed") is not True and opened["changed"] is True
    # Private networks, however wide, and narrower public ones need no switch.
    assert fw_module(allow=["10.0.0.0/8", "fd00::/8", "100.64.0.0/10", "8.8.8.0/24"]).get("failed") is not True


def test_module_needs_ports_with_state_present(fw_module):
    res = fw_module(ports=None)
    assert res["failed"] is True and res["msg"].startswith("ports must be given with state=present")


def test_module_absent_removes_table_and_files(fw_module):
    fw_module()
    gone = fw_module(state="absent")
    assert gone["changed"] and FakeNft.live is None and not fw_module.path.exists()
    assert fw_module(state="absent")["changed"] is False
