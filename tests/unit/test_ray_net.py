"""Ray's address and the collectives' interface on multi-homed nodes (module_utils/ray/net.py, filters ray_address and
ray_net, node_facts' network reading), on the outputs of the real ``ip`` commands as the sandbox's nodes print them:
a head and a worker on one private network, a second worker whose default route moved to a second network (as
``docker network connect`` does it), a third whose interface was renamed ens5."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.filter.ray_firewall import ray_firewall_members
from ansible_collections.rlinfra.verl.plugins.filter.ray_net import ray_address, ray_net
from ansible_collections.rlinfra.verl.plugins.module_utils.node import facts as node_facts
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import net as N

LINKS_2NIC = """1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
2: eth0@if41: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default \\    link/ether 02:42:ac:13:00:03 brd ff:ff:ff:ff:ff:ff link-netnsid 0
3: eth1@if45: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default \\    link/ether 02:42:ac:14:00:02 brd ff:ff:ff:ff:ff:ff link-netnsid 0
4: eth2: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:12:34:56 brd ff:ff:ff:ff:ff:ff
"""
ADDRS_2NIC = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: eth0    inet 172.19.0.3/16 brd 172.19.255.255 scope global eth0\\       valid_lft forever preferred_lft forever
3: eth1    inet 172.20.0.2/16 brd 172.20.255.255 scope global eth1\\       valid_lft forever preferred_lft forever
4: eth2    inet 10.9.0.2/24 scope global eth2\\       valid_lft forever preferred_lft forever
"""
ROUTES_2NIC = """default via 172.20.0.1 dev eth1
172.19.0.0/16 dev eth0 proto kernel scope link src 172.19.0.3
172.20.0.0/16 dev eth1 proto kernel scope link src 172.20.0.2
blackhole 10.66.0.0/16
10.9.0.0/24 dev eth2 proto kernel scope link src 10.9.0.2 linkdown
"""


def net(links, addrs, routes, ib=()):
    addresses = node_facts.parse_addresses(addrs)
    named = {i for i, a, p in addresses}
    return dict(
        links={k: v for k, v in node_facts.parse_links(links).items() if k in named},
        addresses=[[i, a, p] for i, a, p in addresses],
        routes=node_facts.parse_routes(routes),
        ib=list(ib),
    )


def simple(ifname, address, prefix=16, mtu=1500, gateway="", up=True):
    network = "%s/%d" % (address.rsplit(".", 2)[0] + ".0.0", prefix)
    routes = [dict(dest=network, dev=ifname, src=address, via="", metric=0)]
    if gateway:
        routes.append(dict(dest="0.0.0.0/0", dev=ifname, src="", via=gateway, metric=0))
    return dict(links={ifname: dict(mtu=mtu, up=up)}, addresses=[[ifname, address, prefix]], routes=routes, ib=[])


HEAD = simple("eth0", "172.19.0.2", gateway="172.19.0.1")
TWO_NIC = net(LINKS_2NIC, ADDRS_2NIC, ROUTES_2NIC)
RENAMED = simple("ens5", "172.19.0.4")


def test_the_ip_outputs_are_read_as_the_kernel_has_them():
    assert node_facts.parse_links(LINKS_2NIC) == {
        "lo": dict(mtu=65536, up=True),
        "eth0": dict(mtu=1500, up=True),
        "eth1": dict(mtu=1500, up=True),
        "eth2": dict(mtu=1500, up=False),
    }
    assert node_facts.parse_routes(ROUTES_2NIC) == [
        dict(dest="0.0.0.0/0", dev="eth1", src="", via="172.20.0.1", metric=0),
        dict(dest="172.19.0.0/16", dev="eth0", src="172.19.0.3", via="", metric=0),
        dict(dest="172.20.0.0/16", dev="eth1", src="172.20.0.2", via="", metric=0),
        dict(dest="10.9.0.0/24", dev="eth2", src="10.9.0.2", via="", metric=0),
    ]
    assert TWO_NIC["addresses"] == [
        ["lo", "127.0.0.1", 8],
        ["eth0", "172.19.0.3", 16],
        ["eth1", "172.20.0.2", 16],
        ["eth2", "10.9.0.2", 24],
    ]


