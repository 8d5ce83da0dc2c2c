# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.hostvar_values``: a variable of each of some hosts, for the hosts that have it.

    {{ fitness__members | rlinfra.verl.hostvar_values(hostvars, 'fitness__me') }}

What a play reads across hosts must survive a host that dropped out (unreachable, frozen, failed before it set the
variable): ``map('extract', hostvars) | map(attribute=..., default=none)`` fails there on ansible-core 2.19
(``'HostVarsVars' has no attribute ...``, a template error). The hosts left out are for the caller to name.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def _value(hostvars, host, name):
    try:
        found = hostvars[host]
        if name not in found:
            return None, False
        return found[name], True
    except KeyError:
        return None, False


def hostvar_values(hosts, hostvars, name):
    """The value of ``name`` for each of ``hosts`` that has it, in the hosts' order."""
    if not isinstance(name, str) or not name:
        raise AnsibleFilterError("hostvar_values: the variable's name must be text, got %r" % (name,))
    out = []
    for host in hosts or []:
        value, found = _value(hostvars, host, name)
        if found:
            out.append(value)
    return out


def hosts_without(hosts, hostvars, name):
    """The hosts of ``hosts`` that do not have ``name`` (dropped out before they set it)."""
    return [host for host in hosts or [] if not _value(hostvars, host, name)[1]]


class FilterModule:
    def filters(self):
        return {"hostvar_values": hostvar_values, "hosts_without": hosts_without}
