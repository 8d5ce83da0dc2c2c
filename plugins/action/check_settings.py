# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.check_settings``: the roles' variables checked as values before
anything changes. Documentation: plugins/modules/check_settings.py; the rules: module_utils/common/settings.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common import settings, vocabulary
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction, settings_failure

ARGS = vocabulary.Args(roles=vocabulary.ListOf(vocabulary.Choice(settings.ROLES), required=True))
ARGUMENT_SPEC = ARGS.spec


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def act(self, result, args, task_vars):
        checked, failure = settings_failure(self._templar, task_vars, args["roles"])
        result.update(changed=False, checked=checked, **failure)
        return result
