# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a verl checkpoint directory holds: its steps, the latest one, and the world size its FSDP
shards were written with (``global_step_N/actor/model_world_size_W_rank_R.pt``), which decides
whether a run can resume from it on a cluster of another shape."""

from __future__ import annotations

import os
import re

TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
MAX_DEPTH = 3


def steps(path):
    """The complete step directories (global_step_N), sorted by N."""
    try:
        entries = os.listdir(path)
    except OSError:
        return []
    return sorted(int(m.group(1)) for m in (STEP_DIR.match(e) for e in entries)
                  if m and os.path.isdir(os.path.join(path, m.group(0))))


def latest_step(path):
    """The step the tracker file names (verl writes it once the step is complete), else the
    highest step directory; None when there is no checkpoint."""
    try:
        with open(os.path.join(path, TRACKER)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        found = steps(path)
        return found[-1] if found else None


def shard_world_sizes(step_dir):
    """{world size: ranks found} over the FSDP shard files under a step directory."""
    out = {}
    base_depth = step_dir.rstrip(os.sep).count(os.sep)
    for root, dirs, files in os.walk(step_dir):
        if root.count(os.sep) - base_depth >= MAX_DEPTH:
            dirs[:] = []
        for name in files:
            match = SHARD.match(name)
            if match:
                out.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return {w: sorted(r) for w, r in out.items()}


def inspect(path):
    """Everything a resume decision needs about the checkpoint directory ``path``."""
    info = dict(path=path, exists=os.path.isdir(path), steps=[], latest_step=None, step_dir=None,
                world_size=None, world_sizes=[], ranks=[])
    if not info["exists"]:
        return info
    info["steps"] = steps(path)
    info["latest_step"] = latest_step(path)
    if info["latest_step"] is None:
        return info
    step_dir = os.path.join(path, "global_step_%d" % info["latest_step"])
    info["step_dir"] = step_dir
    sizes = shard_world_sizes(step_dir) if os.path.isdir(step_dir) else {}
    if sizes:
        info["world_sizes"] = sorted(sizes)
        info["world_size"] = max(sizes)
        info["ranks"] = sizes[info["world_size"]]
    return info
