#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_checkpoint_info
short_description: Read a verl checkpoint directory - steps, latest step, and the world size of its shards
version_added: 0.2.0
description:
  - Lists the C(global_step_N) directories of a verl checkpoint directory, the latest step (from
    C(latest_checkpointed_iteration.txt), else the highest step), and the world size its FSDP shards were
    written with (C(model_world_size_W_rank_R.pt)), so that a resume on a cluster of another shape can be
    refused before it is submitted.
  - A missing directory is not an error (RV(exists) is false).
author:
  - rlinfra maintainers (@rlinfra)
options:
  path:
    description: The checkpoint directory (verl's C(trainer.default_local_dir)).
    type: path
    required: true
extends_documentation_fragment:
  - rlinfra.verl.attributes.read_only
"""

EXAMPLES = r"""
- name: Where would a resume start, and on which world size?
  rlinfra.verl.verl_checkpoint_info:
    path: /data/checkpoints/verl_examples/default/gsm8k_ppo_qwen05b
  register: ckpt
"""

RETURN = r"""
exists:
  description: Whether the directory exists.
  returned: always
  type: bool
steps:
  description: Steps with a C(global_step_N) directory, ascending.
  returned: always
  type: list
  elements: int
latest_step:
  description: The step a resume would start from, or null.
  returned: always
  type: int
step_dir:
  description: Directory of that step, or null.
  returned: always
  type: str
world_size:
  description: World size of the FSDP shards of that step (the largest when several are found), or null.
  returned: always
  type: int
world_sizes:
  description: Every world size found among that step's shards.
  returned: always
  type: list
  elements: int
ranks:
  description: Ranks found for RV(world_size).
  returned: always
  type: list
  elements: int
resume_step:
  description:
    - The newest step at or before RV(latest_step) whose directory holds the shard of every rank (a node lost while
      saving leaves one out), or null when none does. A step without any shard file counts as whole.
  returned: always
  type: int
  version_added: 0.13.0
resume_dir:
  description: Directory of RV(resume_step), or null.
  returned: always
  type: str
  version_added: 0.13.0
incomplete:
  description: The newer steps passed over for RV(resume_step), newest first.
  returned: always
  type: list
  elements: dict
  version_added: 0.13.0
  contains:
    step:
      description: The step.
      type: int
    missing_ranks:
      description: The ranks whose shard is missing, or null when the step's directory is gone.
      type: list
      elements: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.checkpoint import info

ARGS = vocabulary.Args(path=vocabulary.AbsPath("reads", required=True))
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, info)


if __name__ == "__main__":
    main()
