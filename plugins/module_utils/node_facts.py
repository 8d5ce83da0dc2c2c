# -*- coding: utf-8 -*-
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

# The same probe setup uses for the default interface: a route lookup, no packet is sent.
ROUTE_PROBE = "8.8.8.8"
_ROUTE = re.compile(r"\bdev\s+(\S+)(?:.*?\bsrc\s+(\S+))?")
_INET = re.compile(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\d+\.\d+\.\d+\.\d+)/(\d+)")
_GATEWAY = re.compile(r"\bvia\s+(\d+\.\d+\.\d+\.\d+)")


def parse_route(text):
    """``(interface, source address, gateway)`` from ``ip -4 route get``'s answer; empty strings when absent."""
    line = " ".join(text.split())
    match = _ROUTE.search(line)
    if not match:
        return "", "", ""
    gateway = _GATEWAY.search(line)
    return match.group(1), match.group(2) or "", gateway.group(1) if gateway else ""


def parse_addresses(text):
    """``[(interface, address, prefix)]`` from ``ip -4 -o addr show``, in its order."""
    out = []
    for line in text.splitlines():
        match = _INET.match(line.strip())
        if match:
            out.append((match.group(1), match.group(2), int(match.group(3))))
    return out


def default_ipv4(route_text, addresses):
    """setup's ``default_ipv4`` shape (address, interface, gateway, prefix) for the interface of the default route,
    from ``ip -4 route get``'s answer and parse_addresses' list; {} when the node has no IPv4 route out."""
    interface, source, gateway = parse_route(route_text)
    if not interface:
        return {}
    on_interface = [(a, p) for i, a, p in addresses if i == interface]
    address, prefix = next(((a, p) for a, p in on_interface if a == source), on_interface[0] if on_interface else (source, None))
    if not address:
        return {}
    out = dict(address=address, interface=interface, alias=interface)
    if gateway:
        out["gateway"] = gateway
    if prefix is not None:
        out["prefix"] = str(prefix)
    return out


def local_fact(path):
    """A JSON local fact as setup's ``local`` collector reads it; an unreadable one is reported, not fatal, like setup."""
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        return "error loading fact - output of running \"%s\" was not utf-8 JSON: %s" % (path, exc)


def ip_runner(module):
    """``run(argv)`` for node_facts: the node's ``ip`` through the module (rc 127 when it has none)."""
    ip = module.get_bin_path("ip", opt_dirs=["/sbin", "/usr/sbin"])

    def run(argv):
        return module.run_command([ip] + argv[1:]) if ip else (127, "", "ip not found")
    return run


def node_facts(run, fact_dir, names):
    """The ``ansible_facts`` of M(rlinfra.verl.node_facts): ``run(argv) -> (rc, out, err)`` runs a command."""
    rc, route, dummy = run(["ip", "-4", "route", "get", ROUTE_PROBE])
    rc_addr, addrs, dummy = run(["ip", "-4", "-o", "addr", "show"])
    addresses = parse_addresses(addrs) if rc_addr == 0 else []
    local = {}
    for name in names:
        value = local_fact(os.path.join(fact_dir, name + ".fact"))
        if value is not None:
            local[name] = value
    # Named as setup names them: the controller makes ansible_facts.X and, by default, the variable ansible_X of each.
    return dict(ansible_default_ipv4=default_ipv4(route if rc == 0 else "", addresses),
                ansible_all_ipv4_addresses=[a for i, a, p in addresses if not a.startswith("127.")],
                ansible_local=local)
