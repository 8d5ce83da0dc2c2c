# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.code_checkout``: the ref is resolved to a commit here, on the controller (``git
ls-remote``, credentials in git's environment only), then the module checks that commit out on the target.
Documentation: plugins/modules/code_checkout.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGS = code_checkout.ARGS  # the module's declaration (module_utils/verl/code_checkout.py)
ARGUMENT_SPEC = code_checkout.ARGUMENT_SPEC


# The vocabulary's types first, as the module's main() enforces them: a bad option (a token in the repo's URL, a relative
# root) is refused before git runs; the lines never show a secret.
class ActionModule(TypedAction):
    ARGS = ARGS
    ERRORS_LIST = True

    def act(self, result, args, task_vars):
        code, errors = code_checkout.module_section(args)
        if errors:
            return dict(result, failed=True, msg=errors[0], errors=errors)
        if not args["commit"]:
            try:
                with code_checkout.Git(code["repo"], args["token"], args["ssh_key"]) as git:
                    args["commit"] = code_checkout.resolve(code, git)
            except code_checkout.CodeError as e:
                return dict(result, failed=True, msg="%s (resolved on the controller)" % e)
        module_args = dict((k, v) for k, v in args.items() if v is not None)
        result.update(
            self._execute_module(module_name="rlinfra.verl.code_checkout", module_args=module_args, task_vars=task_vars)
        )
        return result
