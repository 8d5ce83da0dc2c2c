# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Options of the modules that read the node's local facts (module_utils/node/facts.py): node_facts, and
converge_record, which sets the same facts."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  local:
    description: Local facts to read from O(fact_dir) (C(<name>.fact), JSON), as C(ansible_local.<name>).
    type: list
    elements: str
    default: [rlinfra_ray]
  fact_dir:
    description: Where local facts live.
    type: path
    default: /etc/ansible/facts.d
"""
