#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Documentation stub: the work is done on the controller by plugins/action/cluster_again.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: cluster_again
short_description: Rents a provisioned Ray cluster again when the provider ended its head (recovery.replace)
version_added: 0.13.0
description:
  - For an experiment with C(recovery.replace), on a cluster C(provision.yml) rented (the label's record on the
    controller names its rentals) - when the Hyperbolic API no longer lists the rental of the cluster's head (the
    record's first rental by name, as C(provision.yml) picks the head), runs C(provision.yml) with the record's spec (count, GPU model and count, region, API)
    and this run's other C(-e) variables, which rents what is missing under the same names and converges the cluster.
    The run's checkpoints on the shared volume outlive the machines, so the submit that follows resumes from them.
  - Does nothing for an experiment without C(recovery.replace), a cluster without a record, or a head whose rental
    is still listed (rebooting, its network down); the submit's reach of the head then says what is known. A worker
    missing alone is the run's supervisor's to replace.
  - Runs on the controller only; the inventory is to be read again after it rented (C(meta) C(refresh_inventory)).
author:
  - rlinfra maintainers (@rlinfra)
options:
  name:
    description: The experiment's name, as C(submit.yml -e exp=NAME) gives it.
    type: str
    required: true
  experiments_dir:
    description: Where the experiment file is, as M(rlinfra.verl.verl_experiment) reads it (empty, its search).
    type: str
    default: ""
  cluster:
    description: The Ray cluster (the label), instead of the experiment's C(cluster).
    type: str
    default: ""
  record_dir:
    description: The directory of the labels' records on the controller (C(hyperbolic_record_dir)).
    type: path
    required: true
  api_key:
    description: The Hyperbolic API key (default the controller's C(HYPERBOLIC_API_KEY), as the submit gives it).
    type: str
    default: ""
  api_url:
    description: The Hyperbolic API (empty is C(https://api.hyperbolic.xyz)).
    type: str
    default: ""
  timeout:
    description: Seconds C(provision.yml) may take before the task fails with the command to run by hand.
    type: int
    default: 3600
attributes:
  check_mode:
    support: full
    description: Says whether the cluster would be rented again; rents nothing.
  diff_mode:
    support: none
    description: Rents machines; nothing to diff.
"""

EXAMPLES = r"""
- name: Rent the experiment's cluster again when the provider ended its head
  rlinfra.verl.cluster_again:
    name: grpo
    record_dir: "{{ lookup('ansible.builtin.env', 'HOME') }}/.rlinfra/hyperbolic"
    api_key: "{{ lookup('ansible.builtin.env', 'HYPERBOLIC_API_KEY') }}"
  register: again
"""

RETURN = r"""
rented:
  description: Whether the cluster was rented again (the inventory is then to be read again).
  returned: always
  type: bool
instances:
  description: The label's rentals after it, C(name) and C(id) each.
  returned: when rented
  type: list
  elements: dict
msg:
  description: One line saying why the cluster was rented again, in how long, and which machines it is now.
  returned: when rented, or failed
  type: str
"""
