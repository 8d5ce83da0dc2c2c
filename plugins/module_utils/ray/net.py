# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Ray's address and the interface collectives use, per node, on multi-homed machines.

A rented machine often has two networks: a public one that carries the default route and a private one shared with
the other nodes. Ray must advertise the address its head reaches, and NCCL/Gloo must use the interface that carries
the traffic to the other nodes; the default route's interface is neither. Everything here is decided on the
controller from each node's ``ansible_rlinfra_net`` (module_utils/node/facts.py: interfaces with MTU and state, IPv4
addresses, the main routing table, RDMA ports), the way the node's kernel would decide:

* the head's address: the one on a network shared with the most members (a private one first, then the inventory's
  ``ansible_host``, then the default route's); without a shared network, ``ansible_host`` when it is the head's own
  address, else the default route's;
* a member's address and interface: those of its route to the head's address (``ip route get``'s longest prefix,
  then lowest metric), never merely the default route's;
* ``ray_net_ifname: auto``: that interface, exported as NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME
  (and the active RDMA ports as NCCL_IB_HCA) unless ``ray_env`` sets them; a value given by the user (NCCL's syntax:
  comma-separated prefixes, ``^`` to exclude, ``=`` for exact names) must match, on every node, an up interface with
  an IPv4 address whose route reaches the head.

Every problem is one line naming the node and what to set; nothing is guessed.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

ENV_NAMES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
IB_ENV = "NCCL_IB_HCA"
OFF = "none"


def _ip(text):
    try:
        return ipaddress.ip_address(str(text))
    except ValueError:
        return None


def _addresses(net):
    return [(i, a, int(p)) for i, a, p in (net or {}).get("addresses") or [] if _ip(a) and not _ip(a).is_loopback]


def _up(net, dev):
    link = ((net or {}).get("links") or {}).get(dev)
    return True if link is None else bool(link.get("up"))


def routes_to(net: Mapping[str, Any] | None, dest: str) -> list[dict[str, Any]]:
    """The node's routes that match ``dest``, best first (longest prefix, then lowest metric)."""
    target = _ip(dest)
    found = []
    for route in (net or {}).get("routes") or []:
        try:
            network = ipaddress.ip_network(route["dest"], strict=False)
        except (ValueError, KeyError):
            continue
        if target is not None and target.version == network.version and target in network:
            found.append((-network.prefixlen, route.get("metric") or 0, route))
    return [r for dummy, dummy2, r in sorted(found, key=lambda x: (x[0], x[1]))]


def source_on(net: Mapping[str, Any] | None, dev: str, dest: str, gateway: str = "") -> str:
    """The address a route out of ``dev`` to ``dest`` leaves from: one on the same network as the destination or the
    gateway, else the interface's first address."""
    own = [(a, p) for i, a, p in _addresses(net) if i == dev]
    for target in (dest, gateway):
        t = _ip(target)
        for address, prefix in own:
            if t is not None and t in ipaddress.ip_network("%s/%d" % (address, prefix), strict=False):
                return address
    return own[0][0] if own else ""


def route_get(net: Mapping[str, Any] | None, dest: str) -> tuple[str, str]:
    """``(interface, source address)`` of the route the node would take to ``dest``; ('', '') without one."""
    for route in routes_to(net, dest):
        if not _up(net, route["dev"]):
            continue
        return route["dev"], route.get("src") or source_on(net, route["dev"], dest, route.get("via", ""))
    return "", ""


def interface_of(net: Mapping[str, Any] | None, address: str) -> str:
    return next((i for i, a, p in _addresses(net) if a == address), "")


def _shared(address, prefix, other_nets):
    network = ipaddress.ip_network("%s/%d" % (address, prefix), strict=False)
    return sum(1 for other in other_nets if any(_ip(a) in network for dummy, a, dummy2 in _addresses(other)))


def head_address(
    head_net: Mapping[str, Any] | None,
    member_nets: Sequence[Mapping[str, Any]],
    ansible_host: str = "",
    default_ip: str = "",
) -> tuple[str, str]:
    """The address the head advertises, and why (a phrase)."""
    candidates = [(i, a, p) for i, a, p in _addresses(head_net) if _up(head_net, i)]
    if not candidates:
        return default_ip or "", "the default route's (no other address known)"
    scored = []
    for dev, address, prefix in candidates:
        shared = _shared(address, prefix, member_nets) if member_nets else 0
        scored.append(((shared, address == ansible_host, _ip(address).is_private, address == default_ip), dev, address))
    scored.sort(key=lambda s: s[0], reverse=True)
    best = scored[0]
    if best[0][0] > 0:
        return best[2], "on %s, the network it shares with %d member(s)" % (best[1], best[0][0])
    if ansible_host and any(a == ansible_host for dummy, a, dummy2 in candidates):
        return ansible_host, "its inventory address (no network shared with the members)"
    if default_ip:
        return default_ip, "the default route's (no network shared with the members)"
    return best[2], "its first address"


