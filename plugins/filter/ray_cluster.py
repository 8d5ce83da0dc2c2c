# Copyright: rlinfra maintainers
# Apache License 2.0
"""Filters that group inventory hosts into Ray clusters by their ``ray_cluster`` variable."""

from __future__ import annotations

DEFAULT_CLUSTER = "default"


def cluster_of(host, hostvars):
    """The ray_cluster a host belongs to (``default`` when unset)."""
    value = hostvars[host].get("ray_cluster") if host in hostvars else None
    return str(value) if value not in (None, "") else DEFAULT_CLUSTER


def in_ray_cluster(hosts, hostvars, cluster=DEFAULT_CLUSTER):
    """Keep the hosts whose ray_cluster equals ``cluster``, in the given order."""
    cluster = str(cluster or DEFAULT_CLUSTER)
    return [h for h in hosts if cluster_of(h, hostvars) == cluster]


def ray_clusters(hosts, hostvars):
    """Map each cluster name to its hosts (sorted names, hosts in the given order)."""
    out = {}
    for h in hosts:
        out.setdefault(cluster_of(h, hostvars), []).append(h)
    return dict(sorted(out.items()))


class FilterModule:
    def filters(self):
        return {"in_ray_cluster": in_ray_cluster, "ray_clusters": ray_clusters}
