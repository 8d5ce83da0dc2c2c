#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: fitness_exclude
short_description: Leave an unfit worker out of its Ray cluster, or take it back
version_added: 0.10.0
description:
  - O(state=excluded) stops and disables the node's Ray service (O(service)) and records why in the local fact
    C(rlinfra_excluded) (O(fact_path), JSON - C(reason), C(since)); site.yml then leaves the node out of its cluster
    (no Ray started there, not waited for) and status.yml names it. fitness.yml does this with
    C(fitness_exclude_unfit=true).
  - O(state=included) removes the record; the next site.yml starts the node's Ray again. Nothing is started here.
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: Whether the node is left out.
    type: str
    choices: [excluded, included]
    required: true
  reason:
    description: Why (the fitness lines); kept in the record.
    type: str
    default: ""
  service:
    description: The node's Ray service.
    type: str
    default: ray-worker.service
  fact_path:
    description: The record.
    type: path
    default: /etc/ansible/facts.d/rlinfra_excluded.fact
attributes:
  check_mode:
    support: full
    description: Says what it would change.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Leave this worker out
  rlinfra.verl.fitness_exclude:
    state: excluded
    reason: "gpu-2 GPU 3 (00000000:3B:00.0): Xid 79 (GPU has fallen off the bus)"
"""

RETURN = r"""
since:
  description: When the node was left out (ISO 8601), empty when it is not.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_exclude import exclude

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("excluded", "included"), required=True),
    reason=vocabulary.Text(lines=True, max_len=65536, default=""),
    service=vocabulary.Text(
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9:_.@-]*\.service$", what="a systemd service name", default="ray-worker.service"
    ),
    fact_path=vocabulary.AbsPath("config", default="/etc/ansible/facts.d/rlinfra_excluded.fact"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    exclude(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
