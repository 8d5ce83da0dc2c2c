# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_run_supervisor``: the module's code as a plain script on the head
(plugin_utils/node_script.py), the module when that cannot run. Documentation: plugins/modules/ray_run_supervisor.py;
the code: module_utils/ray/supervisor_unit.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.ray_run_supervisor import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.ray_run_supervisor"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
