# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.prometheus_targets``: who the head's Prometheus scrapes, for the role ray_metrics's
prometheus.yml template.

    {{ members | rlinfra.verl.prometheus_targets(hostvars, groups, 9100, 9400) }}
        ->  {"node": [{"target": "10.0.0.5:9100", "node": "head-1"}, ...], "dcgm": [...]}

Each member's private address as the ray roles resolve it (filter ray_firewall_members), and whether NVIDIA's DCGM
exporter is installed there: as this run read it (``ray_metrics__info``, rlinfra.verl.ray_metrics_info), else as the
member's last converge recorded it (its ``rlinfra_metrics`` local fact). The rules are module_utils/observe/metrics.py's
``scrape_targets``.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.filter.ray_firewall import ray_firewall_members
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics


def _dcgm(hv):
    read = hv.get("ray_metrics__info") or {}
    if "dcgm" in read:
        return bool(read["dcgm"])
    return bool(((hv.get("ansible_local") or {}).get("rlinfra_metrics") or {}).get("dcgm"))


def prometheus_targets(hosts, hostvars, groups, exporter_port, dcgm_port):
    members = [
        dict(m, dcgm=_dcgm(hostvars[m["host"]] if m["host"] in hostvars else {}))
        for m in ray_firewall_members(hosts, hostvars, groups)
    ]
    try:
        return metrics.scrape_targets(members, int(exporter_port), int(dcgm_port))
    except metrics.MetricsError as e:
        raise AnsibleFilterError(str(e)) from e


class FilterModule:
    def filters(self):
        return {"prometheus_targets": prometheus_targets}
