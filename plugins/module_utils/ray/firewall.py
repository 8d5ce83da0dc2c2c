# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The decisions behind ``rlinfra.verl.ray_firewall``: which ports are Ray's, which addresses may reach
them, and the nftables rules that say so. Pure functions (no I/O) so that unit tests cover them.

Design: one table of our own (``inet rlinfra_ray``) whose input chain looks only at Ray's ports (fixed ports
plus the worker port range the roles pin with --min/--max-worker-port). Everything else - SSH, other
services, other tables - is left alone: the chain's policy is accept, and it drops only new connections to a
Ray port from an address that is neither loopback, a member of the cluster, nor the controller. A drop in
any base chain is final in nftables, so another firewall's drops still apply and ours cannot open anything.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import whole_number
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import net as ray_net

TABLE = "rlinfra_ray"
FAMILY = "inet"
_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,40}$")


class FirewallError(ValueError):
    """A bad input; the message is one line meant for the user."""


def parse_port(name: str, value: Any) -> tuple[int, int]:
    """``(low, high)`` from an int, a digit string or ``"low-high"``; FirewallError naming ``name`` otherwise."""
    if isinstance(value, bool):
        raise FirewallError("port %s must be a number or a range low-high, got %r" % (name, value))
    number = whole_number(value)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        low, high = value
    elif number is not None:
        low = high = number
    elif isinstance(value, str) and _RANGE.match(value):
        low, high = (int(x) for x in cast("re.Match[str]", _RANGE.match(value)).groups())
    else:
        raise FirewallError("port %s must be a number or a range low-high, got %r" % (name, value))
    try:
        low, high = int(low), int(high)
    except (TypeError, ValueError):
        raise FirewallError("port %s must be a number or a range low-high, got %r" % (name, value)) from None
    if not (1 <= low <= high <= 65535):
        raise FirewallError("port %s must lie in 1-65535 with low <= high, got %r" % (name, value))
    return low, high


def ray_ports(
    ports: object, protected: Iterable[int | str] | None = (22,)
) -> tuple[dict[str, tuple[int, int]], list[tuple[int, int]]]:
    """Check the named ports (``{name: port or "low-high"}``) and return ``(by_name, merged ranges)``.

    Two names on one port would make Ray fail to start (or, for a fixed port inside the worker range, fail
    at random when a worker takes it); a Ray port on SSH's port would let the firewall lock the user out.
    Both are errors here, before anything is written.
    """
    if not isinstance(ports, dict) or not ports:
        raise FirewallError("ports must be a non-empty mapping of names to ports")
    by_name = {}
    for name in sorted(ports):
        by_name[name] = parse_port(name, ports[name])
    names = sorted(by_name, key=lambda n: by_name[n])
    for a, b in zip(names, names[1:]):
        if by_name[b][0] <= by_name[a][1]:
            raise FirewallError(
                "Ray ports overlap: %s (%s) and %s (%s); give each its own port"
                % (a, _show(by_name[a]), b, _show(by_name[b]))
            )
    for port in protected or ():
        for name, (low, high) in sorted(by_name.items()):
            if low <= int(port) <= high:
                raise FirewallError(
                    "Ray port %s (%s) covers SSH port %s; move it, the firewall never filters SSH"
                    % (name, _show((low, high)), port)
                )
    merged: list[tuple[int, int]] = []
    for low, high in sorted(by_name.values()):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(high, merged[-1][1]))
        else:
            merged.append((low, high))
    return by_name, merged


def member_address(hostvars_of_host: Mapping[str, Any] | None) -> str:
    """The private address a member uses for Ray, without its cluster's context (module_utils/ray/net.address_of has
    the rule; the firewall filter gives it the cluster when it has it)."""
    return ray_net.address_of("_", {"_": hostvars_of_host or {}})


def allowed_sources(
    members: Sequence[Mapping[str, Any]], controller: str = "", extra: Iterable[str] | None = ()
) -> tuple[list[str], list[str], dict[str, str]]:
    """``(v4, v6, origin)``: sorted network strings allowed to reach Ray's ports, and where each came from.

    ``members`` is a list of ``{"host", "address"}``; a member without an address is an error naming it (a
    firewall that silently shut out a worker would split the cluster). ``controller`` may be empty (a local
    connection). ``extra`` are further addresses or networks (``10.0.0.0/8``).
    """
    origin: dict[ipaddress.IPv4Network | ipaddress.IPv6Network, str] = {}
    missing = [str(m.get("host")) for m in members if not str(m.get("address") or "").strip()]
    if missing:
        raise FirewallError(
            "the private address of cluster member(s) %s is unknown: run site.yml over the whole cluster "
            "(no --limit) so that their facts are gathered, or set ray_private_ip for them" % ", ".join(missing)
        )
    entries = [("member " + str(m["host"]), m["address"]) for m in members]
    if controller:
        entries.append(("controller", controller))
    entries += [("ray_firewall_allow", a) for a in extra or ()]
    for who, raw in entries:
        try:
            net = ipaddress.ip_network(str(raw).strip(), strict=False)
        except ValueError:
            raise FirewallError("%s: %r is not an IP address or network" % (who, raw)) from None
        # IPv4 packets, as nftables sees them (prefix kept: ::ffff:10.0.0.0/104 is 10.0.0.0/8, not 10.0.0.0/32)
        net = vocabulary.ipv4_mapped_network(net)
        origin.setdefault(net, who)
    v4 = sorted((n for n in origin if n.version == 4), key=lambda n: (int(n.network_address), n.prefixlen))
    v6 = sorted((n for n in origin if n.version == 6), key=lambda n: (int(n.network_address), n.prefixlen))
    return (
        [_net(n) for n in _collapse(v4)],
        [_net(n) for n in _collapse(v6)],
        {_net(n): who for n, who in origin.items()},
    )


def _net(net):
    return str(net.network_address) if net.prefixlen == net.max_prefixlen else str(net)


def _collapse(nets):
    return list(ipaddress.collapse_addresses(nets)) if nets else []


def _show(rng: tuple[int, int]) -> str:
    low, high = rng
    return str(low) if low == high else "%d-%d" % (low, high)


def controller_address(ssh_connection: str | None) -> str:
    """The controller's address as the node sees it: the first field of $SSH_CONNECTION (or $SSH_CLIENT)."""
    fields = str(ssh_connection or "").split()
    if not fields:
        return ""
    try:
        return str(ipaddress.ip_address(fields[0]))
    except ValueError:
        return ""


def render(ports: Iterable[tuple[int, int]], v4: Sequence[str], v6: Sequence[str], table: str = TABLE) -> str:
    """The nftables script: create-or-keep the table, delete it, define it anew, in one transaction - so ``nft -f``
    replaces it atomically. Not ``flush table``: that keeps set elements, and an interval set whose shape changed
    (a port range moved, two addresses became one /31) then fails with "File exists"."""
    if not _NAME.match(table):
        raise FirewallError("table name must be letters, digits and _, got %r" % (table,))
    port_list = ", ".join(_show(r) for r in ports)
    body = [
        "  set ray_ports {",
        "    type inet_service",
        "    flags interval",
        "    elements = { %s }" % port_list,
        "  }",
        "  set allowed_v4 {",
        "    type ipv4_addr",
        "    flags interval",
    ]
    if v4:
        body.append("    elements = { %s }" % ", ".join(v4))
    body += ["  }", "  set allowed_v6 {", "    type ipv6_addr", "    flags interval"]
    if v6:
        body.append("    elements = { %s }" % ", ".join(v6))
    body += [
        "  }",
        "  chain input {",
        # Just before the usual filter chains; policy accept: this table only ever says no, and only on Ray's ports.
        "    type filter hook input priority filter - 1; policy accept;",
        '    iif "lo" accept',
        "    meta l4proto != { tcp, udp } accept",
        "    th dport != @ray_ports accept",
        "    ct state established,related accept",
        "    ip saddr @allowed_v4 accept",
        "    ip6 saddr @allowed_v6 accept",
        "    counter drop",
        "  }",
    ]
    lines = (
        [
            "#!/usr/sbin/nft -f",
            "# Written by rlinfra.verl (role ray): only Ray's ports, only this table. Do not edit; re-run site.yml.",
            "table %s %s" % (FAMILY, table),
            "delete table %s %s" % (FAMILY, table),
            "table %s %s {" % (FAMILY, table),
        ]
        + body
        + ["}", ""]
    )
    return "\n".join(lines)


class PortsType(vocabulary.Type):
    """Ray's ports, name -> port or ``low-high`` range, by module_utils/ray/firewall.py's rule: in 1-65535, no two
    overlapping, none on SSH's 22 (the protected ports given besides are checked with the rules)."""

    ansible = "dict"
    words = "Ray's ports, name -> port or low-high"
    sample_value = {"gcs": 6379, "workers": "10002-19999"}

    def check(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or not value:
            raise vocabulary.Bad("be a non-empty mapping of names to ports or low-high ranges")
        try:
            ray_ports(value, protected=(22,))
        except FirewallError as e:
            raise vocabulary.Bad(str(e)) from e
        return value

    def line(self, name: str, value: Any, bad: object) -> str:
        if str(bad).startswith("be "):
            return super().line(name, value, bad)
        return "%s: %s%s" % (self.label or name, bad, self.hint)  # firewall.py's own line names the port
