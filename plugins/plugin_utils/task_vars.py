# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side helpers shared by the collection's action plugins."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.rlinfra.verl.plugins.module_utils.common import settings
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_shapes
from ansible_collections.rlinfra.verl.plugins.module_utils.common.settings import plain

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import Args


def read(templar: Any, task_vars: Mapping[str, Any], names: Iterable[str]) -> tuple[dict[str, Any], list[str]]:
    """The values of ``names`` as the play sees them (templated, plain Python), for the actions check_settings
    and command_line. Returns ``(values, errors)``; an undefined name is left out."""
    values, errors = {}, []
    for name in names:
        if name in task_vars:
            try:
                values[name] = plain(templar.template(task_vars[name]))
            except AnsibleError as e:
                errors.append("%s could not be read: %s" % (name, str(e).splitlines()[0]))
    return values, errors


def settings_failure(
    templar: Any, task_vars: Mapping[str, Any], roles: Collection[str]
) -> tuple[list[str], dict[str, Any]]:
    """The roles' variables checked as values (rules: module_utils/common/settings.py), for the actions check_settings and
    converge_record. Returns ``(checked names, result fields)``: the fields are empty when every value is good, else
    ``failed``, ``errors`` and the one ``msg`` naming the host."""
    # A variable left to the role's default is good by construction: only defined ones are read.
    values, errors = read(templar, task_vars, settings.names_for(roles))
    errors += settings.check(values)
    if not errors:
        return sorted(values), {}
    host = task_vars.get("inventory_hostname", "this host")
    return sorted(values), dict(
        failed=True,
        errors=errors,
        msg="Bad setting%s for %s (nothing was changed): %s"
        % ("s" if len(errors) > 1 else "", host, "; ".join(errors)),
    )


def typed_args(action: ActionBase, declared: Args) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """An action's arguments: Ansible's own spec check (``validate_argument_spec``, which fails the task with its
    line), then the types of module_utils/common/vocabulary.py. Returns ``(args, None)``, or ``(args, failure)`` with the
    task's failed result, one line per bad field, before the action does anything."""
    dummy, args = action.validate_argument_spec(argument_spec=declared.spec)
    lines = declared.errors(args)
    if lines:
        return args, dict(failed=True, changed=False, msg="\n".join(lines))
    return args, None


def shapes_masked(result: dict[str, Any]) -> dict[str, Any]:
    """A failed result's ``msg`` and ``errors`` with every credential-shaped value masked (masking.mask_shapes): a
    line that repeats a value of any field (a token pasted where a cluster name belongs) never shows it."""
    if result.get("failed"):
        if isinstance(result.get("msg"), str):
            result["msg"] = mask_shapes(result["msg"])
        if isinstance(result.get("errors"), list):
            result["errors"] = [mask_shapes(e) for e in result["errors"]]
    return result


class TypedAction(ActionBase):
    """An action whose arguments pass :func:`typed_args` before it does anything. A subclass sets ``ARGS`` (its
    module's ``V.Args``) and writes ``act(result, args, task_vars)``, which returns the task's result."""

    TRANSFERS_FILES = False
    ARGS: Any = None
    # The actions whose callers read ``errors`` (one entry per bad field) get it with a refused argument too.
    ERRORS_LIST = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args, failure = typed_args(self, self.ARGS)
        if failure:
            if self.ERRORS_LIST:
                failure["errors"] = failure["msg"].splitlines()
            result.update(failure)
            return result
        return shapes_masked(self.act(result, args, task_vars))

    def act(self, result: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError
