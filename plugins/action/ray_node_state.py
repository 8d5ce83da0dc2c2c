# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_node_state``: the module's code as a plain script on the target (plugin_utils/node_script.py;
site.yml's check runs it on every node before anything changes, where starting Ansible's module runtime cost more than
the comparison), the module when that cannot run. Documentation: plugins/modules/ray_node_state.py; the code:
module_utils/ray/node_state.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.ray_node_state import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.ray_node_state"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
