#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: fitness_net
short_description: Measure a Ray cluster's links, from its head, through the agents fitness_node started
version_added: 0.10.0
description:
  - Asks every node's agent (M(rlinfra.verl.fitness_node)) to stream to another for O(seconds) and reports what the
    receiver counted, in Gbit/s, over the interface Ray and the collectives use.
  - Every node to the head, one at a time; for a cluster of at most O(pairs_max) nodes every ordered pair, in rounds of
    disjoint pairs. Then tells every agent to stop.
  - The code is in C(plugins/module_utils/node/fitness_net.py).
author:
  - rlinfra maintainers (@rlinfra)
options:
  nodes:
    description: The cluster's members, each C(host), C(ip) (its Ray address, where its agent listens) and C(ifname).
    type: list
    elements: dict
    required: true
  head:
    description: The head's inventory name.
    type: str
    required: true
  port:
    description: The agents' port.
    type: int
    default: 6385
  nonce:
    description: The run's shared secret the agents were started with.
    type: str
    required: true
  seconds:
    description: How long each transfer streams.
    type: float
    default: 1.0
  pairs_max:
    description: Up to this many nodes, every ordered pair is measured; above it, every node to the head.
    type: int
    default: 8
attributes:
  check_mode:
    support: full
    description: Measures nothing in check mode.
  diff_mode:
    support: none
    description: Changes nothing.
"""

EXAMPLES = r"""
- name: Measure the links of the cluster
  rlinfra.verl.fitness_net:
    nodes: [{host: gpu-0, ip: 10.0.0.5}, {host: gpu-1, ip: 10.0.0.6}]
    head: gpu-0
    nonce: "{{ fitness__nonce }}"
"""

RETURN = r"""
links:
  description: One C({from, to, bytes, seconds, gbit}) per transfer, or C({from, to, error}).
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_net import measure

ARGS = vocabulary.Args(
    nodes=vocabulary.ListOf(
        vocabulary.Section(
            dict(
                host=vocabulary.Host(required=True),
                ip=vocabulary.Address(required=True),
                ifname=vocabulary.Text(max_len=256, default=""),
            )
        ),
        required=True,
    ),
    head=vocabulary.Host(required=True),
    port=vocabulary.Port(default=6385),
    nonce=vocabulary.Secret(required=True, empty=False),
    seconds=vocabulary.Number(0.1, 60, unit="seconds", default=1.0),
    pairs_max=vocabulary.Int(0, 64, default=8),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, measure)


if __name__ == "__main__":
    main()
