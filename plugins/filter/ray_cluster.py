# Copyright: rlinfra maintainers
# Apache License 2.0
"""Filters that group inventory hosts into Ray clusters by their ``ray_cluster`` variable."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common.switches import switch_value
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import mismatch
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.converge_record import plan, watched

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


def env_mismatch(host, heads, hostvars):
    """'' when ``host`` runs its cluster head's Python environment, else one line saying how they differ
    (module_utils/node/python_env.py's rule)."""
    head = in_ray_cluster(heads or [], hostvars, cluster_of(host, hostvars))
    if not head:
        return ""

    def env(name):
        hv = hostvars[name]
        return dict(
            fingerprint=hv.get("python_env_fingerprint"),
            frozen=hv.get("python_env_frozen"),
            python_version=hv.get("python_env_python_version"),
        )

    return mismatch(host, env(host), head[0], env(head[0]))


def worker_head(worker, heads, hostvars):
    """``{name, ip, error}`` of the one host of ``heads`` in ``worker``'s cluster; ``error`` is one line
    saying what to fix when there is not exactly one, or when its address is not known yet."""
    cluster = cluster_of(worker, hostvars)
    found = in_ray_cluster(heads or [], hostvars, cluster)
    if len(found) != 1:
        return dict(
            name="",
            ip="",
            error=(
                "Worker %s (ray_cluster=%s) needs exactly one host in group ray_head with the same ray_cluster; "
                "found %d: %s." % (worker, cluster, len(found), ", ".join(found) or "none")
            ),
        )
    head = found[0]
    head_vars = hostvars[head]
    ip = head_vars.get("ray_node_ip") or ((head_vars.get("ansible_local") or {}).get("rlinfra_ray") or {}).get(
        "node_ip"
    )
    if not ip:
        return dict(
            name=head,
            ip="",
            error=(
                "The address of head %s is unknown: run the ray_head role on it first (site.yml does), or gather its "
                "facts in the same play." % head
            ),
        )
    return dict(name=head, ip=str(ip), error="")


def excluded_of(hosts, hostvars):
    """{host: its rlinfra_excluded local fact} of the hosts fitness.yml left out (as the facts read this run say)."""
    out = {}
    for h in hosts:
        hv = hostvars[h] if h in hostvars else {}
        local = hv.get("ansible_local") if "ansible_local" in hv else None
        fact = (local or {}).get("rlinfra_excluded") if isinstance(local, dict) else None
        if fact:
            out[h] = fact
    return out


def ray_active(hosts, hostvars):
    """``hosts`` without those fitness.yml left out of their cluster (their Ray is stopped)."""
    excluded = excluded_of(hosts, hostvars)
    return [h for h in hosts if h not in excluded]


def converge_plan(hosts, hostvars, groups):
    """Which of ``hosts`` site.yml converges in full and which it found as their last converge left them (see
    module_utils/ray/converge_record.plan), plus the lines it prints about it."""
    nodes = list(groups.get("ray_head") or []) + [
        h for h in groups.get("ray_workers") or [] if h not in (groups.get("ray_head") or [])
    ]
    clusters = ray_clusters(nodes, hostvars)

    excluded = excluded_of(nodes, hostvars)

    def members_of(host):
        name = cluster_of(host, hostvars)
        return name, [h for h in clusters.get(name, [host]) if h not in excluded]

    states = {h: hostvars[h].get("ansible_converge_record") for h in hosts if h in hostvars}
    out = plan(list(hosts), states, members_of, {h: f for h, f in excluded.items() if h in hosts})
    # ray_fitness_check (already checked strictly by converge_record's settings): the hosts site.yml's last play
    # checks, left-out workers included (a fit one is taken back). Groups, so that a run without it adds no play time.
    fitness = [
        h for h in hosts if h in hostvars and switch_value(hostvars[h].get("ray_fitness_check", False))[0] is True
    ]
    out["groups"] = [
        dict(
            host=h,
            groups=[
                g for g, on in (("rlinfra_converge", h in out["converge"]), ("rlinfra_fitness", h in fitness)) if on
            ],
        )
        for h in hosts
        if h in out["converge"] or h in fitness
    ]
    return out


def not_whole(wait, dropped, cluster=DEFAULT_CLUSTER):
    """The one line that says why cluster ``cluster`` is not whole, '' when it is: the wait for its nodes failed
    (``wait``: the registered result of rlinfra.verl.ray_cluster_info, its line), and/or ``dropped``: the members that
    dropped out of this run (unreachable, frozen, failed) and were not waited for."""
    lines = []
    if isinstance(wait, dict) and wait.get("failed"):
        lines.append(str(wait.get("msg") or "the wait for the cluster's nodes failed"))
    dropped = list(dropped or [])
    if dropped:
        them = "it" if len(dropped) == 1 else "them"
        lines.append(
            "cluster '%s' is not whole: %s dropped out of this run (unreachable, frozen or failed: its own line "
            "above says which); bring %s back and run site.yml again, or take %s out of the inventory"
            % (cluster, ", ".join(dropped), them, them)
        )
    return "; ".join(lines)


def worker_join(worker, workers, hostvars, wave, wait="none"):
    """How ``worker`` starts Ray among ``workers`` (the workers this play starts): ``{wait, throttle, wave}``.

    Eleven workers calling one GCS at once on a loaded head time out together and systemd restarts them together
    (a 12-node cluster never formed that way): where the worker's cluster starts more workers than ``wave``, they
    start ``wave`` at a time (the task's throttle) and each waits until the head lists it alive, so the next wave
    meets a GCS that is done with the last. Fewer: all at once, with the ``wait`` asked for. ``wave`` 0: all at once.
    """
    try:
        wave = int(wave)
    except (TypeError, ValueError) as e:
        raise ValueError("ray_worker_join_wave must be a whole number of workers, got %r" % (wave,)) from e
    peers = in_ray_cluster(workers or [], hostvars, cluster_of(worker, hostvars))
    if wave <= 0 or len(peers) <= wave:
        return dict(wait=wait, throttle=0, wave=0)
    index = peers.index(worker) if worker in peers else 0
    return dict(wait="alive", throttle=wave, wave=index // wave + 1)


def ray_watch(role, config_dir, venv, container=False, metrics=False, firewall=False):
    """What the converge record of a node of ``role`` watches (module_utils/ray/converge_record.py ``watched``)."""
    return watched(str(role), str(config_dir), str(venv), bool(container), bool(metrics), bool(firewall))


class FilterModule:
    def filters(self):
        return {
            "in_ray_cluster": in_ray_cluster,
            "ray_clusters": ray_clusters,
            "worker_head": worker_head,
            "converge_plan": converge_plan,
            "ray_watch": ray_watch,
            "env_mismatch": env_mismatch,
            "ray_active": ray_active,
            "not_whole": not_whole,
            "worker_join": worker_join,
        }
