#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_metrics
short_description: Read the head's Prometheus, or remove a node's metrics services
version_added: 0.9.0
description:
  - The metrics themselves - C(rlinfra-node-exporter.service) on every node, C(rlinfra-prometheus.service) on the
    head, their web configs, units and scrape config - are the role C(rlinfra.verl.ray_metrics)'s templates and
    handlers (docs/OBSERVABILITY.md); this module does what is left around them.
  - V(query) reads the nodes' latest CPU, memory and GPU utilisation from the head's Prometheus (the password read
    from the node's file, never passed) - one line per node.
  - V(absent) stops and removes the units, the web and scrape configs, the password and the local fact, and unmasks
    the distribution's services (O(services) limits it to some); the packages and Prometheus's data stay unless
    O(purge) (the data directory only when the collection made it, module_utils/common/owned.py).
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: What to do.
    type: str
    choices: [query, absent]
    default: query
  address:
    description: O(state=query) - the head's private address; read from O(ray_fact_path) when not given.
    type: str
  fact_path:
    description: The C(rlinfra_metrics) local fact (what this node runs), removed by O(state=absent).
    type: path
    default: /etc/ansible/facts.d/rlinfra_metrics.fact
  services:
    description:
      - O(state=absent) - what to remove, C(exporter) and C(prometheus) (the head's, from a node that is no longer
        the head); the local fact goes only with both.
    type: list
    elements: str
    choices: [exporter, prometheus]
    default: [exporter, prometheus]
  names:
    description:
      - O(state=query) - inventory names by private address, besides the members the head's scrape config names
        (which are read from it).
    type: dict
    default: {}
  ray_fact_path:
    description: O(state=query) without O(address) - the head's C(rlinfra_ray) local fact, whose C(node_ip) is used.
    type: path
    default: /etc/ansible/facts.d/rlinfra_ray.fact
  prometheus_port:
    description: O(state=query) - the port of the head's Prometheus.
    type: int
    default: 9090
  window:
    description: O(state=query) - seconds of samples read; the newest of each is shown.
    type: int
    default: 300
  start:
    description:
      - O(state=query) - the start of the samples read (epoch seconds, e.g. a run's start) instead of O(window)
        seconds before now; each series holds at most 1000 points whatever the span (the step grows). The run report
        of M(rlinfra.verl.ray_job_wait) reads the run's window this way. V(0) - O(window).
    type: float
    default: 0
  storage_dir:
    description: O(state=absent) with O(purge) - Prometheus's data, removed only when the collection made it.
    type: path
  purge:
    description: O(state=absent) - also remove Prometheus's data (see O(storage_dir)).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Says what would be removed; changes nothing.
  diff_mode:
    support: none
    description: RV(files) names what goes.
seealso:
  - module: rlinfra.verl.ray_metrics_info
extends_documentation_fragment:
  - rlinfra.verl.metrics
"""

EXAMPLES = r"""
- name: One utilisation line per node
  rlinfra.verl.ray_metrics:
    state: query
  become: true
  register: usage

- name: Remove the node's metrics services
  rlinfra.verl.ray_metrics:
    state: absent
  become: true
"""

RETURN = r"""
files:
  description: The files and directories removed (or that would be).
  returned: when state is absent
  type: list
  elements: str
services:
  description: What was done to each service (C(stop), C(unmask)).
  returned: when state is absent
  type: dict
lines:
  description: O(state=query) - one utilisation line per node.
  returned: when state is query
  type: list
  elements: str
  sample: ["worker-1: CPU 12%, memory 40%, GPU 55%"]
series:
  description:
    - "O(state=query) - every node's samples over the window, C({kind: {node: [[epoch_s, value or null], ...]}}) for
      the kinds C(cpu), C(memory), C(gpu), C(gpu_memory) (percentages); a kind no exporter reports is left out."
  returned: when state is query
  type: dict
problems:
  description: O(state=query) - the answers that could not be read.
  returned: when state is query
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.observe.metrics_node import run

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("query", "absent"), default="query"),
    address=vocabulary.Address(empty=True),
    config_dir=vocabulary.AbsPath("config", spaces=False, default="/etc/ray"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    fact_path=vocabulary.AbsPath("config", default="/etc/ansible/facts.d/rlinfra_metrics.fact"),
    services=vocabulary.ListOf(vocabulary.Choice(("exporter", "prometheus")), default=["exporter", "prometheus"]),
    names=vocabulary.MapOf(
        vocabulary.Text(empty=False, max_len=255), vocabulary.Text(empty=False, max_len=255), default={}
    ),
    prometheus_port=vocabulary.Port(default=9090),
    window=vocabulary.Seconds(30, 86400, integer=True, default=300),
    # Epoch seconds: from 0 (unset) to the year 2286 - a value outside is a mistake, not a long window.
    start=vocabulary.Number(0, 1e10, default=0),
    ray_fact_path=vocabulary.AbsPath("reads", default="/etc/ansible/facts.d/rlinfra_ray.fact"),
    storage_dir=vocabulary.AbsPath("owns", spaces=False),
    purge=vocabulary.Switch(default=False),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
