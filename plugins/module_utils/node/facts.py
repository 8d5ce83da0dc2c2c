# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The few facts the Ray roles read, found the way ansible.builtin.setup finds them, without its collectors.

setup's network subset (with the min subset it always brings) costs a second Python start-up of its fact
framework on every node and ~60 facts that the controller copies for every later task; the roles read three.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

if TYPE_CHECKING:
    # run(argv) -> (rc, out, err)
    _Run = Callable[[list[str]], tuple[int, str, str]]

# The same probe setup uses for the default interface: a route lookup, no packet is sent.
ROUTE_PROBE = "8.8.8.8"
_ROUTE = re.compile(r"\bdev\s+(\S+)(?:.*?\bsrc\s+(\S+))?")
_INET = re.compile(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\d+\.\d+\.\d+\.\d+)/(\d+)")
_GATEWAY = re.compile(r"\bvia\s+(\d+\.\d+\.\d+\.\d+)")


def parse_route(text: str) -> tuple[str, str, str]:
    """``(interface, source address, gateway)`` from ``ip -4 route get``'s answer; empty strings when absent."""
    line = " ".join(text.split())
    match = _ROUTE.search(line)
    if not match:
        return "", "", ""
    gateway = _GATEWAY.search(line)
    return match.group(1), match.group(2) or "", gateway.group(1) if gateway else ""


def parse_addresses(text: str) -> list[tuple[str, str, int]]:
    """``[(interface, address, prefix)]`` from ``ip -4 -o addr show``, in its order."""
    out = []
    for line in text.splitlines():
        match = _INET.match(line.strip())
        if match:
            out.append((match.group(1), match.group(2), int(match.group(3))))
    return out


def default_ipv4(route_text: str, addresses: Iterable[tuple[str, str, int]]) -> dict[str, str]:
    """setup's ``default_ipv4`` shape (address, interface, gateway, prefix) for the interface of the default route,
    from ``ip -4 route get``'s answer and parse_addresses' list; {} when the node has no IPv4 route out."""
    interface, source, gateway = parse_route(route_text)
    if not interface:
        return {}
    on_interface = [(a, p) for i, a, p in addresses if i == interface]
    address, prefix = next(
        ((a, p) for a, p in on_interface if a == source), on_interface[0] if on_interface else (source, None)
    )
    if not address:
        return {}
    out = dict(address=address, interface=interface, alias=interface)
    if gateway:
        out["gateway"] = gateway
    if prefix is not None:
        out["prefix"] = str(prefix)
    return out


def local_fact(path: str) -> Any:
    """A JSON local fact as setup's ``local`` collector reads it; an unreadable one is reported, not fatal, like setup."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        return 'error loading fact - output of running "%s" was not utf-8 JSON: %s' % (path, exc)


def ip_runner(module: Any) -> _Run:
    """``run(argv)`` for node_facts: the node's ``ip`` through the module (rc 127 when it has none)."""
    ip = module.get_bin_path("ip", opt_dirs=["/sbin", "/usr/sbin"])

    def run(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command([ip] + argv[1:]) if ip else (127, "", "ip not found")

    return run


_LINK = re.compile(r"^\d+:\s+([^:@\s]+)(?:@\S+)?:\s+<([^>]*)>.*?\bmtu\s+(\d+)(?:.*?\bstate\s+(\S+))?")
_ROUTE_LINE = re.compile(r"^(?:(unicast|local|broadcast|blackhole|unreachable|prohibit|throw)\s+)?(\S+)(.*)$")


def parse_links(text: str) -> dict[str, dict[str, Any]]:
    """``{interface: {"mtu", "up"}}`` from ``ip -o link show``: up means administratively up with a carrier (LOWER_UP),
    or state UP/UNKNOWN (loopback, tunnels)."""
    out = {}
    for line in text.splitlines():
        match = _LINK.match(line.strip())
        if not match:
            continue
        flags = match.group(2).split(",")
        state = (match.group(4) or "").upper()
        up = "UP" in flags and ("LOWER_UP" in flags or state in ("UP", "UNKNOWN"))
        out[match.group(1)] = dict(mtu=int(match.group(3)), up=up)
    return out


def parse_routes(text: str) -> list[dict[str, Any]]:
    """``[{"dest", "dev", "src", "via", "metric"}]`` of the main table from ``ip -4 route show``: ``dest`` is a CIDR
    (``default`` becomes 0.0.0.0/0); routes that send nowhere (blackhole, unreachable, ...) are left out."""
    routes = []
    for line in text.splitlines():
        match = _ROUTE_LINE.match(line.strip())
        if not match or match.group(1) not in (None, "unicast"):
            continue
        dest, rest = match.group(2), match.group(3)
        words = rest.split()
        opts = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i] in ("dev", "src", "via", "metric")}
        if "dev" not in opts:
            continue
        dest = "0.0.0.0/0" if dest == "default" else dest if "/" in dest else dest + "/32"
        try:
            metric = int(opts.get("metric", 0))
        except ValueError:
            metric = 0
        routes.append(dict(dest=dest, dev=opts["dev"], src=opts.get("src", ""), via=opts.get("via", ""), metric=metric))
    return routes


