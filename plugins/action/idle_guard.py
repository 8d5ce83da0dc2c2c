# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.idle_guard``: sends the guard's code (the collection's own module_utils, as the controller
has them) with the module, so the head runs the same client and rules as provision.yml. Documentation:
plugins/modules/idle_guard.py; the guard: module_utils/hyperbolic/idle_guard.py."""

from __future__ import annotations

import os

from ansible_collections.rlinfra.verl.plugins.modules.idle_guard import ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import closure, packages
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

MODULE_UTILS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module_utils")
# The guard and everything it imports (node_script's closure: standard library otherwise), under their package path on
# the node (sub-packages with their __init__.py). hyperbolic.client imports Ansible only for its default opener; the
# guard passes plain_http's.
PACKAGE = "ansible_collections/rlinfra/verl/plugins/module_utils/"


def guard_code(directory=MODULE_UTILS):
    code = closure(["hyperbolic.idle_guard", "common.files"], directory, lazy_ansible=("hyperbolic.client",))
    code.update((name + ".__init__", _init(name, directory)) for name in packages(code))
    return {PACKAGE + name.replace(".", "/") + ".py": text for name, text in sorted(code.items())}


def _init(name, directory):
    with open(os.path.join(directory, *name.split(".")) + "/__init__.py", encoding="utf-8") as handle:
        return handle.read()


ARGUMENT_SPEC = ARGS.spec  # what tests/unit/test_action_docs.py holds to the documentation


class ActionModule(TypedAction):
    ARGS = ARGS

    def act(self, result, args, task_vars):
        module_args = dict(self._task.args)
        if module_args.get("state", "present") == "present":
            module_args["files"] = guard_code()
        result.update(
            self._execute_module(module_name="rlinfra.verl.idle_guard", module_args=module_args, task_vars=task_vars)
        )
        return result
