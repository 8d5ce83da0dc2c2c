# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.fitness_entrypoint``: the command line of fitness.yml's Ray check (module_utils/node/fitness_ray.py)."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_ray import entrypoint


def fitness_entrypoint(head_ip, object_mib=16, pairs_max=8, allreduce="auto", store_port=6386, timeout=300):
    return entrypoint(
        str(head_ip),
        object_mib=int(object_mib),
        pairs_max=int(pairs_max),
        allreduce=str(allreduce),
        store_port=int(store_port),
        allreduce_timeout=int(timeout),
    )


def fitness_gate(record, hosts, cluster=""):
    """What submit.yml makes of the cluster's last fitness verdict (the head's rlinfra-fitness.json, as a dict; {}
    without one): ``{wait_for, excluded, error}`` - the nodes to wait for (those fitness.yml left out are not), and
    one line when the verdict says the cluster is not fit to train. A verdict about other members (nodes replaced
    since) is not held against the cluster."""
    hosts = list(hosts or [])
    record = record if isinstance(record, dict) else {}
    if not record or sorted(record.get("members") or []) != sorted(hosts):
        return dict(wait_for=len(hosts), excluded=[], error="", lines=[])
    excluded = sorted(h for h in (record.get("excluded") or {}) if h in hosts)
    error = ""
    if record.get("fit") is False:
        unfit = record.get("unfit") or {}
        blocking = [line for h in sorted(unfit) if h not in excluded for line in unfit[h]]
        error = (
            "cluster %s's last fitness.yml (%s) found it not fit to train: %s; fix it and run fitness.yml again, or "
            "leave the unfit workers out with fitness.yml -e fitness_exclude_unfit=true; nothing was submitted"
            % (
                cluster or record.get("cluster"),
                record.get("time") or "?",
                "; ".join(blocking)[:1500] or "see its record",
            )
        )
    when = record.get("time") or "?"
    lines = [
        "left out:      %s (fitness.yml, %s): %s" % (h, when, "; ".join(record["excluded"][h])[:300] or "unfit")
        for h in excluded
    ]
    return dict(wait_for=len(hosts) - len(excluded), excluded=excluded, error=error, lines=lines)


class FilterModule:
    def filters(self):
        return {"fitness_entrypoint": fitness_entrypoint, "fitness_gate": fitness_gate}
