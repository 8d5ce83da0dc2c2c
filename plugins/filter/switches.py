# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters ``rlinfra.verl.strict_bool`` and ``rlinfra.verl.parse_switches``: on/off switches given with
``-e`` read strictly. Ansible's ``| bool`` turns any unknown word into false, so a typo such as
``-e teardown_purge=ture`` would silently do the opposite of what was asked; here it is an error.

    {{ teardown_purge | default(false) | rlinfra.verl.strict_bool('teardown_purge') }}
    {{ {'teardown_purge': teardown_purge | default(false)} | rlinfra.verl.parse_switches }}
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.module_utils.common.switches import switch_value


def strict_bool(value, name="switch"):
    """The boolean ``value`` stands for; raises an error naming ``name`` for anything else."""
    result, error = switch_value(value, name)
    if error:
        raise AnsibleFilterError(error)
    return result


def parse_switches(switches):
    """``{name: raw value}`` -> ``{"values": {name: bool}, "errors": [one line per bad switch]}``; a bad
    switch has no entry in ``values``."""
    if not isinstance(switches, dict):
        raise AnsibleFilterError("parse_switches expects a mapping of switch names to values")
    values, errors = {}, []
    for name in sorted(switches):
        result, error = switch_value(switches[name], name)
        if error:
            errors.append(error)
        else:
            values[name] = result
    return {"values": values, "errors": errors}


class FilterModule:
    def filters(self):
        return {"strict_bool": strict_bool, "parse_switches": parse_switches}
