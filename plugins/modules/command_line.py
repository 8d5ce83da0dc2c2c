#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Documentation stub: the work is done on the controller by plugins/action/command_line.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: command_line
short_description: Read a playbook's command-line switches strictly, before anything is done
description:
  - Runs on the controller and never contacts a host. Reads the switches of one of the collection's playbooks
    (C(-e exp=NAME), C(-e dry_run=true), ...) as the play sees them and the names given with C(-e).
  - On/off switches must be true/false/yes/no/1/0 (any case) - C(| bool) would read a typo as false. Counts
    (C(attempt), C(step)) must be whole numbers from 1. An on/off switch or count of another playbook
    (C(stop.yml -e dry_run=true) would stop for real) and a near miss of a switch's name (C(-e dryrun=true),
    C(-e dry-run=true)) are refused. The words C(exp), C(run), C(cluster) pass everywhere - an AWX workflow sends
    its survey answers to every playbook of its chain.
  - Fails with one line naming every problem and saying nothing was done. Variables of the collection's roles
    (C(verl_job_*), C(ray_*), ...) and names far from any switch pass untouched.
  - A playbook that works on a cluster of the inventory (O(cluster)) fails with one line, naming the inventory
    sources, when no host is in group C(ray_head) - Ansible only warns when a source cannot be loaded, and the run
    would otherwise go on, and succeed, on no hosts.
  - The rules live in C(plugins/module_utils/common/cli.py).
version_added: 0.3.0
author:
  - rlinfra maintainers (@rlinfra)
options:
  playbook:
    description: The playbook whose switches to read.
    type: str
    required: true
    choices: [fitness, logs, merge, provision, site, status, stop, submit, teardown]
  cluster:
    description:
      - Whether the run needs a host in group C(ray_head); checked only when the switches are good.
      - Unset, the playbooks C(site), C(submit), C(status), C(stop), C(logs), C(merge) and C(fitness) need one.
    type: bool
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the command line
  rlinfra.verl.command_line:
    playbook: submit
"""

RETURN = r"""
switches:
  description: The playbook's switches that were set, parsed (booleans, whole numbers, words).
  returned: always
  type: dict
  sample: {exp: smoke, dry_run: true}
errors:
  description: One line per problem.
  returned: failed
  type: list
  elements: str
"""
