#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# Documentation only: the work is done on the controller by plugins/action/verl_experiment_render.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_experiment_render
short_description: Render an experiment into its Ray job and run the preflight checks (controller side)
version_added: 0.1.0
description:
  - Takes the experiment M(rlinfra.verl.verl_experiment) loaded and validated (O(loaded)); never reads the file.
  - Renders the Ray job - entrypoint (Hydra overrides, each shell-quoted), C(runtime_env), metadata and
    the deterministic submission id C(rlinfra-<experiment>-<cluster>[-<run>]) - filling
    C(trainer.nnodes), C(trainer.n_gpus_per_node), the checkpoint directory and C(trainer.resume_mode=auto)
    unless the experiment sets them.
  - Runs the preflight checks - verl's own Hydra config composed with the overrides (when verl is installed
    on the controller), GPUs and CPUs of the cluster, required secrets available, the working_dir zip under
    Ray's limit - and writes that zip to O(package_dir).
  - Runs on the controller only (an action plugin); it never contacts a host nor the cluster, and it never
    sees a secret's value, only whether each secret name is available.
author:
  - rlinfra maintainers (@rlinfra)
options:
  loaded:
    description:
      - The result of M(rlinfra.verl.verl_experiment) for the experiment (registered). The file is not read again.
    type: dict
    required: true
  nodes:
    description:
      - Alive nodes of the cluster, as returned by M(rlinfra.verl.ray_cluster_info) (its C(nodes) return value).
      - When omitted (dry run) they are derived from the inventory - the C(ray_head) and C(ray_workers)
        hosts of the cluster, GPUs from C(ray_num_gpus), C(hyperbolic_gpu_count) or O(default_gpus_per_node),
        CPUs from C(ray_num_cpus) when set.
    type: list
    elements: dict
  default_gpus_per_node:
    description: GPUs per host assumed for a dry run when the inventory does not say.
    type: int
    default: 8
  code:
    description:
      - The experiment's code as M(rlinfra.verl.code_checkout) checked it out (C(commit), C(dir), C(workdir)); the
        entrypoint runs in C(workdir). Empty in a dry run (the ref is not resolved; the directory is shown as
        C(<name>@<commit of REF>)).
    type: dict
  code_root:
    description: Where code checkouts go (only for the dry run's display).
    type: str
    default: ""
  secrets_dir:
    description:
      - Directory on the shared volume where the run's secrets file goes (mode 0600, directories 0700); the job
        reads it by its path (E(RLINFRA_SECRETS_FILE)), so no secret value is ever in a process's arguments.
        Empty for C(.rlinfra/secrets) next to O(checkpoint_root).
    type: str
    default: ""
  venv:
    description:
      - Python environment of the cluster (the C(venv) of the C(rlinfra_ray) local fact); its C(bin) is put
        first on the job's C(PATH) (C(<venv>/bin:${PATH}), expanded by Ray) so that C(python3) is that venv.
    type: str
    default: ""
  secret_vars:
    description: Names of the secrets whose values are given in Ansible variables (C(verl_job_secrets)).
    type: list
    elements: str
    default: []
  preflight:
    description: Run the preflight checks.
    type: bool
    default: true
  fail_on_preflight:
    description: Fail when a preflight check fails (a dry run reports them instead).
    type: bool
    default: true
  verl_config_check:
    description:
      - V(auto) composes verl's config when verl is importable on the controller (in container mode, in the image, see
        O(container)) and says it skipped it otherwise; V(required) fails when it cannot; V(skip) does not try.
    type: str
    choices: [auto, required, skip]
    default: auto
  container:
    description:
      - Container mode - the head's Ray container as M(rlinfra.verl.ray_cluster_info) returns it (RV(rlinfra.verl.ray_cluster_info#module:container)),
        from the head's C(rlinfra_ray) local fact. Given, the verl config check runs on the task's host (the head) with
        the image's Python (M(rlinfra.verl.verl_config_check)) instead of the controller's, and its line names the image
        and the head; an image without verl or hydra is a skipped check (failed under O(verl_config_check=required)).
      - Empty (a venv, a dry run) - the controller's Python.
    type: dict
    default: {}
  package_dir:
    description: Directory on the controller where the working_dir zip is written (kept in memory when empty).
    type: str
    default: ""
  wait:
    description: Override of the experiment's C(wait.enabled).
    type: bool
  wait_timeout:
    description: Override of the experiment's C(wait.timeout) (seconds).
    type: int
  progress_interval:
    description: Override of the experiment's C(wait.progress_interval) (seconds between progress lines).
    type: int
  poll_interval:
    description: Override of the experiment's C(wait.poll_interval) (seconds between status polls).
    type: float
  stop_on_timeout:
    description: Override of the experiment's C(wait.stop_on_timeout).
    type: bool
attributes:
  check_mode:
    support: full
    description: Nothing is changed in either mode (the zip is a cache named by its content).
  diff_mode:
    support: none
    description: Nothing to diff.
notes:
  - Secrets are listed by name in the experiment; their values are added to C(runtime_env.env_vars) by a
    C(no_log) task of the M(rlinfra.verl.verl_job) role, from C(verl_job_secrets) or the controller's environment.
seealso:
  - module: rlinfra.verl.verl_experiment
  - module: rlinfra.verl.ray_job
  - module: rlinfra.verl.ray_package
