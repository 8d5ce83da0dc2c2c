#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: idle_guard
short_description: Remove the timer that releases an idle cluster's Hyperbolic instances
version_added: 0.9.0
description:
  - The guard itself - C(rlinfra-idle-guard.timer) and its service on a cluster's head, its program and its root-only
    configuration - is the role C(rlinfra.verl.ray_head)'s templates (C(ray_head_idle_release_after), docs/INVENTORY.md).
  - O(state=absent) stops and removes the timer, its units, the configuration and the program's directory (only when it
    holds the guard's program, or the package tree earlier versions copied there), and the configuration's directory
    when that is left empty. site.yml removes a guard this way when C(ray_head_idle_release_after) is back to 0, and
    teardown.yml always.
author:
  - rlinfra maintainers (@rlinfra)
options:
  root:
    description: Where the guard's program lives.
    type: path
    default: /opt/rlinfra/idle-guard
  config_path:
    description: The guard's configuration (root-only).
    type: path
    default: /etc/rlinfra/idle-guard.json
  unit_dir:
    description: Where the units are.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    description: Says what would be removed and removes nothing.
  diff_mode:
    support: none
    description: RV(files) names what goes.
extends_documentation_fragment:
  - rlinfra.verl.attributes.ABSENT
"""

EXAMPLES = r"""
- name: Remove the idle guard, where there is one
  rlinfra.verl.idle_guard:
    state: absent
  become: true
"""

RETURN = r"""
files:
  description: The files removed (or that would be).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.idle_guard_install import remove

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("absent",), default="absent"),
    root=vocabulary.AbsPath("owns", spaces=False, default="/opt/rlinfra/idle-guard"),
    config_path=vocabulary.AbsPath("config", spaces=False, default="/etc/rlinfra/idle-guard.json"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    remove(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
