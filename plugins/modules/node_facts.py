#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: node_facts
short_description: The node's addresses and the collection's local facts, under ansible.builtin.setup's names, cheaply
version_added: 0.3.0
description:
  - Sets C(ansible_default_ipv4) (address, interface, gateway, prefix of the interface of the default route, found
    the way M(ansible.builtin.setup) finds it, with C(ip -4 route get)), C(ansible_all_ipv4_addresses) (every IPv4
    address but loopback ones) and C(ansible_local.<name>) for each JSON local fact named in O(local).
  - What C(ray_private_ip) and the Ray firewall need, for a fraction of what gathering the network subset costs (no
    fact framework on the node, a few small facts for the controller to carry through every later task).
    site.yml uses it instead of gathering facts; M(ansible.builtin.setup) gives the same names when you gather.
  - C(ansible_local) holds only the facts named in O(local).
author:
  - rlinfra maintainers (@rlinfra)
attributes:
  facts:
    support: full
    description: Sets the facts named above.
seealso:
  - module: ansible.builtin.setup
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
  - rlinfra.verl.local_facts
"""

EXAMPLES = r"""
- name: Learn the node's addresses and its Ray local fact
  rlinfra.verl.node_facts:

- name: Use them
  ansible.builtin.debug:
    msg: "{{ ansible_default_ipv4.address }} runs Ray's {{ ansible_local.rlinfra_ray.role | default('nothing') }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts set.
  returned: always
  type: dict
  contains:
    ansible_default_ipv4:
      description: C(address), C(interface), C(alias), and when known C(gateway) and C(prefix); empty without an IPv4 route.
      type: dict
      sample: {address: 10.0.0.5, interface: eth0, alias: eth0, gateway: 10.0.0.1, prefix: "24"}
    ansible_all_ipv4_addresses:
      description: The node's IPv4 addresses, loopback ones left out.
      type: list
      elements: str
      sample: [10.0.0.5]
    ansible_local:
      description: The local facts read, by name.
      type: dict
      sample: {rlinfra_ray: {role: head, node_ip: 10.0.0.5}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.node.facts import gather

ARGS = vocabulary.Args(
    # Each names <fact_dir>/<name>.fact: a name, never a path.
    local=vocabulary.ListOf(vocabulary.Name(), default=["rlinfra_ray"]),
    fact_dir=vocabulary.AbsPath("config", default="/etc/ansible/facts.d"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, gather)


if __name__ == "__main__":
    main()
