#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_merge
short_description: Merge a verl FSDP actor checkpoint into a Hugging Face model, and optionally upload it
version_added: 0.3.0
description:
  - Picks the step to merge (O(step), else the one C(latest_checkpointed_iteration.txt) names), checks that
    C(<checkpoint_dir>/global_step_N/actor) is a complete verl FSDP checkpoint (shards, C(fsdp_config.json),
    C(huggingface/config.json)), and runs verl's model merger
    (C(python -m verl.model_merger merge --backend fsdp)) from O(venv) into a staging directory next to O(target).
  - In container mode (the C(rlinfra_ray) local fact names a C(container), site.yml with C(ray_container_image), and
    O(venv) is not set) the merger and the uploader run inside the head's running Ray container
    (C(<engine> exec -i --env NAME ... rlinfra-ray-head python3 ...)) with the image's Python, the verl the jobs
    trained with. The checkpoint and the target's directory must be seen inside (volumes at the same path,
    C(ray_container_mounts)); one that is not, or a container that is not running, is one line before anything
    changes.
  - The staging directory then replaces O(target), with a record (C(.rlinfra-merge.json)) of the step, the source
    and the shards' names, sizes and modification times; a re-run for the same checkpoint changes nothing, a
    checkpoint saved again under the same step is merged again. A failed merge leaves O(target) as it was.
  - With O(hf_repo), uploads the model once per step. The token reaches the uploader on its standard input,
    never in a process's arguments.
  - An experiment of another framework than verl (O(framework)) has nothing for verl's model merger; the module then
    changes nothing and says so in RV(report).
  - Every failure is one line, the task's message.
author:
  - rlinfra maintainers (@rlinfra)
options:
  checkpoint_dir:
    description: The experiment's checkpoint directory (verl's C(trainer.default_local_dir)).
    type: path
    required: true
  experiment:
    description: The experiment's name, for the record and the messages.
    type: str
    required: true
  project:
    description: The experiment's project, for the record.
    type: str
    default: ""
  step:
    description: The step to merge; unset, the one verl's tracker file names.
    type: int
  target:
    description: Where the merged model goes (replaced as a whole).
    type: path
    required: true
  venv:
    description:
      - The Python environment holding verl.
      - Empty (the default) for the C(venv) of the C(rlinfra_ray) local fact of the host that runs the module
        (C(/etc/ansible/facts.d/rlinfra_ray.fact), written by site.yml); a host without one fails with one line.
      - Empty where that fact says container mode (its C(container)), the image's C(python3) inside the head's
        running Ray container instead (RV(runtime=container)). Set, it wins over the fact in either mode.
    type: path
    default: ""
  framework:
    choices: [verl, nemo_rl, custom]
    description:
      - The experiment's framework (C(framework) of M(rlinfra.verl.verl_experiment)'s C(experiment)). Only V(verl)
        experiments are merged; any other returns RV(merged=false) and a RV(report) that says why, and fails nothing.
    type: str
    default: verl
  force:
    description: Merge even when O(target) already holds this checkpoint.
    type: bool
    default: false
  trust_remote_code:
    description: Pass C(--trust-remote-code) to the merger.
    type: bool
    default: false
  host_label:
    description: How the messages name this host.
    type: str
    default: this host
  logs_tail_lines:
    description: Lines of the merger's output returned when it fails.
    type: int
    default: 30
  hf_repo:
    description: Hugging Face repository to upload the model to; empty, no upload.
    type: str
    default: ""
  hf_token:
    description: The Hugging Face token (required with O(hf_repo)).
    type: str
    default: ""
  hf_private:
    description: Create the repository private.
    type: bool
    default: true
  hf_endpoint:
    description: Hugging Face endpoint (C(HF_ENDPOINT)); empty, the public Hub.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Says what it would merge; merges and uploads nothing.
  diff_mode:
    support: none
    description: Nothing to diff.
"""

EXAMPLES = r"""
- name: Merge the latest checkpoint of gsm8k_ppo
  rlinfra.verl.verl_merge:
    checkpoint_dir: /data/checkpoints/verl_examples/default/gsm8k_ppo
    experiment: gsm8k_ppo
    target: /data/models/gsm8k_ppo
    venv: /opt/rlinfra/venv

- name: The same on the head, with the venv of its rlinfra_ray local fact
  rlinfra.verl.verl_merge:
    checkpoint_dir: /data/checkpoints/verl_examples/default/gsm8k_ppo
    experiment: gsm8k_ppo
    framework: "{{ exp.experiment.framework }}"
    target: /data/models/gsm8k_ppo
  become: true
"""

RETURN = r"""
step:
  description: The step merged (or found merged already); null for an experiment of another framework.
  returned: when a checkpoint was found, or the experiment is not a verl one
  type: int
source:
  description: The actor checkpoint directory; empty for an experiment of another framework.
  returned: when a checkpoint was found, or the experiment is not a verl one
  type: str
target:
  description: The model directory; empty for an experiment of another framework.
  returned: always
  type: str
venv:
  description: The Python environment used (O(venv), or the C(rlinfra_ray) local fact's C(venv)); empty in container
    mode.
  returned: when the experiment is a verl one and the environment is known
  type: str
runtime:
  description: Where verl's merger and the uploader run - V(venv) (from RV(venv)) or V(container) (inside
    RV(container) with the image's Python).
  returned: when the experiment is a verl one and the environment is known
  type: str
  choices: [venv, container]
container:
  description: The head's Ray container the merger runs in (container mode); empty otherwise.
  returned: when the experiment is a verl one and the environment is known
  type: str
merged:
  description: Whether the merger ran (in check mode, whether it would).
  returned: always
  type: bool
uploaded_to:
  description: The repository uploaded to by this run, or empty.
  returned: always
  type: str
record:
  description: The model directory's record after the run.
  returned: when a checkpoint was found
  type: dict
report:
  description: One line saying what was done.
  returned: success
  type: str
merger_output:
  description: The end of the merger's output.
  returned: when the merger failed
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.merge import run

ARGS = vocabulary.Args(
    checkpoint_dir=vocabulary.AbsPath("reads", required=True),
    experiment=vocabulary.Name(required=True),
    project=vocabulary.Name(empty=True, default=""),
    step=vocabulary.Int(1),
    target=vocabulary.AbsPath("writes", required=True),
    venv=vocabulary.AbsPath("reads", empty=True, default=""),
    framework=vocabulary.Choice(("verl", "nemo_rl", "custom"), default="verl"),
    force=vocabulary.Switch(default=False),
    trust_remote_code=vocabulary.Switch(default=False),
    host_label=vocabulary.Text(empty=False, max_len=200, default="this host"),
    logs_tail_lines=vocabulary.Int(0, 10000, default=30),
    hf_repo=vocabulary.HfRepoId(empty=True, default=""),
    hf_token=vocabulary.Secret(default=""),
    hf_private=vocabulary.Switch(default=True),
    hf_endpoint=vocabulary.Url(empty=True, default=""),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
