# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_metrics_info``: the module's code as a plain script on the target
(plugin_utils/node_script.py; the role ray_metrics reads every node with it before its templates), the module when
that cannot run. Documentation: plugins/modules/ray_metrics_info.py; the code: module_utils/observe/metrics_info.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.ray_metrics_info import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.ray_metrics_info"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
