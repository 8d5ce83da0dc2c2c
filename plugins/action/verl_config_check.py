# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.verl_config_check``: the module's code as a plain script on the target (plugin_utils/node_script.py),
the module when that cannot run. Documentation: plugins/modules/verl_config_check.py; the code:
module_utils/verl/image_config_check.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.verl_config_check import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.verl_config_check"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