extends_documentation_fragment:
  - rlinfra.verl.experiment_checkpoint
  - rlinfra.verl.attributes.action
"""

EXAMPLES = r"""
- name: Load and validate the smoke experiment
  rlinfra.verl.verl_experiment:
    name: smoke
  register: loaded

- name: Render it for a live cluster
  rlinfra.verl.verl_experiment_render:
    loaded: "{{ loaded }}"
    nodes: "{{ cluster_info.nodes }}"
    venv: /opt/rlinfra/venv
    package_dir: "{{ playbook_dir }}/artifacts/smoke/packages"
  register: exp

- name: Show what would be submitted
  ansible.builtin.debug:
    msg: "{{ exp.submission_id }}: {{ exp.entrypoint }}"
"""

RETURN = r"""
run:
  description: The run suffix of the submission id (O(rlinfra.verl.verl_experiment#module:run)), empty for none.
  returned: always
  type: str
run_artifacts_dir:
  description: This experiment's directory under RV(artifacts_dir) (C(<artifacts_dir>/<experiment>)).
  returned: always
  type: str
submission_id:
  description: C(rlinfra-<experiment>-<cluster>[-<run>]).
  returned: always
  type: str
  sample: rlinfra-smoke-default
cluster:
  description: The Ray cluster name used.
  returned: always
  type: str
  sample: default
head_host:
  description: Inventory host of the cluster's head (C(ray_head) with that C(ray_cluster)).
  returned: always
  type: str
cluster_hosts:
  description: Inventory hosts of the cluster (head and workers).
  returned: always
  type: list
  elements: str
experiment:
  description: The validated experiment (params flattened to C([key, value]) pairs; C(path) is its file).
  returned: always
  type: dict
source:
  description:
    - Where the experiment came from - C(path), C(experiments_dir), C(artifacts_dir), C(how) (V(project),
      V(explicit) or V(bundled)) and C(searched) (the directories looked in, in order).
  returned: always
  type: dict
experiments_dir:
  description: The directory that held the experiment file.
  returned: always
  type: str
artifacts_dir:
  description: Controller directory of the run's artifacts (see O(rlinfra.verl.verl_experiment#module:artifacts_dir)).
  returned: always
  type: str
  sample: /home/me/rl-project/artifacts
project:
  description: The experiment's project (C(project), else verl's C(trainer.project_name), else the default).
  returned: always
  type: str
wait:
  description: Effective wait settings (C(enabled), C(timeout), C(progress_interval), C(poll_interval), C(stop_on_timeout),
    C(stall_timeout), C(outage_grace)).
  returned: always
  type: dict
entrypoint:
  description: The shell command of the job.
  returned: always
  type: str
  sample: python3 smoke_rl.py trainer.total_training_steps=30 "trainer.logger=['console']" trainer.nnodes=3
overrides:
  description: The Hydra overrides exactly as the program receives them (argv items).
  returned: always
  type: list
  elements: str
filled:
  description: The overrides rlinfra added (those the experiment did not set).
  returned: always
  type: list
  elements: str
runtime_env:
  description: The job's runtime_env without secret values (they are added by a no_log task).
  returned: always
  type: dict
runtime_env_display:
  description: The runtime_env as it is shown, secrets as C(********), working_dir with its local path.
  returned: always
  type: dict
metadata:
  description: Job metadata (experiment, cluster, project, framework, run, checkpoint dir).
  returned: always
  type: dict
resources:
  description: The experiment's C(resources) (entrypoint_num_cpus, ...).
  returned: always
  type: dict
checkpoint_dir:
  description: Where checkpoints go (O(checkpoint_root) and O(checkpoint_cluster) applied).
  returned: always
  type: str
  sample: /data/checkpoints/rlinfra_smoke/default/smoke
job_template:
  description:
    - What a recovery needs to render the entrypoint again on the cluster's shape at that time - C(head) (the
      command), C(pairs) (the overrides as C([key, value])), C(shape_keys) (the node and GPU keys of the
      conventions) and C(filled) (whether rlinfra filled each, so that it may change it).
  returned: always
  type: dict
nnodes:
  description: Nodes the job will use.
  returned: always
  type: int
gpus_per_node:
  description: GPUs per node the job will use.
  returned: always
  type: int
secrets:
  description: Secret names - C(required), C(optional), C(present), C(from_vars), C(from_env), C(missing), C(missing_optional).
  returned: always
  type: dict
package:
  description: The working_dir zip - C(uri), C(size), C(files), C(sha1), C(path) - or null without working_dir.
  returned: always
  type: dict
preflight:
  description:
    - C(ok), C(checks) (each with C(name), C(status) passed/failed/skipped and C(message)), C(failed), C(skipped),
      and C(lines) (one line per check, status and message, to print).
  returned: always
  type: dict
display:
  description: What a dry run prints - the job as it would be submitted, the shape and where it comes from, secrets by name.
  returned: always
  type: dict
nodes:
  description: The nodes the job was rendered for (O(nodes), or the inventory's in a dry run).
  returned: always
  type: list
  elements: dict
nodes_source:
  description: V(cluster) when O(nodes) was given, V(inventory) for a dry run.
  returned: always
  type: str
errors:
  description: One line per problem found in the experiment file.
  returned: on validation failure
  type: list
  elements: str
"""
