#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_node_guard
short_description: Refuse to restart Ray under a running job unless told to
version_added: 0.2.0
description:
  - Takes one report per node of the play (whether Ray would restart there and why, from
    M(rlinfra.verl.ray_node_state); on one report per cluster, its running jobs, from
    M(rlinfra.verl.ray_cluster_info)) and fails with one line when, in some cluster, Ray would restart on a node while
    a job is C(PENDING) or C(RUNNING) there (or while its jobs cannot be listed) - naming the nodes, why they
    would restart, the jobs and how to stop them - unless O(restart_running_jobs) is true; then it warns.
  - O(restart_running_jobs) is parsed strictly - a boolean, V(0)/V(1), or V(true)/V(false)/V(yes)/V(no)/V(1)/V(0)
    in any case; anything else fails, so that a typo never reads as either answer.
  - Only reads its arguments; run it once (C(run_once)) after the nodes' reports are made, before changing anything.
  - Runs on the controller (an action plugin of the same name), so it costs no round trip to a node.
author:
  - rlinfra maintainers (@rlinfra)
options:
  nodes:
    description: One report per node.
    type: list
    elements: dict
    required: true
    suboptions:
      host:
        description: Inventory name of the node.
        type: str
        required: true
      cluster:
        description: Its C(ray_cluster).
        type: str
        default: default
      reports_jobs:
        description: Whether its report carries the cluster's jobs (one node per cluster, the head when it is in the play).
        type: bool
        default: false
      restart:
        description: Whether Ray would restart on it (RV(rlinfra.verl.ray_node_state#module:restart)).
        type: bool
        default: false
      reasons:
        description: Why (RV(rlinfra.verl.ray_node_state#module:reasons)).
        type: list
        elements: str
        default: []
      running_jobs:
        description: On the report that carries the jobs, RV(rlinfra.verl.ray_cluster_info#module:running_jobs).
        type: list
        elements: dict
      jobs_error:
        description: On the report that carries the jobs, why they could not be listed (empty when they were).
        type: str
        default: ""
  restart_running_jobs:
    description: Restart anyway (the running jobs fail). Strictly a boolean, see above.
    type: raw
    default: false
seealso:
  - module: rlinfra.verl.ray_node_state
  - module: rlinfra.verl.ray_cluster_info
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Refuse to restart Ray under a running job
  rlinfra.verl.ray_node_guard:
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'node_report') | list }}"
    restart_running_jobs: "{{ ray_restart_running_jobs | default(false) }}"
  run_once: true
"""

RETURN = r"""
allow:
  description: O(restart_running_jobs) as a boolean.
  returned: always
  type: bool
running_jobs:
  description: Cluster name -> submission ids of its running jobs.
  returned: always
  type: dict
  sample: {"default": ["rlinfra-smoke-default"]}
restarting:
  description: Cluster name -> the nodes where Ray would restart.
  returned: always
  type: dict
  sample: {"default": ["gpu-0", "gpu-1"]}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_state import guard_module

ARGS = vocabulary.Args(
    nodes=vocabulary.ListOf(
        vocabulary.Options(
            dict(
                host=vocabulary.Text(empty=False, max_len=255, required=True),
                cluster=vocabulary.Name(default="default"),
                reports_jobs=vocabulary.Switch(default=False),
                restart=vocabulary.Switch(default=False),
                reasons=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=200), default=[]),
                running_jobs=vocabulary.ListOf(ray_client.JOB_RECORD),
                # A registered result's msg: Ansible's own ("MODULE FAILURE\nSee stdout/stderr...") has lines.
                jobs_error=vocabulary.Text(lines=True, max_len=65536, default=""),
            )
        ),
        required=True,
    ),
    # Ansible type raw: Ansible's bool would read 'on' or 't' too. Named in lines by the variable site.yml sets it from.
    restart_running_jobs=vocabulary.Switch(
        ansible="raw", default=False, label="ray_restart_running_jobs", hint="; nothing was changed"
    ),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, guard_module)


if __name__ == "__main__":
    main()