def test_the_route_to_the_head_decides_not_the_default_route():
    assert N.route_get(TWO_NIC, "172.19.0.2") == ("eth0", "172.19.0.3")
    assert N.route_get(TWO_NIC, "8.8.8.8") == ("eth1", "172.20.0.2")
    assert N.route_get(TWO_NIC, "10.9.0.7") == ("eth1", "172.20.0.2")  # eth2 is down: the default route, as the kernel
    assert N.route_get(RENAMED, "172.19.0.2") == ("ens5", "172.19.0.4")
    assert N.route_get(simple("eth0", "10.1.0.5", prefix=24), "172.19.0.2") == ("", "")


def test_the_head_advertises_the_network_it_shares_with_its_members():
    public_private = dict(
        links={"eth0": dict(mtu=1500, up=True), "ens6": dict(mtu=9000, up=True)},
        addresses=[["eth0", "203.0.113.10", 24], ["ens6", "10.0.0.5", 24]],
        routes=[
            dict(dest="0.0.0.0/0", dev="eth0", src="", via="203.0.113.1", metric=0),
            dict(dest="10.0.0.0/24", dev="ens6", src="10.0.0.5", via="", metric=0),
        ],
        ib=[],
    )
    members = [simple("ens6", "10.0.0.6", prefix=24), simple("ens6", "10.0.0.7", prefix=24)]
    assert N.head_address(public_private, members, "203.0.113.10", "203.0.113.10") == (
        "10.0.0.5",
        "on ens6, the network it shares with 2 member(s)",
    )
    # no shared network (routed members): the inventory's address when it is the head's own, else the default route's
    far = [simple("eth0", "10.8.0.6", prefix=24)]
    assert N.head_address(public_private, far, "10.0.0.5", "203.0.113.10")[0] == "10.0.0.5"
    assert N.head_address(public_private, far, "head.example", "203.0.113.10")[0] == "203.0.113.10"


def hostvars_for(**nets):
    return {
        h: {"ansible_rlinfra_net": n, "ansible_default_ipv4": {"address": n["addresses"][0][1]}, "ansible_host": h}
        for h, n in nets.items()
    }


GROUPS = {"ray_head": ["h0"], "ray_workers": ["w1", "w2"]}


def test_each_node_gets_its_address_and_interface_and_the_firewall_admits_exactly_those():
    hv = hostvars_for(h0=HEAD, w1=TWO_NIC, w2=RENAMED)
    assert [ray_address(h, hv, GROUPS) for h in ("h0", "w1", "w2")] == ["172.19.0.2", "172.19.0.3", "172.19.0.4"]
    assert ray_firewall_members(["h0", "w1", "w2"], hv, GROUPS) == [
        {"host": "h0", "address": "172.19.0.2"},
        {"host": "w1", "address": "172.19.0.3"},
        {"host": "w2", "address": "172.19.0.4"},
    ]
    # without the cluster (old callers): the default route's, which is the wrong one on w1
    assert ray_firewall_members(["w1"], {"w1": {"ansible_default_ipv4": {"address": "172.20.0.2"}}}) == [
        {"host": "w1", "address": "172.20.0.2"}
    ]
    w1 = ray_net("w1", hv, GROUPS, "172.19.0.3")
    assert (w1["ifname"], w1["head_ip"], w1["problems"]) == ("eth0", "172.19.0.2", [])
    assert w1["env"] == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0"}
    assert ray_net("w2", hv, GROUPS, "172.19.0.4")["env"]["GLOO_SOCKET_IFNAME"] == "ens5"
    assert ray_net("h0", hv, GROUPS, "172.19.0.2")["env"]["NCCL_SOCKET_IFNAME"] == "=eth0"
    # an address set by hand wins (ray_node_ip set by this run, or ray_private_ip in the inventory)
    hv["w1"]["ray_private_ip"] = "172.20.0.2"
    assert ray_address("w1", hv, GROUPS) == "172.20.0.2"


