# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.replace_inventory``: the cluster's inventory as this controller sees it, for the run's
supervisor to converge a replaced machine from the head (recovery.replace, module_utils/hyperbolic/replace.py).

    {{ cluster_hosts | rlinfra.verl.replace_inventory(hostvars, groups, inventory_hostname) | to_nice_json }}

Each host keeps what site.yml reads of it: the roles' variables (the prefixes converge_record digests, and the fitness
and hyperbolic ones), how Ansible reaches it, its cluster. The head (``head``) is reached as ``local``: the supervisor
runs there. Nothing that names a token, password or key value is kept (only paths to them); the file is root-only.
"""

from __future__ import annotations

import re

from ansible_collections.rlinfra.verl.plugins.module_utils.common.settings import plain

PREFIXES = ("storage_lvm_", "nfs_mount_", "python_env_", "ray_", "fitness_", "hyperbolic_")
REACH = (
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_python_interpreter",
    "ansible_become",
    "ansible_become_method",
    "ansible_become_user",
)
# Set by a run (facts), or secret values: never carried.
SKIP = ("ray_node_ip", "hyperbolic_api_key")
SECRET = re.compile(r"(token|password|passwd|secret|api_key|private_key)(?!.*_(path|file|dir)$)", re.I)


def _host(hostvars, host, head):
    found = hostvars[host]
    out = {}
    for name in found:
        if (
            (name.startswith(PREFIXES) and "__" not in name or name in REACH)
            and name not in SKIP
            and not SECRET.search(name)
        ):
            try:
                out[name] = plain(found[name])
            except Exception:  # noqa: BLE001 - a value that cannot be templated here is left to the roles' default
                continue
    if host == head:
        out["ansible_connection"] = "local"
    return out


def replace_inventory(hosts, hostvars, groups, head):
    """``{"all": {"children": {"ray_head": {"hosts": ...}, "ray_workers": {"hosts": ...}}}}`` of ``hosts``."""
    hosts = list(hosts or [])
    heads = set((groups or {}).get("ray_head") or [])
    out = {"ray_head": {"hosts": {}}, "ray_workers": {"hosts": {}}}
    for host in hosts:
        out["ray_head" if host in heads else "ray_workers"]["hosts"][host] = _host(hostvars, host, head)
    return {"all": {"children": out}}


class FilterModule:
    def filters(self):
        return {"replace_inventory": replace_inventory}
