# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.ray_node_guard``: it only reads its arguments, so it needs no node.
Documentation: plugins/modules/ray_node_guard.py; the decision: module_utils/ray/node_state.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_state import guard_result
from ansible_collections.rlinfra.verl.plugins.modules.ray_node_guard import ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGUMENT_SPEC = ARGS.spec  # what tests/unit/test_action_docs.py holds to the documentation


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def act(self, result, args, task_vars):
        result.update(guard_result(args))
        if not result.get("warnings"):
            result.pop("warnings", None)
        return result