def test_ray_env_wins_and_a_user_value_is_checked_on_every_node():
    hv = hostvars_for(h0=HEAD, w1=TWO_NIC, w2=RENAMED)
    mine = ray_net("w1", hv, GROUPS, "172.19.0.3", "auto", {"NCCL_SOCKET_IFNAME": "eth0", "GLOO_SOCKET_IFNAME": "eth0"})
    assert mine["env"] == {"TP_SOCKET_IFNAME": "eth0"} and mine["problems"] == []
    prefix = ray_net("w2", hv, GROUPS, "172.19.0.4", "ens,eth")
    assert prefix["env"] == {"NCCL_SOCKET_IFNAME": "ens,eth", "GLOO_SOCKET_IFNAME": "ens5", "TP_SOCKET_IFNAME": "ens5"}
    assert ray_net("w1", hv, GROUPS, "172.19.0.3", "^eth1,eth2")["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    wrong = ray_net("w1", hv, GROUPS, "172.19.0.3", "eth1")
    assert wrong["problems"] == [
        "w1: ray_net_ifname 'eth1' matches no up interface with an IPv4 address that reaches the head 172.19.0.2 "
        "(eth0 up 172.19.0.3/16 (reaches the head); eth1 up 172.20.0.2/16; eth2 down 10.9.0.2/24): set it to one that "
        "does, or to auto"
    ]
    assert ray_net("w2", hv, GROUPS, "172.19.0.4", "eth")["problems"][0].startswith(
        "w2: ray_net_ifname 'eth' matches no"
    )
    env_wrong = ray_net("w2", hv, GROUPS, "172.19.0.4", "auto", {"NCCL_SOCKET_IFNAME": "ib0"})
    assert env_wrong["problems"][0].startswith("w2: ray_env's NCCL_SOCKET_IFNAME 'ib0' matches no up interface")
    assert ray_net("w1", hv, GROUPS, "172.19.0.3", "none")["env"] == {}


def test_a_node_without_a_route_to_its_head_is_one_line():
    hv = hostvars_for(h0=HEAD, w1=TWO_NIC, w2=simple("eth0", "10.1.0.5", prefix=24))
    plan = ray_net("w2", hv, GROUPS, "10.1.0.5")
    assert plan["problems"] == [
        "w2 has no route to its head's address 172.19.0.2: give it an address on the head's network, or set "
        "ray_private_ip on the head to an address this node reaches (this node: eth0 up 10.1.0.5/24)"
    ]
    mine = ray_net("w1", hv, GROUPS, "10.9.9.9")
    assert mine["problems"][0].startswith("w1: ray_private_ip 10.9.9.9 is not an address of this node")


def test_mtu_differences_are_named_once_by_the_head():
    hv = hostvars_for(h0=HEAD, w1=TWO_NIC, w2=simple("ens5", "172.19.0.4", mtu=9000))
    problems = ray_net("h0", hv, GROUPS, "172.19.0.2")["problems"]
    assert problems == [
        "cluster default: the interfaces its collectives use differ in MTU (h0 eth0 1500, w1 eth0 1500, "
        "w2 ens5 9000): NCCL hangs or crawls on a mismatch; set one MTU on them (ip link set DEV mtu N) or "
        "choose others with ray_net_ifname"
    ]
    assert ray_net("w2", hv, GROUPS, "172.19.0.4")["problems"] == []


def test_active_rdma_ports_are_offered_as_nccl_ib_hca(tmp_path):
    for hca, port, state, layer in (
        ("mlx5_0", "1", "4: ACTIVE", "InfiniBand"),
        ("mlx5_1", "1", "1: DOWN", "InfiniBand"),
        ("mlx5_2", "1", "4: ACTIVE", "Ethernet"),
    ):
        d = tmp_path / hca / "ports" / port
        d.mkdir(parents=True)
        (d / "state").write_text(state + "\n")
        (d / "link_layer").write_text(layer + "\n")
    ports = node_facts.infiniband_ports(str(tmp_path))
    assert ports == [
        dict(hca="mlx5_0", port="1", state="ACTIVE", link_layer="InfiniBand"),
        dict(hca="mlx5_1", port="1", state="DOWN", link_layer="InfiniBand"),
        dict(hca="mlx5_2", port="1", state="ACTIVE", link_layer="Ethernet"),
    ]
    assert node_facts.infiniband_ports(str(tmp_path / "none")) == []
    hv = hostvars_for(h0=HEAD, w1=dict(TWO_NIC, ib=ports), w2=RENAMED)
    assert ray_net("w1", hv, GROUPS, "172.19.0.3")["env"]["NCCL_IB_HCA"] == "mlx5_0:1,mlx5_2:1"
    assert "NCCL_IB_HCA" not in ray_net("w1", hv, GROUPS, "172.19.0.3", "auto", {"NCCL_IB_HCA": "mlx5_0"})["env"]


def test_without_network_facts_the_old_rule_stands():
    hv = {
        "h0": {"ansible_default_ipv4": {"address": "10.0.0.5"}},
        "w1": {"ansible_all_ipv4_addresses": ["127.0.0.1", "10.0.0.6"]},
        "w2": {"ansible_local": {"rlinfra_ray": {"node_ip": "10.0.0.7"}}},
    }
    assert [ray_address(h, hv, GROUPS) for h in ("h0", "w1", "w2")] == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
    assert ray_net("w1", hv, GROUPS, "10.0.0.6") == dict(
        ip="10.0.0.6", ifname="", env={}, problems=[], known=False, head="h0", head_ip="10.0.0.5"
    )


def test_node_facts_carry_the_network(tmp_path):
    outputs = {
        (
            "ip",
            "-4",
            "route",
            "get",
            node_facts.ROUTE_PROBE,
        ): "8.8.8.8 via 172.20.0.1 dev eth1 src 172.20.0.2 uid 0\n    cache",
        ("ip", "-4", "-o", "addr", "show"): ADDRS_2NIC,
        ("ip", "-o", "link", "show"): LINKS_2NIC,
        ("ip", "-4", "route", "show"): ROUTES_2NIC,
    }
    asked = []

    def run(argv):
        asked.append(tuple(argv))
        return 0, outputs[tuple(argv)], ""

    # no sysfs here: the links come from ``ip -o link show``
    facts = node_facts.node_facts(run, str(tmp_path), [], sysfs=str(tmp_path / "ib"), netfs=str(tmp_path / "net"))
    assert facts["ansible_default_ipv4"]["interface"] == "eth1"
    assert facts["ansible_rlinfra_net"] == TWO_NIC
    assert ("ip", "-4", "route", "get", node_facts.ROUTE_PROBE) not in asked  # the default route is read from the table
    # with sysfs (as on every Linux node): the same links, one process fewer
    for name, (mtu, flags, carrier, state) in {
        "eth0": ("1500", "0x1003", "1", "up"),
        "eth1": ("1500", "0x1003", "1", "up"),
        "eth2": ("1500", "0x1002", "", "down"),
        "lo": ("65536", "0x9", "", "unknown"),
    }.items():
        d = tmp_path / "net" / name
        d.mkdir(parents=True)
        for attr, value in (("mtu", mtu), ("flags", flags), ("carrier", carrier), ("operstate", state)):
            if value:
                (d / attr).write_text(value + "\n")
    asked.clear()
    again = node_facts.node_facts(run, str(tmp_path), [], sysfs=str(tmp_path / "ib"), netfs=str(tmp_path / "net"))
    assert again == facts and len(asked) == 2
    (tmp_path / "net" / "eth1" / "flags").write_text("0x1002\n")  # administratively down
    assert node_facts.sysfs_links(["eth1"], str(tmp_path / "net")) == {"eth1": {"mtu": 1500, "up": False}}
