# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.converge_record``: digests what the run was given (on the controller), then reads the node:
the check as a plain script (plugin_utils/node_script.py, the same code without Ansible's module runtime - it runs
on every node of every re-run), the module when that cannot run and for state=write. Documentation:
plugins/modules/converge_record.py; the rules: module_utils/ray/converge_record.py."""

from __future__ import annotations

import hashlib
import os

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.common.settings import plain
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.converge_record import digest
from ansible_collections.rlinfra.verl.plugins.modules.converge_record import ARGS, ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction, settings_failure

# The variables the roles site.yml runs read, by prefix; a name with "__" is a role's own (set during a run).
PREFIXES = ("storage_lvm_", "nfs_mount_", "python_env_", "ray_")
# How Ansible reaches the node and where it stands in the inventory.
PLACEMENT = ("inventory_hostname", "ansible_host", "ansible_port", "ansible_user")
COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TREE = {}


def collection_digest(root=COLLECTION, parts=("plugins", "roles", "playbooks")):
    """sha256 over the collection's own code (paths and contents): an upgrade of the collection is an input."""
    if root in _TREE:
        return _TREE[root]
    sha = hashlib.sha256()
    for part in parts:
        for base, dirs, files in os.walk(os.path.join(root, part)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue
                path = os.path.join(base, name)
                sha.update(os.path.relpath(path, root).encode() + b"\0")
                try:
                    with open(path, "rb") as handle:
                        sha.update(handle.read())
                except OSError:
                    sha.update(b"unreadable")
    _TREE[root] = sha.hexdigest()
    return _TREE[root]


def inputs_digest(templar, task_vars):
    """The digest of what this run gives the node: the collection's code, the roles' variables as given (templated
    where they can be now, else as written - a value from node facts is watched on the node), its placement."""
    values = {}
    # Facts are what a run published, not what it was given (a fact cache, as AWX keeps, brings them back).
    facts = task_vars.get("ansible_facts") or {}
    names = [n for n in task_vars if n.startswith(PREFIXES) and "__" not in n and n not in facts] + [
        n for n in PLACEMENT if n in task_vars
    ]
    for name in sorted(set(names)):
        try:
            values[name] = plain(templar.template(task_vars[name]))
        except AnsibleError:
            values[name] = repr(task_vars[name])
    groups = task_vars.get("groups") or {}
    host = task_vars.get("inventory_hostname")
    values["__role"] = [
        "ray_head" if host in (groups.get("ray_head") or []) else "",
        "ray_workers" if host in (groups.get("ray_workers") or []) else "",
    ]
    return digest([collection_digest(), values])


class ActionModule(TypedAction):
    ARGS = ARGS

    def act(self, result, args, task_vars):
        module_args = dict(self._task.args)
        roles = module_args.pop("settings", None) or []
        if roles:
            dummy, failure = settings_failure(self._templar, task_vars, roles)
            if failure:
                result.update(changed=False, **failure)
                return result
        if module_args.get("state", "check") == "check":
            if not module_args.get("inputs"):
                module_args["inputs"] = inputs_digest(self._templar, task_vars)
            args["inputs"] = module_args["inputs"]
            res = node_script.run(self, task_vars, "ray.converge_record", "check", args)
            if res is not None:
                result.update(res, changed=False)
                return result
        elif args.get("inputs") and not node_script.expands_on_node(ARGUMENT_SPEC, module_args):
            # The record: the same code, at the end of every converge in full.
            res = node_script.run(self, task_vars, "ray.converge_record", "write", args)
            if res is not None:
                result.update(res)
                return result
        result.update(
            self._execute_module(
                module_name="rlinfra.verl.converge_record", module_args=module_args, task_vars=task_vars
            ),
            runtime="module",
        )
        return result
