#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: fitness_node
short_description: One node's part of fitness.yml - its network agent, its GPUs, its kernel log, its free space
version_added: 0.10.0
description:
  - Starts a short-lived agent for the network check (a detached process listening on O(ip):O(port), answering only
    requests carrying O(nonce), gone after O(lifetime) seconds or when M(rlinfra.verl.fitness_net) is done).
  - Reads the GPUs - C(nvidia-smi -q -x) (count against what Ray will be offered, uncorrectable ECC errors, retired
    pages pending, row remapping pending or failed, hardware and thermal slowdown, persistence mode, the driver's CUDA
    version against the one torch in O(venv) was built for), C(dcgmi diag -r 1) where DCGM is installed and O(dcgm),
    C(amd-smi) on AMD nodes - and the kernel log since boot (C(dmesg), else C(journalctl -k)) for Xid events,
    uncorrectable memory errors, the OOM killer and links going down; and the free space on O(volumes).
  - Every problem is one line naming the node (and the GPU index and bus id); the rules are in
    C(plugins/module_utils/node/gpu_health.py) and C(plugins/module_utils/common/room.py). Runs as a plain script on the node
    where it can (no module runtime).
author:
  - rlinfra maintainers (@rlinfra)
options:
  node:
    description: The node's inventory name, for the lines.
    type: str
    required: true
  ip:
    description: The address the agent listens on (the node's Ray address); empty, no agent.
    type: str
    default: ""
  port:
    description: The agent's port (C(ray_fitness_port); the Ray firewall admits the cluster's members to it).
    type: int
    default: 6385
  nonce:
    description: This run's shared secret; the agent answers nothing without it.
    type: str
    default: ""
  lifetime:
    description: Seconds the agent lives at most.
    type: int
    default: 300
  gpu:
    description: V(auto) checks the GPUs the node has and reads its kernel log; V(off) skips both (room only).
    type: str
    choices: [auto, "off"]
    default: auto
  dcgm:
    description: Run C(dcgmi diag -r 1) where C(dcgmi) exists.
    type: bool
    default: true
  expected_gpus:
    description: What Ray will be offered (C(ray_num_gpus)); V(auto), the devices the node shows.
    type: str
    default: auto
  venv:
    description: The node's Python environment (C(ray_venv)), where torch's CUDA version is read (without importing it).
    type: path
    default: /opt/rlinfra/venv
  volumes:
    description:
      - The volumes a run writes to, each C(what), C(path), C(min_free_gib), and C(estimate=checkpoints) for a
        checkpoint directory - then it must also hold one more checkpoint like its newest C(global_step_N).
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    description: Reads only; no agent is started.
  diff_mode:
    support: none
    description: Changes nothing.
"""

EXAMPLES = r"""
- name: Check this node
  rlinfra.verl.fitness_node:
    node: "{{ inventory_hostname }}"
    ip: "{{ ray_private_ip }}"
    nonce: "{{ fitness__nonce }}"
    volumes: [{what: shared volume, path: /data, min_free_gib: 20}]
"""

RETURN = r"""
listening:
  description: C(ip:port) of the agent, empty when none was started.
  returned: always
  type: str
gpu:
  description: C(vendor), C(count), C(expected), C(driver), C(cuda), C(torch_cuda), C(gpus) (as parsed), C(lines),
    C(notes), C(kernel_source), C(kernel_events).
  returned: always
  type: dict
volumes:
  description: One C({what, path, free_bytes, total_bytes, min_free_bytes}) per volume.
  returned: always
  type: list
  elements: dict
lines:
  description: One line per problem that makes the node unfit; empty when it is fit.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_node import check

ARGS = vocabulary.Args(
    node=vocabulary.Host(required=True),
    ip=vocabulary.Address(empty=True, default=""),
    port=vocabulary.Port(default=6385),
    nonce=vocabulary.Secret(default=""),
    lifetime=vocabulary.Int(1, 3600, unit="seconds", default=300),
    gpu=vocabulary.Choice(("auto", "off"), default="auto"),
    dcgm=vocabulary.Switch(default=True),
    expected_gpus=vocabulary.Text(pattern=r"^(auto|[0-9]{1,3})$", what="auto or a whole number", default="auto"),
    venv=vocabulary.AbsPath("reads", default="/opt/rlinfra/venv"),
    volumes=vocabulary.ListOf(
        vocabulary.Section(
            dict(
                what=vocabulary.Text(max_len=40, required=True),
                path=vocabulary.AbsPath("reads", required=True),
                min_free_gib=vocabulary.Number(0, 1e6, default=0),
                estimate=vocabulary.Choice(("none", "checkpoints"), default="none"),
            )
        ),
        default=[],
    ),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, check)


if __name__ == "__main__":
    main()
