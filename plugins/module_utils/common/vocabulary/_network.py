# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Network values: host names and addresses (and which of them others can reach), networks and the world rule,
ports, interface names, ``host:port``."""

from __future__ import annotations

import ipaddress
import re
from typing import Any, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import Bad, Type
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._containers import ListOf
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._numbers import Int
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._text import _DOTS, Text

_HOST = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
# Linux: at most 15 bytes (IFNAMSIZ - 1), no '/', no whitespace, not '.' or '..'; ':' marks an alias.
_IFNAME = re.compile(r"^[A-Za-z0-9_.+@-]{1,15}$")


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``text`` is (spaces around it aside), None when it is none."""
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class Host(Text):
    """A host name or an IP address."""

    words = "a host name or IP address"
    empty, max_len, what = False, 253, "a host name or IP address"
    sample_value = "127.0.0.1"

    def check_text(self, value: str) -> str:
        if not value and self.empty:
            return value
        text = value.strip()
        if _ip(text) is None and not _HOST.match(text):
            raise Bad("be %s" % self.what)
        return text


# Names every resolver of these systems answers with loopback: /etc/hosts of Debian, Ubuntu, RHEL and kin, and
# RFC 6761's *.localhost (systemd-resolved, glibc's myhostname).
LOOPBACK_NAMES = frozenset(
    (
        "localhost",
        "localhost.localdomain",
        "localhost4",
        "localhost4.localdomain4",
        "localhost6",
        "localhost6.localdomain6",
        "ip6-localhost",
        "ip6-loopback",
    )
)


def unreachable(ip: Any, loopback: bool = True) -> str | None:
    """Why other machines cannot reach ``ip`` (an ``ipaddress`` address, or its text) as this node's, or None when
    they can: the "any" address in either spelling (``0.0.0.0``, ``::``, ``::ffff:0.0.0.0``), multicast, the IPv4
    broadcast, or a scoped address (``fe80::1%eth0``: its ``%`` is a specifier to systemd in a unit line, and the
    scope is this node's own).

    Loopback stays good by default: a one-node cluster on 127.0.0.1 is a real setup. ``loopback=False`` is for a host
    an inventory source or a provider's answer names as a machine to connect to: there loopback (127.0.0.0/8,
    ``::1``, ``::ffff:127.x``, or a name such as ``localhost``) is the controller itself, never that machine, and a
    play sent to it would run on the controller. A host name other than those is judged by nobody here."""
    shown = ip.strip() if isinstance(ip, str) else ip  # as given: ::ffff:127.0.0.1, not ipaddress' ::ffff:7f00:1
    if isinstance(ip, str):
        ip = _ip(ip)
        if ip is None:
            name = shown.rstrip(".").lower()
            if not loopback and (name in LOOPBACK_NAMES or name.endswith(".localhost")):
                return "not %s (this machine's own loopback)" % shown
            return None
    plain = ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip
    if plain.is_unspecified or plain.is_multicast or str(plain) == "255.255.255.255":
        return "not %s" % shown
    if getattr(ip, "scope_id", None):
        return "without a %%scope (%s is this node's own link-local name)" % shown
    if not loopback and plain.is_loopback:
        return "not %s (this machine's own loopback)" % shown
    return None


class Address(Text):
    """An IP address a node can bind to and others can reach (:func:`unreachable` says what is not)."""

    words = "an IP address others can reach"
    empty, max_len, what = False, 64, "an IP address (for example 10.0.0.5)"
    sample_value = "10.0.0.5"
    reach = "be an address the other nodes can reach, %s"

    def check_text(self, value: str) -> str:
        if not value.strip() and self.empty:
            return ""
        # Surrounding spaces: a role writes the variable as given into a unit line, where " 10.0.0.5" is two words.
        ip = _ip(value) if value == value.strip() else None
        if ip is None:
            raise Bad("be %s" % self.what)
        why = unreachable(ip)
        if why:
            raise Bad(self.reach % why)
        return str(ip)


WORLD_PREFIX = {4: 8, 6: 16}


# IPv6 networks that carry IPv4 addresses: (network, where the 32 IPv4 bits start). A network of them opens what its
# IPv4 part opens (::ffff:0:0/96 is every IPv4 address; 64:ff9b::/96 is the IPv4 internet through a NAT64 gateway;
# 2002::/16 is it through 6to4), so the world rule judges that part.
_EMBEDDED_IPV4 = (
    (ipaddress.ip_network("::ffff:0:0/96"), 96),
    (ipaddress.ip_network("::/96"), 96),
    (ipaddress.ip_network("64:ff9b::/96"), 96),
    (ipaddress.ip_network("2002::/16"), 16),
)
_MAPPED = _EMBEDDED_IPV4[0][0]


