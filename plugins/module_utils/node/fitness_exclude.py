# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""``rlinfra.verl.fitness_exclude``'s work: a node left out of the cluster (its record written for site.yml, its Ray
worker unit disabled and stopped) or taken back (the record removed). Standard library only."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.node.facts import local_fact


def read(path: str) -> dict[str, Any] | None:
    """The record as site.yml reads it (node_facts.local_fact): None when there is none, {} when it is not one."""
    fact = local_fact(path)
    return fact if fact is None or isinstance(fact, dict) else {}


def exclude(module: Any) -> None:
    """The module's work, with its AnsibleModule (``state``: excluded or included); exits through ``module``."""
    p = module.params
    before = read(p["fact_path"])
    if p["state"] == "included":
        if before is not None and not module.check_mode:
            os.unlink(p["fact_path"])
        module.exit_json(changed=before is not None, since="")
    since = (before or {}).get("since") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = dict(reason=p["reason"], since=since)
    changed = before != record
    systemctl = module.get_bin_path("systemctl")
    active = False
    if systemctl:
        rc, out, dummy = module.run_command([systemctl, "is-active", p["service"]])
        active = out.strip() in ("active", "activating", "reloading")
        rc, out_enabled, dummy = module.run_command([systemctl, "is-enabled", p["service"]])
        changed = changed or active or out_enabled.strip() == "enabled"
    if changed and not module.check_mode:
        makedirs(os.path.dirname(p["fact_path"]), 0o755)
        write_atomic(p["fact_path"], json.dumps(record, sort_keys=True) + "\n", 0o644)
        if systemctl:
            rc, dummy, err = module.run_command([systemctl, "disable", "--now", p["service"]])
            if rc != 0:
                module.fail_json(msg="fitness_exclude: could not stop %s: %s" % (p["service"], err.strip()[-300:]))
            # ray start --block exits 1 on a requested stop; the unit reads inactive, not failed, once left out.
            module.run_command([systemctl, "reset-failed", p["service"]])
    module.exit_json(changed=changed, since=since)
