#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# Documentation stub: the work is done on the controller by plugins/action/fitness_report.py.

from __future__ import annotations

DOCUMENTATION = r"""
module: fitness_report
short_description: fitness.yml's verdict for one Ray cluster - a table, one line per failing node or pair, the unfit nodes
version_added: 0.10.0
description:
  - Puts together what M(rlinfra.verl.fitness_node) found on each node, what M(rlinfra.verl.fitness_net) measured
    between them and what the Ray check (an object moved through Ray's object store between nodes, an all-reduce where
    torch is in the environment) printed, against O(thresholds).
  - "Returns the table fitness.yml prints, one line per failing node or pair (for example
    C(gpu-2 -> gpu-0: 0.02 Gbit/s over ens5 (threshold 1 Gbit/s))), the unfit nodes, and writes the whole result as
    JSON to C(<artifacts_dir>/<cluster>-<time>.json) on the controller (mode 0600)."
  - The rules are in C(plugins/module_utils/node/fitness_report.py). Runs on the controller; changes nothing on the nodes.
author:
  - rlinfra maintainers (@rlinfra)
options:
  cluster:
    description: The cluster's name.
    type: str
    required: true
  head:
    description: The head's inventory name.
    type: str
    required: true
  members:
    description:
      - The cluster's members. Each one's C(fitness__me) (C(host), C(ip), C(ifname) - the interface the collectives
        use) and C(fitness__node) (its M(rlinfra.verl.fitness_node) result) are read from C(hostvars), as the
        rlinfra.verl.fitness role sets them; a member without them did not answer.
    type: list
    elements: str
    required: true
  links:
    description: The result of M(rlinfra.verl.fitness_net).
    type: dict
    default: {}
  ray:
    description: The result of the M(rlinfra.verl.ray_job) task that ran the Ray check.
    type: dict
    default: {}
  exclude_unfit:
    description:
      - Leave the unfit workers out (RV(exclude)) instead of failing (RV(failure)); a head is never left out.
      - Workers left out by an earlier run (their C(rlinfra_excluded) local fact) come back (RV(readmit)) once fit.
    type: bool
    default: false
  thresholds:
    description:
      - C(min_gbit) (a node to another, Gbit/s), C(ray_min_gbit) (through Ray's object store, Gbit/s),
        C(allreduce_min_busbw) (NCCL all-reduce bus bandwidth, GB/s).
    type: dict
    default: {}
  artifacts_dir:
    description: Where the JSON result goes on the controller (relative to the current directory); empty, nowhere.
    type: path
    default: artifacts/fitness
attributes:
  check_mode:
    support: full
    description: Judges what it is given; writes no file.
  diff_mode:
    support: none
    description: Changes nothing on the nodes.
"""

EXAMPLES = r"""
- name: Judge the cluster
  rlinfra.verl.fitness_report:
    cluster: "{{ ray_cluster }}"
    head: "{{ inventory_hostname }}"
    members: "{{ members }}"
    links: "{{ fitness__links }}"
    ray: "{{ fitness__ray }}"
"""

RETURN = r"""
table:
  description: The lines of the table (one row per node; the all-reduce, when it ran, as nccl-tests prints it).
  returned: always
  type: list
  elements: str
lines:
  description: One line per failing node, pair or cluster-wide problem.
  returned: always
  type: list
  elements: str
unfit:
  description: The unfit nodes' inventory names.
  returned: always
  type: list
  elements: str
fit:
  description: Whether the cluster is fit to train (every unfit node, if any, left out).
  returned: always
  type: bool
failure:
  description: The one line the run fails with, empty when the cluster is fit to train.
  returned: always
  type: str
exclude:
  description: The workers to leave out (with O(exclude_unfit), or left out before and still unfit).
  returned: always
  type: list
  elements: str
readmit:
  description: The workers left out before and fit now.
  returned: always
  type: list
  elements: str
reasons:
  description: The lines of each unfit node, by name.
  returned: always
  type: dict
record:
  description: What the head keeps (C(<ray_config_dir>/rlinfra-fitness.json)) - cluster, head, fit, members, unfit,
    excluded (each with its lines), time, path.
  returned: always
  type: dict
summary:
  description: The verdict's first lines (fit or not, who is left out or back).
  returned: always
  type: list
  elements: str
path:
  description: The JSON file written (empty in check mode or without O(artifacts_dir)).
  returned: always
  type: str
document:
  description: What the JSON file holds.
  returned: always
  type: dict
"""
