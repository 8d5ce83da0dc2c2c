#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Documentation stub: the work is done on the controller by plugins/action/check_settings.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: check_settings
short_description: Check the roles' variables as values before anything changes
description:
  - Runs on the controller and never contacts the host. For each variable of the named roles that is defined
    for the host (inventory, group_vars, C(-e), role defaults inside a role), checks what an argument spec's type
    cannot - an IP address Ray can bind to and advertise (not C(0.0.0.0)), ports from 1 to 65535 used once and
    outside Ray's worker port range, GPU and CPU counts, mount option strings that C(/etc/fstab) accepts, LVM
    names, and no newline or control character in anything written to a systemd unit, an environment file or
    C(/etc/fstab).
  - Fails with one line naming every bad variable, what it must be and the value it got. Changes nothing.
  - The rules live in C(plugins/module_utils/common/settings.py).
version_added: 0.3.0
author:
  - rlinfra maintainers (@rlinfra)
options:
  roles:
    description: The roles whose variables to check (by their prefix).
    type: list
    elements: str
    required: true
    choices: [storage_lvm, nfs_mount, python_env, ray, hyperbolic, fitness, rlinfra]
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Check the Ray settings
  rlinfra.verl.check_settings:
    roles: [ray]
"""

RETURN = r"""
checked:
  description: The variables that were defined and checked.
  returned: always
  type: list
  elements: str
errors:
  description: One line per bad variable.
  returned: failed
  type: list
  elements: str
"""
