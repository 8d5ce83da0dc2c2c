#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_config_check
short_description: Compose verl's Hydra config with an experiment's overrides, with the Python of the node's Ray container
version_added: 0.3.0
description:
  - The verl config preflight of C(submit.yml) in container mode (C(ray_container_image)), run on the head - the
    check runs with the verl and hydra of the image the job will run in, not with the controller's.
  - Runs C(<engine_path> exec -i <container> python3 -) and hands the image's Python, on its standard input, the
    check's code (C(module_utils/verl/config_check.py) - the standard library, hydra and omegaconf; verl's config folder
    is found with C(importlib.util.find_spec), verl is never imported) with the overrides as JSON inside it - never in
    any process's arguments.
  - Only reads. A check that failed or was skipped (the image has no verl or hydra) is RV(check), not the task's
    failure; M(rlinfra.verl.verl_experiment_render) calls this module itself when given the head's C(container) and
    applies C(verl_job_verl_config_check).
author:
  - rlinfra maintainers (@rlinfra)
options:
  engine_path:
    description: The container engine (podman or docker), as the C(rlinfra_ray) local fact's C(container.engine_path) names it.
    type: path
    required: true
  container:
    description: The running container of the node's Ray (the fact's C(container.name), for example C(rlinfra-ray-head)).
    type: str
    required: true
  image_id:
    description: The image ID the container runs (the fact's C(container.image_id)); its first 12 characters name the image in the result.
    type: str
    required: true
  node:
    description: How the result names this host (the inventory name); empty for the host's own name.
    type: str
    default: ""
  overrides:
    description: The rendered Hydra overrides (argv items, as verl's entrypoint receives them).
    type: list
    elements: str
    default: []
  config_name:
    description: verl's Hydra config to compose (the experiment's C(entrypoint.config)).
    type: str
    default: ppo_trainer
  timeout:
    description: Seconds the image's Python may take.
    type: int
    default: 300
seealso:
  - module: rlinfra.verl.verl_experiment_render
  - module: rlinfra.verl.ray_container
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Read the head's Ray container from its rlinfra_ray local fact
  rlinfra.verl.ray_cluster_info:
  become: true
  register: cluster

- name: Compose verl's config with the image's verl
  rlinfra.verl.verl_config_check:
    engine_path: "{{ cluster.container.engine_path }}"
    container: "{{ cluster.container.name }}"
    image_id: "{{ cluster.container.image_id }}"
    node: "{{ inventory_hostname }}"
    overrides: ["trainer.nnodes=2", "trainer.n_gpus_per_node=8"]
  become: true
  register: verl_config

- name: Show the result
  ansible.builtin.debug:
    msg: "{{ verl_config.line }}"
"""

RETURN = r"""
runtime:
  description: How the target ran the code - V(script), V(local) or V(module) (as for M(rlinfra.verl.ray_cluster_info)).
  returned: always
  type: str
  sample: script
check:
  description: The preflight check, as M(rlinfra.verl.verl_experiment_render) lists its checks.
  returned: always
  type: dict
  contains:
    name:
      description: V(verl_config).
      type: str
      sample: verl_config
    status:
      description: V(passed), V(failed) or V(skipped) (the image has no verl or hydra).
      type: str
      sample: passed
    message:
      description: One line naming the image and the host the check ran in.
      type: str
      sample: "verl config check passed: 31 override(s) compose with verl 0.9.1's ppo_trainer - verl 0.9.1 config in image 0123456789ab on head-1"
    python:
      description: The image's interpreter that ran the check.
      type: str
      returned: when the image's Python answered
      sample: /usr/bin/python3
line:
  description: "C(<status>: <message>)."
  returned: always
  type: str
  sample: "passed: verl config check passed: 31 override(s) compose with verl 0.9.1's ppo_trainer - verl 0.9.1 config in image 0123456789ab on head-1"
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.image_config_check import check

ARGS = vocabulary.Args(
    engine_path=vocabulary.AbsPath("reads", required=True, sample="/usr/bin/podman"),
    container=vocabulary.Name(required=True, sample="rlinfra-ray-head"),
    image_id=vocabulary.Text(
        required=True, empty=False, pattern=r"^[0-9a-f]{64}$", what="an image ID (64 hex characters)", sample="0" * 64
    ),
    node=vocabulary.Text(default=""),
    # Hydra override items: a value may hold a line break or a tab (a prompt template), hence lines=True.
    overrides=vocabulary.ListOf(vocabulary.Text(lines=True, max_len=1 << 16), default=[]),
    config_name=vocabulary.Text(
        empty=False,
        pattern=r"^[A-Za-z0-9_][A-Za-z0-9_./-]*$",
        what="a Hydra config name (e.g. ppo_trainer)",
        default="ppo_trainer",
    ),
    timeout=vocabulary.Seconds(1, 3600, integer=True, default=300),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, check)


if __name__ == "__main__":
    main()
