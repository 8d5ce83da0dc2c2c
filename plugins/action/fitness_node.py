# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.fitness_node``: the module's code as a plain script on the target (plugin_utils/node_script.py), the
module when that cannot run. Documentation: plugins/modules/fitness_node.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.fitness_node import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.fitness_node"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
