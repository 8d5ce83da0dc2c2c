# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side helpers shared by the collection's action plugins."""

from __future__ import annotations

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.settings import plain


def read(templar, task_vars, names):
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
