# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_job``: the module's code as a plain script on the target (plugin_utils/node_script.py; no
Ansible module runtime to start, which costs more than a short job's submit and polls), the module when that cannot
run or the task is async. Documentation: plugins/modules/ray_job.py; the code: module_utils/ray/job_run.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.modules.ray_job import ARGUMENT_SPEC
from ansible_collections.rlinfra.verl.plugins.plugin_utils.node_script import ScriptedAction


class ActionModule(ScriptedAction):
    MODULE = "rlinfra.verl.ray_job"
    ARGUMENT_SPEC = ARGUMENT_SPEC  # what tests/unit/test_action_docs.py holds to the documentation
