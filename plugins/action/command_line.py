# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.command_line``: a playbook's ``-e`` switches read strictly before
anything is done. Documentation: plugins/modules/command_line.py; the rules: module_utils/common/cli.py."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common import cli, vocabulary
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction, read

ARGS = vocabulary.Args(playbook=vocabulary.Choice(sorted(cli.PLAYBOOKS), required=True), cluster=vocabulary.Switch())
ARGUMENT_SPEC = ARGS.spec


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def _given(self):
        """The names passed with -e (AWX's extra vars included), or None when they cannot be read."""
        try:
            from ansible.utils.vars import load_extra_vars

            return set(load_extra_vars(self._loader))
        except Exception:  # pylint: disable=broad-except
            return None

    def act(self, result, args, task_vars):
        playbook = args["playbook"]
        values, errors = read(self._templar, task_vars, cli.PLAYBOOKS[playbook] + cli.OWN)
        # AWX marks its jobs with awx_job_id (tower_job_id before AWX 9): their blank survey answers are "not set".
        awx = any(task_vars.get(n) not in (None, "") for n in ("awx_job_id", "tower_job_id"))
        parsed, more = cli.check(playbook, self._given(), values, awx=awx)
        errors += more
        result.update(changed=False, switches=parsed)
        if errors:
            result.update(failed=True, errors=errors, msg=cli.summary(playbook, errors))
            return result
        cluster = args.get("cluster")
        if (playbook in cli.NEEDS_CLUSTER if cluster is None else cluster) and not task_vars.get("groups", {}).get(
            "ray_head"
        ):
            result.update(failed=True, msg=cli.no_cluster(playbook, task_vars.get("ansible_inventory_sources")))
        return result