def ipv4_part(net: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The IPv4 network an IPv6 ``net`` of IPv4-carrying addresses stands for (0.0.0.0/0 for a network holding one of
    those ranges whole), else None."""
    for base, start in _EMBEDDED_IPV4:
        if net.version == 6 and net.supernet_of(base):
            return ipaddress.ip_network("0.0.0.0/0")
        if net.version == 6 and net.subnet_of(base):
            bits = (int(net.network_address) >> (128 - start - 32)) & 0xFFFFFFFF
            return ipaddress.ip_network((bits, min(32, net.prefixlen - start)), strict=False)
    return None


def ipv4_mapped_network(net: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``net`` as nftables sees its packets: an IPv4-mapped network (``::ffff:10.0.0.0/104``) is the IPv4 one
    (``10.0.0.0/8``), prefix kept; any other network as it is."""
    if net.version == 6 and net.subnet_of(_MAPPED):
        return cast("ipaddress.IPv4Network | ipaddress.IPv6Network", ipv4_part(net))  # net lies in _MAPPED
    return net


def _public_size(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    """How many addresses of the internet ``net`` opens: 0 for a private range (10.0.0.0/8, fd00::/8)."""
    return 0 if net.is_private and not net.is_global else net.num_addresses


def _world_size(version: int) -> int:
    """The fewest addresses a world-open network holds: one bit more than the widest network allowed alone."""
    return 1 << (33 - WORLD_PREFIX[4] if version == 4 else 129 - WORLD_PREFIX[6])


def judged(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The network the world rule judges for ``net``: itself, or, for an IPv6 network of IPv4-carrying addresses not
    already too wide as IPv6, the IPv4 network it opens (::ffff:0:0/96 is 0.0.0.0/0)."""
    if net.version == 6 and _public_size(net) >= _world_size(6):
        return net
    return ipv4_part(net) or net


class Cidr(Text):
    """An IP address or network. A network wider than /8 (IPv4) or /16 (IPv6) opens to a large part of the internet:
    refused unless ``world`` (the surface's explicit ``*_allow_world: true``); an IPv6 network carrying IPv4 addresses
    is judged by its IPv4 part. Host bits after the prefix are refused: ``203.0.113.7/8`` would silently open the
    whole /8 to someone who meant one machine."""

    words = "an IP network (not world-wide unless allowed)"
    empty, max_len, what = False, 64, "an IP address or network (for example 10.0.0.0/24)"
    sample_value = "10.0.0.0/24"

    def __init__(self, world: bool = False, world_switch: str = "", **kw: Any):
        super().__init__(**kw)
        self.world, self.world_switch = world, world_switch

    def check(self, value: Any) -> Any:
        return self.check_in(value, {})

    def allowed(self, context: dict[str, Any]) -> bool | str:
        return self.world or (self.world_switch and context.get(self.world_switch) is True)

    def opens(self, what: str, verb: str = "opens") -> str:
        return "%s %s to the whole internet or a large part of it%s" % (
            what,
            verb,
            " (set %s: true if that is really meant)" % self.world_switch if self.world_switch else "",
        )

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        value = super().check(value)
        try:
            net = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise Bad("be %s" % self.what) from None
        try:
            ipaddress.ip_network(value.strip())
        except ValueError:  # only the host bits, as the lenient parse above took it
            raise Bad(
                "be %s without bits set after the prefix (%s is inside %s: write %s for one address, or %s for the "
                "network)" % (self.what, value.strip(), net, value.strip().split("/")[0], net)
            ) from None
        seen = judged(net)
        if not self.allowed(context) and _public_size(seen) >= _world_size(seen.version):
            raise Bad(
                "be a network narrower than /%d: %s"
                % (WORLD_PREFIX[seen.version], self.opens(str(net) if seen is net else "%s (all of %s)" % (net, seen)))
            )
        return str(net)


class Networks(Type):
    """A list of :class:`Cidr` that is also judged as a whole: narrow networks that together open as much as a network
    refused alone (256 /8s, or 0.0.0.0/1 written as two /2s) are refused the same way, unless ``world_switch``."""

    ansible = "list"
    elements = "str"
    words = "a list of IP networks (not world-wide together unless allowed)"

    def __init__(self, world_switch: str = "", max_items: int = 1000, **kw: Any):
        super().__init__(**kw)
        self.cidr = Cidr(world_switch=world_switch)
        self.list = ListOf(self.cidr, max_items=max_items)
        self.sample_value = [self.cidr.sample()]

    def check(self, value: Any) -> Any:
        return self.check_in(value, {})

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        nets = [ipaddress.ip_network(n) for n in self.list.check_in(value, context)]
        if not self.cidr.allowed(context):
            seen = [judged(n) for n in nets]
            for version in (4, 6):
                mine: list[Any] = [n for n in seen if n.version == version]
                # Overlaps merged first: the same /8 given twice opens one /8.
                if sum(_public_size(n) for n in ipaddress.collapse_addresses(mine)) >= _world_size(version):
                    raise Bad(
                        "be networks that together stay narrower than /%d: %s"
                        % (WORLD_PREFIX[version], self.cidr.opens("these %d networks together" % len(mine), "open"))
                    )
        return [str(n) for n in nets]

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        return self.list.problems(value, where, context) or super().problems(value, where, context)


class Port(Int):
    words = "a TCP port"

    def __init__(self, **kw: Any):
        kw.setdefault("must", "be a TCP port from 1 to 65535")
        super().__init__(1, 65535, **kw)
        self.sample_value = 8265

    def _range(self) -> str:
        return "be a TCP port from 1 to 65535"


class IfName(Text):
    """A network interface name as Linux allows it: 1-15 characters, no '/', whitespace or ':'."""

    words = "a network interface name"
    empty, max_len, pattern = False, 15, _IFNAME
    what = "a network interface name (at most 15 letters, digits, _ . + @ -)"
    sample_value = "eth0"
    refused = _DOTS


class HostPort(Text):
    """``host:port``: a host name, an IPv4 address or ``[IPv6]``, and a TCP port (Ray's GCS address)."""

    words = "host:port"
    empty, max_len, what = False, 300, "host:port (for example 10.0.0.5:6379)"
    sample_value = "127.0.0.1:6379"

    def check_text(self, value: str) -> str:
        if not value.strip():
            return value
        host, sep, port = value.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            if not sep:
                raise Bad("no port")
            Host().check(host)
            Port().check(port)
        except Bad:
            raise Bad("be %s" % self.what) from None
        return value