def infiniband_ports(sysfs: str = "/sys/class/infiniband") -> list[dict[str, str]]:
    """``[{"hca", "port", "state", "link_layer"}]`` of the node's RDMA ports (InfiniBand or RoCE), from sysfs; [] without
    any."""
    out: list[dict[str, str]] = []
    try:
        hcas = sorted(os.listdir(sysfs))
    except OSError:
        return out
    for hca in hcas:
        ports_dir = os.path.join(sysfs, hca, "ports")
        try:
            ports = sorted(os.listdir(ports_dir), key=lambda p: (len(p), p))
        except OSError:
            continue
        for port in ports:

            def read(name, port=port, ports_dir=ports_dir):
                try:
                    with open(os.path.join(ports_dir, port, name), encoding="utf-8") as handle:
                        return handle.read().strip()
                except OSError:
                    return ""

            # state reads "4: ACTIVE"; link_layer "InfiniBand" or "Ethernet" (RoCE)
            out.append(
                dict(hca=hca, port=port, state=read("state").split(":")[-1].strip(), link_layer=read("link_layer"))
            )
    return out


IFF_UP = 0x1


def sysfs_links(names: Iterable[str], root: str = "/sys/class/net") -> dict[str, dict[str, Any]] | None:
    """``parse_links``' answer for the interfaces ``names``, read from sysfs (no process: this runs on every node of every
    re-run); None when sysfs cannot be read. Up: administratively up (flags) with a carrier, or operstate up/unknown."""
    out = {}
    for name in names:
        base = os.path.join(root, name)

        def read(attr, base=base):
            try:
                with open(os.path.join(base, attr), encoding="utf-8") as handle:
                    return handle.read().strip()
            except OSError:  # carrier cannot be read on a down interface
                return ""

        mtu, flags = read("mtu"), read("flags")
        if not mtu.isdigit() or not flags:
            return None
        try:
            admin_up = bool(int(flags, 16) & IFF_UP)
        except ValueError:
            return None
        out[name] = dict(
            mtu=int(mtu), up=admin_up and (read("carrier") == "1" or read("operstate") in ("up", "unknown"))
        )
    return out


def default_route_text(routes: Iterable[Mapping[str, Any]]) -> str:
    """``ip -4 route get``'s answer for the main table's default route (lowest metric) of ``parse_routes``' list: what
    default_ipv4 reads, without asking ``ip`` again; '' without a default route."""
    defaults = sorted((r for r in routes if r["dest"] == "0.0.0.0/0"), key=lambda r: r["metric"])
    if not defaults:
        return ""
    r = defaults[0]
    return " ".join(
        [ROUTE_PROBE]
        + (["via", r["via"]] if r["via"] else [])
        + ["dev", r["dev"]]
        + (["src", r["src"]] if r["src"] else [])
    )


def network(
    run: _Run,
    sysfs: str = "/sys/class/infiniband",
    addresses: Sequence[tuple[str, str, int]] | None = None,
    routes: list[dict[str, Any]] | None = None,
    netfs: str = "/sys/class/net",
) -> dict[str, Any]:
    """``ansible_rlinfra_net``: the interfaces (MTU, up), IPv4 addresses, main routes and RDMA ports, from which the
    controller chooses Ray's address and the interface collectives use (module_utils/ray/net.py)."""
    if routes is None:
        rc_route, text, dummy = run(["ip", "-4", "route", "show"])
        routes = parse_routes(text) if rc_route == 0 else []
    # Only interfaces with an IPv4 address can carry Ray or a collective (a docker host's hundreds of veths cannot).
    named = sorted({i for i, a, p in addresses or []})
    links = sysfs_links(named, netfs)
    if links is None:
        rc_link, text, dummy = run(["ip", "-o", "link", "show"])
        links = {k: v for k, v in (parse_links(text) if rc_link == 0 else {}).items() if k in named}
    return dict(
        links=links, addresses=[[i, a, p] for i, a, p in (addresses or [])], routes=routes, ib=infiniband_ports(sysfs)
    )


def node_facts(
    run: _Run, fact_dir: str, names: Iterable[str], sysfs: str = "/sys/class/infiniband", netfs: str = "/sys/class/net"
) -> dict[str, Any]:
    """The ``ansible_facts`` of M(rlinfra.verl.node_facts): ``run(argv) -> (rc, out, err)`` runs a command. Two
    processes (``ip`` for the addresses and the routes); the rest from sysfs."""
    rc_addr, addrs, dummy = run(["ip", "-4", "-o", "addr", "show"])
    addresses = parse_addresses(addrs) if rc_addr == 0 else []
    rc_route, text, dummy = run(["ip", "-4", "route", "show"])
    routes = parse_routes(text) if rc_route == 0 else []
    rc, route = (0, default_route_text(routes)) if rc_route == 0 else run(["ip", "-4", "route", "get", ROUTE_PROBE])[:2]
    local = {}
    for name in names:
        value = local_fact(os.path.join(fact_dir, name + ".fact"))
        if value is not None:
            local[name] = value
    # Named as setup names them: the controller makes ansible_facts.X and, by default, the variable ansible_X of each.
    return dict(
        ansible_default_ipv4=default_ipv4(route if rc == 0 else "", addresses),
        ansible_all_ipv4_addresses=[a for i, a, p in addresses if not a.startswith("127.")],
        ansible_rlinfra_net=network(run, sysfs, addresses, routes, netfs),
        ansible_local=local,
    )


def gather(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``node_facts`` module's result, for AnsibleModule or plain_module.PlainModule (``run_command``)."""
    return dict(changed=False, ansible_facts=node_facts(ip_runner(module), params["fact_dir"], params["local"]))