def parse_spec(spec: object) -> tuple[bool, bool, list[str]]:
    """NCCL_SOCKET_IFNAME's syntax: ``(exclude, exact, [names])``."""
    text = str(spec).strip()
    exclude = text.startswith("^")
    text = text[1:] if exclude else text
    exact = text.startswith("=")
    text = text[1:] if exact else text
    return exclude, exact, [n.strip() for n in text.split(",") if n.strip()]


def spec_matches(spec: object, dev: str) -> bool:
    exclude, exact, names = parse_spec(spec)
    hit = any((dev == n) if exact else dev.startswith(n) for n in names)
    return not hit if exclude else hit


def reaching(net: Mapping[str, Any] | None, dest: str) -> list[str]:
    """The interfaces (up, with an IPv4 address) that have a route to ``dest``: a route for its network (a default
    route proves nothing where one exists), else the default route."""
    devs = []
    found = [r for r in routes_to(net, dest) if _up(net, r["dev"])]
    specific = [r for r in found if not r["dest"].endswith("/0")]
    for route in specific or found:
        dev = route["dev"]
        if _up(net, dev) and any(i == dev for i, dummy, dummy2 in _addresses(net)) and dev not in devs:
            devs.append(dev)
    return devs


def describe(net: Mapping[str, Any] | None, head_ip: str) -> str:
    """The node's interfaces in a few words, for a line that asks the user to choose."""
    reach = set(reaching(net, head_ip)) if head_ip else set()
    parts = []
    for dev in sorted({i for i, dummy, dummy2 in _addresses(net)}):
        addrs = ",".join("%s/%d" % (a, p) for i, a, p in _addresses(net) if i == dev)
        parts.append(
            "%s %s %s%s"
            % (dev, "up" if _up(net, dev) else "down", addrs, " (reaches the head)" if dev in reach else "")
        )
    return "; ".join(parts) or "no IPv4 interface"


def ib_hcas(net: Mapping[str, Any] | None) -> str:
    """``mlx5_0:1,mlx5_1:1`` for the node's active RDMA ports, '' without any."""
    ports = [p for p in (net or {}).get("ib") or [] if str(p.get("state", "")).upper() == "ACTIVE"]
    return ",".join("%s:%s" % (p["hca"], p["port"]) for p in ports)


def node_plan(
    host: str,
    net: Mapping[str, Any] | None,
    head_ip: str,
    is_head: bool,
    ifname_setting: str | None = "auto",
    env: Mapping[str, Any] | None = None,
    explicit_ip: str = "",
) -> dict[str, Any]:
    """What one node uses: ``{ip, ifname, env, problems}``. ``head_ip``: the head's address (for the head, its own);
    ``explicit_ip``: ray_private_ip when the user set it; ``env``: ray_env (its values win)."""
    env = env or {}
    problems = []
    if net is None:
        return dict(ip=explicit_ip, ifname="", env={}, problems=[], known=False)
    if is_head:
        ip = explicit_ip or head_ip
        ifname = interface_of(net, ip)
        if not ifname and ip:
            problems.append("%s: ray_private_ip %s is not an address of this node (%s)" % (host, ip, describe(net, "")))
    else:
        ifname, via_ip = route_get(net, head_ip) if head_ip else ("", "")
        ip = explicit_ip or via_ip
        if head_ip and not ifname:
            problems.append(
                "%s has no route to its head's address %s: give it an address on the head's network, or set "
                "ray_private_ip on the head to an address this node reaches (this node: %s)"
                % (host, head_ip, describe(net, head_ip))
            )
        elif explicit_ip and not interface_of(net, explicit_ip):
            problems.append(
                "%s: ray_private_ip %s is not an address of this node (%s)"
                % (host, explicit_ip, describe(net, head_ip))
            )
        elif explicit_ip:
            ifname = interface_of(net, explicit_ip)
    out_env = {}
    given = {k: env[k] for k in ENV_NAMES + (IB_ENV,) if env.get(k) not in (None, "")}
    setting = str(ifname_setting if ifname_setting is not None else "auto").strip() or "auto"
    if setting == OFF:
        return dict(ip=ip, ifname=ifname, env={}, problems=problems, known=True)
    specs = {}
    if setting != "auto":
        specs["ray_net_ifname"] = setting
    specs.update(("ray_env's %s" % k, given[k]) for k in ENV_NAMES if k in given)
    chosen = [ifname] if ifname else []
    for what, spec in specs.items():
        matched = [d for d in sorted({i for i, dummy, dummy2 in _addresses(net)}) if spec_matches(spec, d)]
        good = [d for d in matched if d in reaching(net, head_ip or ip)]
        if not good:
            problems.append(
                "%s: %s %r matches no up interface with an IPv4 address that reaches the head %s (%s): set it "
                "to one that does, or to auto" % (host, what, spec, head_ip or ip, describe(net, head_ip or ip))
            )
        elif what == "ray_net_ifname":
            chosen = good
    if chosen:
        names = ",".join(chosen)
        for key in ENV_NAMES:
            if key not in given:
                # NCCL reads prefixes ("=" makes them exact) and keeps the user's own syntax; Gloo and TensorPipe take
                # exact names, those of the matching interfaces that reach the head.
                out_env[key] = ("=" + names if setting == "auto" else setting) if key == "NCCL_SOCKET_IFNAME" else names
    hcas = ib_hcas(net)
    if hcas and IB_ENV not in given:
        out_env[IB_ENV] = hcas
    return dict(ip=ip, ifname=ifname, env=out_env, problems=problems, known=True)


