# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters ``rlinfra.verl.ray_address`` (the address a node's Ray uses, the default of ``ray_private_ip``) and
``rlinfra.verl.ray_net`` (that address, the interface collectives use, the environment that names it, and every
problem in one line each). The rules: module_utils/ray/net.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import cluster_of, in_ray_cluster
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.net import (
    address_of,
    mtu_of,
    mtu_problem,
    node_plan,
    route_get,
)


def _cluster(host, hostvars, groups):
    heads = list((groups or {}).get("ray_head") or [])
    nodes = heads + [h for h in (groups or {}).get("ray_workers") or [] if h not in heads]
    members = in_ray_cluster(nodes, hostvars, cluster_of(host, hostvars))
    head = next((h for h in members if h in heads), "")
    return members or [host], head


def ray_address(host, hostvars, groups):
    """The address ``host``'s Ray binds to and advertises (module_utils/ray/net.address_of)."""
    members, head = _cluster(host, hostvars, groups)
    return address_of(host, hostvars, members, head)


def _facts(hostvars, host):
    hv = hostvars[host] if host in hostvars else {}
    net = hv.get("ansible_rlinfra_net") if "ansible_rlinfra_net" in hv else None
    return net if isinstance(net, dict) else None


def ray_net(host, hostvars, groups, ip="", ifname="auto", env=None):
    """``{ip, ifname, head, head_ip, env, problems, known}`` for ``host``: ``ip`` its Ray address as this run resolved
    it (ray_private_ip), ``ifname`` ray_net_ifname, ``env`` ray_env. The head's answer also carries the cluster's MTU
    problem, if any."""
    members, head = _cluster(host, hostvars, groups)
    head_ip = ip if host == head and ip else address_of(head, hostvars, members, head) if head else ""
    plan = node_plan(host, _facts(hostvars, host), head_ip, host == head, ifname, dict(env or {}), ip)
    plan.update(head=head, head_ip=head_ip)
    if host == head and plan["known"]:
        chosen = []
        for member in members:
            net = _facts(hostvars, member)
            if net is None:
                continue
            dev = plan["ifname"] if member == host else route_get(net, head_ip)[0]
            chosen.append((member, dev, mtu_of(net, dev)))
        line = mtu_problem(str(cluster_of(host, hostvars)), chosen)
        if line:
            plan["problems"] = plan["problems"] + [line]
    return plan


class FilterModule:
    def filters(self):
        return {"ray_address": ray_address, "ray_net": ray_net}
