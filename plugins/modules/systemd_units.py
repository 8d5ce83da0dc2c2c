#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: systemd_units
short_description: Stop, disable and remove systemd units, and make systemd forget them
version_added: 0.14.0
description:
  - For each unit file of O(unit_dir) that O(names) names (a name or a shell pattern such as C(rlinfra-run-*.service)),
    in that order - stops the unit when it runs and disables it when it is enabled, then removes its file; once all
    are removed, one C(systemctl daemon-reload), then C(systemctl reset-failed) of each removed unit (a unit that
    ended with an error status would otherwise stay listed as failed).
  - A unit whose file is missing is left alone, so a second run changes nothing. Used by C(roles/ray/tasks/teardown.yml)
    (module_utils/ray/teardown.py).
author:
  - rlinfra maintainers (@rlinfra)
options:
  names:
    description: Unit file names, or shell patterns of them (C(*), C(?), C([...])).
    type: list
    elements: str
    required: true
  unit_dir:
    description: The directory of the unit files.
    type: path
    default: /etc/systemd/system
attributes:
  check_mode:
    support: full
    description: Says which units would be stopped, disabled and removed; changes nothing.
extends_documentation_fragment:
  - rlinfra.verl.attributes.ABSENT
"""

EXAMPLES = r"""
- name: Stop and remove the runs' supervisors
  rlinfra.verl.systemd_units:
    names: [rlinfra-run-*.service]
"""

RETURN = r"""
removed:
  description: The unit files removed (in check mode, that would be).
  returned: success
  type: list
  elements: str
stopped:
  description: The units that ran and were (would be) stopped.
  returned: success
  type: list
  elements: str
disabled:
  description: The units that were (would be) disabled.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.teardown import UNIT_DIR, units_absent

ARGS = vocabulary.Args(
    names=vocabulary.ListOf(
        vocabulary.Text(
            empty=False,
            max_len=255,
            pattern=r"^[A-Za-z0-9*?\[][A-Za-z0-9@_.:*?\[\]-]*\.(service|timer|socket|path|mount)$",
            what="a systemd unit file name or shell pattern (letters, digits, @ _ . : - * ? [ ], ending .service, "
            ".timer, .socket, .path or .mount)",
            sample="rlinfra-sample.service",
        ),
        required=True,
        empty=False,
    ),
    unit_dir=vocabulary.AbsPath("config", default=UNIT_DIR),
    state=vocabulary.Choice(("absent",), default="absent"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, units_absent)


if __name__ == "__main__":
    main()
