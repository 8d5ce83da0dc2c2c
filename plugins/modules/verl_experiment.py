#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# Documentation only: the work is done on the controller by plugins/action/verl_experiment.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_experiment
short_description: Find, load and validate an experiment file (controller side)
version_added: 0.1.0
description:
  - Reads C(experiments/NAME.yml) (format in docs/EXPERIMENTS.md), validates it and reports every
    problem as one clear line (unknown key with a did-you-mean, wrong type, missing model or data path
    for verl, bad framework, unknown experiment with the list of available ones, ...).
  - Finds the cluster's head in the inventory (RV(head_host)); fails when the cluster has no head in group
    C(ray_head) or more than one.
  - Rendering the Ray job from this result, and the preflight checks, are the work of
    M(rlinfra.verl.verl_experiment_render) - one module, one job.
  - Runs on the controller only (an action plugin); it never contacts a host nor the cluster, and it never
    sees a secret's value, only whether each secret name is available.
author:
  - rlinfra maintainers (@rlinfra)
options:
  name:
    description:
      - Experiment name, the file name without C(.yml), found in the user's project (see O(experiments_dir)).
      - C(rlinfra.verl:NAME) names one of the collection's bundled examples (C(rlinfra.verl:smoke)); a plain
        name never reads them.
    type: str
    required: true
  loaded:
    description:
      - This action's result for the same experiment earlier in the run (C(select_head) registers it on the
        controller). It is returned as it is - the experiment is neither read nor validated again; O(experiments_dir)
        and O(params) are not used (the extra params are already in it).
    type: dict
  experiments_dir:
    description:
      - Directory of the experiment files; the only one read when set.
      - Empty - the environment variable E(RLINFRA_EXPERIMENTS_DIR) when set, else the user's project -
        C(experiments/) in the inventory's directory, in the directory of the playbook run (not the
        collection's own playbooks) and in the current directory, each followed by its parent's; the first
        holding C(NAME.yml) wins. A missing experiment is one line listing every directory searched.
    type: str
    default: ""
  artifacts_dir:
    description:
      - Controller directory for the run's artifacts (driver logs, metrics, working_dir zips, per-node logs).
      - Empty - C(artifacts/) beside the project's C(experiments/) that held the experiment; for a bundled
        example or an explicit O(experiments_dir), C(artifacts/) in the current directory. Returned as
        RV(artifacts_dir).
    type: str
    default: ""
  models_root:
    description:
      - Where C(merge.yml) writes the experiment's merged model, C(<models_root>/<experiment>) (RV(model_dir)); a
        directory the collection writes into, so never V(/), a system directory or one under it.
    type: str
    default: /data/models
    version_added: 0.13.0
  cluster:
    description: Ray cluster name (C(ray_cluster)), instead of the experiment's C(cluster).
    type: str
    default: ""
  run:
    description: Suffix of the submission id, to submit the same experiment again (C(-e run=2)).
    type: str
    default: ""
  params:
    description: Extra parameters, nested like the experiment's C(params), replacing same keys.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Nothing is changed in either mode.
  diff_mode:
    support: none
    description: Nothing to diff.
seealso:
  - module: rlinfra.verl.verl_experiment_render
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

- name: Show where it goes
  ansible.builtin.debug:
    msg: "{{ loaded.submission_id }} on {{ loaded.head_host }}, checkpoints in {{ loaded.checkpoint_dir }}"
"""

RETURN = r"""
run:
  description: The run suffix of the submission id (O(run)), empty for none.
  returned: always
  type: str
run_artifacts_dir:
  description: This experiment's directory under RV(artifacts_dir) (C(<artifacts_dir>/<experiment>)).
  returned: always
  type: str
model_dir:
  description: Where the experiment's merged model goes, C(<models_root>/<experiment>).
  returned: always
  type: str
  sample: /data/models/smoke
  version_added: 0.13.0
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
  description: Controller directory of the run's artifacts (see O(artifacts_dir)).
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
checkpoint_dir:
  description: Where checkpoints go (O(checkpoint_root) and O(checkpoint_cluster) applied).
  returned: always
  type: str
  sample: /data/checkpoints/rlinfra_smoke/default/smoke
errors:
  description: One line per problem found in the experiment file.
  returned: on validation failure
  type: list
  elements: str
"""
