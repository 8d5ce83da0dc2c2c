# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of site.yml's preflight (roles/ray/tasks/preflight.yml): which node speaks for its cluster, and the one
report per node that rlinfra.verl.ray_node_guard reads (the decision is module_utils/ray/node_state.py's ``guard``).

    {{ ansible_play_hosts | rlinfra.verl.ray_reporter(groups, hostvars, ray_cluster) }}    {cluster, head, reporter}
    {{ ansible_play_hosts | rlinfra.verl.ray_guard_nodes(hostvars) }}                     [report per node]
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.filter.ray_cluster import in_ray_cluster

LEAD_FACT = "ray__lead"
PLAN_FACT = "ray__plan"
JOBS_FACT = "ray__jobs"


def ray_reporter(play_hosts, groups, hostvars, cluster="default"):
    """``{cluster, head, reporter}`` of cluster ``cluster``: its head ('' when the inventory has none) and the one node
    of the play that reads the head's token and lists the jobs - the head, or, when --limit leaves it out, the
    cluster's first node in the play."""
    heads = in_ray_cluster(list((groups or {}).get("ray_head") or []), hostvars, cluster)
    head = heads[0] if heads else ""
    members = in_ray_cluster(list(play_hosts or []), hostvars, cluster)
    reporter = head if head in (play_hosts or []) else (members[0] if members else "")
    return dict(cluster=str(cluster or "default"), head=head, reporter=reporter)


def _fact(hostvars, host, name):
    try:
        value = hostvars[host].get(name)
    except (KeyError, AttributeError):
        value = None
    return value if isinstance(value, dict) else {}


def ray_guard_nodes(play_hosts, hostvars):
    """One report per host of the play, as rlinfra.verl.ray_node_guard's ``nodes`` takes it, from what the preflight
    registered there: ``ray__lead`` (this filter's sibling), ``ray__plan`` (rlinfra.verl.ray_node_state) and, on the
    node that speaks for its cluster, ``ray__jobs`` (rlinfra.verl.ray_cluster_info, or why the jobs could not be
    listed)."""
    nodes = []
    for host in play_hosts or []:
        lead, plan, jobs = (_fact(hostvars, host, n) for n in (LEAD_FACT, PLAN_FACT, JOBS_FACT))
        listed = "running_jobs" in jobs or jobs.get("skipped") or not jobs
        nodes.append(
            dict(
                host=host,
                cluster=lead.get("cluster") or "default",
                reports_jobs=lead.get("reporter") == host,
                restart=bool(plan.get("restart")),
                reasons=list(plan.get("reasons") or []),
                running_jobs=jobs.get("running_jobs") or [],
                jobs_error="" if listed else jobs.get("msg", "unknown error"),
            )
        )
    return nodes


class FilterModule:
    def filters(self):
        return {"ray_reporter": ray_reporter, "ray_guard_nodes": ray_guard_nodes}
