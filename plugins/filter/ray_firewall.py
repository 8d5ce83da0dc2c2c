# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.ray_firewall_members``: the private address of each member of a Ray cluster, as the
ray roles resolve it, for M(rlinfra.verl.ray_firewall).

    {{ hosts | rlinfra.verl.ray_firewall_members(hostvars, groups) }}  ->  [{"host": ..., "address": ...}, ...]
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.filter.ray_net import ray_address
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.firewall import member_address


def ray_firewall_members(hosts, hostvars, groups=None):
    """One ``{"host", "address"}`` per host, in the given order ('' when its address cannot be known): the address
    each member's Ray uses (filter ray_address) when ``groups`` gives the clusters."""
    if groups:
        return [{"host": h, "address": ray_address(h, hostvars, groups)} for h in hosts or []]
    return [{"host": h, "address": member_address(hostvars[h] if h in hostvars else {})} for h in hosts or []]


class FilterModule:
    def filters(self):
        return {"ray_firewall_members": ray_firewall_members}