def mtu_problem(cluster: str, chosen: Iterable[tuple[str, str, int]]) -> str:
    """One line when the interfaces collectives use in ``cluster`` differ in MTU; ``chosen``: [(host, ifname, mtu)]."""
    known = [(h, i, m) for h, i, m in chosen if i and m]
    if len({m for dummy, dummy2, m in known}) <= 1:
        return ""
    return (
        "cluster %s: the interfaces its collectives use differ in MTU (%s): NCCL hangs or crawls on a mismatch; set "
        "one MTU on them (ip link set DEV mtu N) or choose others with ray_net_ifname"
        % (cluster, ", ".join("%s %s %d" % (h, i, m) for h, i, m in sorted(known)))
    )


def mtu_of(net: Mapping[str, Any] | None, dev: str) -> int:
    return int((((net or {}).get("links") or {}).get(dev) or {}).get("mtu") or 0)


# ---- the address rule, one place: the role default, the firewall and the workers' view of their head read it --------


def _get(hv: Any, key: str) -> Any:
    try:
        value = hv[key] if key in hv else None
    except Exception:  # pylint: disable=broad-except  # an inventory template that cannot be resolved for another host
        return None
    return value if value not in (None, "") else None


def _fallback(hv: Any) -> str:
    """Without the network facts: the default route's address, any address, the address a previous run published,
    a literal ``ansible_host`` (a host left out by --limit has no facts)."""
    default4 = _get(hv, "ansible_default_ipv4")
    if isinstance(default4, dict) and default4.get("address"):
        return str(default4["address"])
    for address in _get(hv, "ansible_all_ipv4_addresses") or []:
        if not str(address).startswith("127."):
            return str(address)
    local = _get(hv, "ansible_local")
    if isinstance(local, dict) and isinstance(local.get("rlinfra_ray"), dict) and local["rlinfra_ray"].get("node_ip"):
        return str(local["rlinfra_ray"]["node_ip"])
    host = _get(hv, "ansible_host")
    return str(_ip(str(host).strip())) if host and _ip(str(host).strip()) else ""


def address_of(host: str, hostvars: Mapping[str, Any], members: Iterable[str] = (), head: str = "") -> str:
    """The private address ``host`` uses for Ray; '' when it cannot be known. ``ray_node_ip`` (what this run resolved),
    then ``ray_private_ip`` as given, then the choice above from the network facts (the head: the network shared with
    ``members``; a member: its route to the head's address), then _fallback."""
    hv = hostvars[host] if host in hostvars else {}
    for key in ("ray_node_ip", "ray_private_ip"):
        value = _get(hv, key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    net = _get(hv, "ansible_rlinfra_net")
    default4 = _get(hv, "ansible_default_ipv4") or {}
    if isinstance(net, dict) and head:
        if host == head:
            others = [_get(hostvars[m], "ansible_rlinfra_net") for m in members if m != host and m in hostvars]
            address, dummy = head_address(
                net,
                [o for o in others if isinstance(o, dict)],
                str(_get(hv, "ansible_host") or ""),
                str(default4.get("address") or "") if isinstance(default4, dict) else "",
            )
            if address:
                return address
        else:
            head_ip = address_of(head, hostvars, members, head)
            dummy, source = route_get(net, head_ip) if head_ip else ("", "")
            if source:
                return source
    return _fallback(hv)
