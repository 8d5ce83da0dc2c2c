# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The shape of a cluster as verl sees it: how many nodes, how many GPUs each, how many ranks.
Standard library only: modules on the nodes use it too (through module_utils/ray/recovery.py)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import float_or_none


def cluster_shape(nodes: Iterable[Mapping[str, Any]] | None) -> tuple[int, int]:
    """(nnodes, gpus per node) verl should use on ``nodes``: the GPU nodes and their smallest GPU
    count; with no GPU at all, every node and 0."""
    nodes = list(nodes or [])
    gpus = [float_or_none((n.get("resources") or {}).get("GPU")) for n in nodes]
    with_gpu = [g for g in gpus if g and g > 0]
    if with_gpu:
        return len(with_gpu), int(min(with_gpu))
    return len(nodes), 0


def world_size(nnodes: int | None, gpus_per_node: int | None) -> int:
    """Ranks of a verl run on that shape: one per GPU, or one per node without GPUs."""
    nnodes, gpus = int(nnodes or 0), int(gpus_per_node or 0)
    return nnodes * gpus if gpus > 0 else nnodes
