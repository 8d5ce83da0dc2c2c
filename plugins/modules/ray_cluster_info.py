#!/usr/bin/python
# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_cluster_info
short_description: Alive nodes and resources of a Ray cluster, optionally waiting for N nodes
version_added: 0.1.0
description:
  - Reads the nodes of a Ray cluster from the State API of the head's dashboard over plain HTTP(S);
    needs only the Python standard library (no C(ray) package) on the host that runs it.
  - With O(wait_for_nodes) and/or O(expected_hosts) it polls until the cluster has that many alive
    nodes (and every expected host has joined), and fails naming the missing hosts when O(timeout) passes.
  - Without O(address), on a node of a cluster set up by site.yml (the head), the dashboard and its token come from
    the node's C(rlinfra_ray) local fact; RV(address) and RV(venv) say what was used.
author:
  - rlinfra maintainers (@rlinfra)
options:
  wait_for_nodes:
    description:
      - Wait until at least this many nodes (head included) are alive; not negative.
    type: int
  expected_hosts:
    description:
      - IP addresses or host names of the nodes that should be in the cluster.
      - A host counts as present when it equals a node's IP or name, or resolves to a node's IP.
      - When set, the module also waits until all of them are alive, and returns RV(missing_hosts).
    type: list
    elements: str
  timeout:
    description:
      - Seconds to wait for O(wait_for_nodes) / O(expected_hosts), not negative. While waiting, a dashboard that
        does not answer yet (a head still starting) is retried until then.
    type: int
    default: 300
  jobs:
    description:
      - Also list the cluster's jobs (RV(jobs), RV(running_jobs)), e.g. to refuse a restart under a running job.
    type: bool
    default: false
seealso:
  - module: rlinfra.verl.ray_job
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Wait until every host of the inventory has joined the cluster
  rlinfra.verl.ray_cluster_info:
    address: "http://{{ ray_private_ip }}:8265"
    auth_token: "{{ ray_auth_token }}"
    wait_for_nodes: "{{ groups['ray_head'] | length + groups['ray_workers'] | length }}"
    expected_hosts: "{{ (groups['ray_head'] + groups['ray_workers']) | map('extract', hostvars, 'ray_private_ip') | list }}"
    timeout: 600
  register: cluster

- name: Show the GPUs available to verl
  ansible.builtin.debug:
    msg: "{{ cluster.alive_nodes }} nodes, {{ cluster.total_gpus }} GPUs, {{ cluster.total_cpus }} CPUs"

- name: On the head, with the dashboard and token of its rlinfra_ray local fact
  rlinfra.verl.ray_cluster_info:
    jobs: true
  become: true
  register: cluster

- name: Show where the cluster is
  ansible.builtin.debug:
    msg: "{{ cluster.address }}: {{ cluster.alive_nodes }} nodes, venv {{ cluster.venv or 'unknown' }}"
"""

RETURN = r"""
runtime:
  description:
    - How the target ran the code - V(script) (the module's code as a plain Python script through the connection, without
      Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself - the
      local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run - no
      pipelining, a path to expand on the target, an option the module refuses).
  returned: always
  type: str
  sample: script
address:
  description: The dashboard URL the module talked to (O(address), or the C(rlinfra_ray) local fact's C(dashboard_url)).
  returned: when the dashboard address is known
  type: str
  sample: http://10.0.0.5:8265
venv:
  description: The cluster's Python environment named by the C(rlinfra_ray) local fact of the host, '' without one.
  returned: when the dashboard address is known
  type: str
  sample: /opt/rlinfra/venv
container:
  description:
    - Container mode - the node's Ray container as the C(rlinfra_ray) local fact names it (C(engine), C(engine_path),
      C(name), C(image), C(image_id)); V({}) for a venv.
  returned: when the dashboard address is known
  type: dict
  sample: {"engine": "podman", "engine_path": "/usr/bin/podman", "name": "rlinfra-ray-head", "image": "verlai/verl:0.9.1",
           "image_id": "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
alive_nodes:
  description: Number of alive nodes, head included.
  returned: always
  type: int
  sample: 2
nodes:
  description: The alive nodes.
  returned: always
  type: list
  elements: dict
  contains:
    node_id:
      description: Ray node id.
      type: str
      sample: 43fa3f0fa9f28e996660f8f2542a02f128a948666c4c1cdfb0536e5b
    node_ip:
      description: IP address the node registered with.
      type: str
      sample: 10.0.0.5
    node_name:
      description: Node name Ray reports (usually the IP).
      type: str
      sample: 10.0.0.5
    is_head:
      description: Whether this is the head node.
      type: bool
      sample: true
    state:
      description: Ray node state.
      type: str
      sample: ALIVE
    resources:
      description: Total resources of the node; whole numbers are integers.
      type: dict
      sample: {"CPU": 32, "GPU": 8, "memory": 17293080986}
total_gpus:
  description: Sum of C(GPU) over the alive nodes (an integer when whole).
  returned: always
  type: float
  sample: 16
total_cpus:
  description: Sum of C(CPU) over the alive nodes (an integer when whole).
  returned: always
  type: float
  sample: 64
jobs:
  description: Every job submitted through the Jobs API, oldest first.
  returned: when O(jobs=true)
  type: list
  elements: dict
  sample: [{"submission_id": "rlinfra-smoke-default", "status": "RUNNING", "start_time": "2026-01-01T00:00:00.000Z",
            "end_time": null, "metadata": {"rlinfra_experiment": "smoke"}, "message": ""}]
running_jobs:
  description: The entries of RV(jobs) that are C(PENDING) or C(RUNNING).
  returned: when O(jobs=true)
  type: list
  elements: dict
missing_hosts:
  description: Entries of O(expected_hosts) that are not alive in the cluster.
  returned: when expected_hosts is set
  type: list
  elements: str
  sample: [10.0.0.7]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.cluster_info import info

ARGS = vocabulary.Args(
    wait_for_nodes=vocabulary.Int(0),
    # An empty entry passes the type for module_utils/ray/cluster_info.py's own line (an inventory variable not set).
    expected_hosts=vocabulary.ListOf(vocabulary.Host(empty=True)),
    timeout=vocabulary.Seconds(0, integer=True, default=300),
    jobs=vocabulary.Switch(default=False),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, info)


if __name__ == "__main__":
    main()
