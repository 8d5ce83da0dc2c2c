"""rlinfra.verl.node_facts: the addresses and the local fact site.yml reads, the same as ansible.builtin.setup's."""

from __future__ import annotations

import json
import subprocess

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.node import facts as nf
from ansible_collections.rlinfra.verl.plugins.modules import node_facts as node_facts_module

ROUTE = "8.8.8.8 via 10.1.0.1 dev ens5 src 10.1.2.3 uid 0 \n    cache \n"
ADDRS = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "2: ens5    inet 10.1.2.3/20 brd 10.1.15.255 scope global dynamic ens5\\       valid_lft 3000sec\n"
    "2: ens5    inet 10.1.9.9/20 scope global secondary ens5\\       valid_lft forever\n"
    "7: veth1@if6    inet 172.20.0.1/16 scope global veth1\\       valid_lft forever\n"
)


def real_run(argv):
    out = subprocess.run(argv, capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


def test_the_default_route_names_the_interface_its_address_and_gateway():
    assert nf.default_ipv4(ROUTE, nf.parse_addresses(ADDRS)) == dict(
        address="10.1.2.3", interface="ens5", alias="ens5", gateway="10.1.0.1", prefix="20"
    )


def test_without_a_source_the_interface_s_first_address_is_taken():
    assert nf.default_ipv4("8.8.8.8 dev ens5 uid 0", nf.parse_addresses(ADDRS))["address"] == "10.1.2.3"


def test_no_route_out_means_no_default_address():
    assert nf.default_ipv4("", nf.parse_addresses(ADDRS)) == {}
    assert nf.default_ipv4("RTNETLINK answers: Network is unreachable", nf.parse_addresses(ADDRS)) == {}


def test_every_address_but_loopback_in_order_with_peer_suffixes_dropped():
    assert [(i, a) for i, a, p in nf.parse_addresses(ADDRS)] == [
        ("lo", "127.0.0.1"),
        ("ens5", "10.1.2.3"),
        ("ens5", "10.1.9.9"),
        ("veth1", "172.20.0.1"),
    ]
    facts = nf.node_facts(lambda argv: (0, ROUTE if "route" in argv else ADDRS, ""), "/nonexistent", ["rlinfra_ray"])
    assert facts["ansible_all_ipv4_addresses"] == ["10.1.2.3", "10.1.9.9", "172.20.0.1"]
    assert facts["ansible_local"] == {}


def test_a_failing_ip_command_gives_empty_addresses_not_an_error():
    facts = nf.node_facts(lambda argv: (1, "", "boom"), "/nonexistent", [])
    assert facts["ansible_default_ipv4"] == {} and facts["ansible_all_ipv4_addresses"] == []


def test_local_facts_are_read_as_json_and_a_broken_one_is_reported(tmp_path):
    (tmp_path / "rlinfra_ray.fact").write_text(json.dumps({"role": "head", "node_ip": "10.0.0.5"}))
    (tmp_path / "other.fact").write_text("{half")
    facts = nf.node_facts(lambda argv: (1, "", ""), str(tmp_path), ["rlinfra_ray", "other", "absent"])
    assert facts["ansible_local"]["rlinfra_ray"] == {"role": "head", "node_ip": "10.0.0.5"}
    assert facts["ansible_local"]["other"].startswith("error loading fact") and "absent" not in facts["ansible_local"]


def test_this_machine_gives_what_ansible_s_own_network_collector_gives():
    from ansible.module_utils.facts.network.linux import LinuxNetwork

    class Module:
        def get_bin_path(self, name, **kw):
            import shutil

            return shutil.which(name) or shutil.which(name, path="/sbin:/usr/sbin")

        def run_command(self, args, **kw):
            if isinstance(args, str):
                args = ["sh", "-c", args]
            return real_run(args)

    if not Module().get_bin_path("ip"):
        pytest.fail("iproute2's ip is needed here (scripts/bootstrap.sh installs it)")
    theirs = LinuxNetwork(Module()).populate()
    ours = nf.node_facts(real_run, "/nonexistent", [])
    assert sorted(ours["ansible_all_ipv4_addresses"]) == sorted(
        theirs["all_ipv4_addresses"]
    )  # setup lists by /sys order
    expected = {
        k: theirs["default_ipv4"][k]
        for k in ("address", "interface", "gateway", "prefix")
        if k in theirs["default_ipv4"]
    }
    assert {k: v for k, v in ours["ansible_default_ipv4"].items() if k != "alias"} == expected


def test_the_module_sets_facts_and_changes_nothing(module_runner, tmp_path):
    (tmp_path / "rlinfra_ray.fact").write_text(json.dumps({"role": "worker"}))
    result = module_runner(node_facts_module.main, {"fact_dir": str(tmp_path)}, check_mode=True)
    assert result["changed"] is False
    assert result["ansible_facts"]["ansible_local"] == {"rlinfra_ray": {"role": "worker"}}
    assert "address" in result["ansible_facts"]["ansible_default_ipv4"]


@pytest.mark.parametrize(
    "args,expected",
    [
        (
            {"local": ["../../etc/shadow"]},
            "local[0] must be a name of letters, digits, _ . - (starting with a letter or digit, at most 80), got "
            "'../../etc/shadow'",
        ),
        ({"fact_dir": "facts.d"}, "fact_dir must be an absolute path (starting with /), got 'facts.d'"),
    ],
)
def test_the_module_reads_facts_by_name_only(args, expected, module_runner):
    result = module_runner(node_facts_module.main, args)
    assert result["failed"] is True and result["msg"] == expected and "ansible_facts" not in result
