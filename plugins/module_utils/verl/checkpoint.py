# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a verl checkpoint directory holds: its steps, the latest one, and the world size its FSDP
shards were written with (``global_step_N/actor/model_world_size_W_rank_R.pt``), which decides
whether a run can resume from it on a cluster of another shape."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

TRACKER = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"^global_step_(\d+)$")
SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
MAX_DEPTH = 3


def steps(path: str) -> list[int]:
    """The complete step directories (global_step_N), sorted by N."""
    try:
        entries = os.listdir(path)
    except OSError:
        return []
    return sorted(
        int(m.group(1))
        for m in (STEP_DIR.match(e) for e in entries)
        if m and os.path.isdir(os.path.join(path, m.group(0)))
    )


def latest_step(path: str) -> int | None:
    """The step the tracker file names (verl writes it once the step is complete), else the
    highest step directory; None when there is no checkpoint."""
    try:
        with open(os.path.join(path, TRACKER)) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        found = steps(path)
        return found[-1] if found else None


def shard_world_sizes(step_dir: str) -> dict[int, list[int]]:
    """{world size: ranks found} over the FSDP shard files under a step directory."""
    out: dict[int, set[int]] = {}
    base_depth = step_dir.rstrip(os.sep).count(os.sep)
    for root, dirs, files in os.walk(step_dir):
        if root.count(os.sep) - base_depth >= MAX_DEPTH:
            dirs[:] = []
        for name in files:
            match = SHARD.match(name)
            if match:
                out.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return {w: sorted(r) for w, r in out.items()}


def missing_ranks(sizes: Mapping[int, Sequence[int]]) -> list[int]:
    """The ranks of the largest world size without a shard in ``sizes`` (:func:`shard_world_sizes` of a step directory;
    a node lost mid-save leaves some out); [] when it is whole, or holds no shard at all (not an FSDP checkpoint:
    nothing to count)."""
    if not sizes:
        return []
    size = max(sizes)
    return sorted(set(range(size)) - set(sizes[size]))


def inspect(path: str) -> dict[str, Any]:
    """Everything a resume decision needs about the checkpoint directory ``path``: besides the latest step (the
    tracker's), ``resume_step`` and ``resume_dir``, the newest step at or before it whose directory holds every rank's
    shard, and ``incomplete``: the newer steps passed over, each with the ranks it lacks (None: no directory)."""
    info: dict[str, Any] = dict(
        path=path,
        exists=os.path.isdir(path),
        steps=[],
        latest_step=None,
        step_dir=None,
        world_size=None,
        world_sizes=[],
        ranks=[],
        resume_step=None,
        resume_dir=None,
        incomplete=[],
    )
    if not info["exists"]:
        return info
    info["steps"] = steps(path)
    info["latest_step"] = latest_step(path)
    if info["latest_step"] is None:
        return info
    info["step_dir"] = os.path.join(path, "global_step_%d" % info["latest_step"])
    latest_sizes: dict[int, list[int]] = {}
    for step in sorted(set(s for s in info["steps"] if s <= info["latest_step"]) | {info["latest_step"]}, reverse=True):
        where = os.path.join(path, "global_step_%d" % step)
        sizes = shard_world_sizes(where) if os.path.isdir(where) else None
        if step == info["latest_step"]:
            latest_sizes = sizes or {}
        missing = None if sizes is None else missing_ranks(sizes)
        if missing == []:
            info["resume_step"], info["resume_dir"] = step, where
            break
        info["incomplete"].append(dict(step=step, missing_ranks=missing))
    if latest_sizes:
        info["world_sizes"] = sorted(latest_sizes)
        info["world_size"] = max(latest_sizes)
        info["ranks"] = latest_sizes[info["world_size"]]
    return info


# ---- merging a step's actor checkpoint into a Hugging Face model (rlinfra.verl.verl_merge) ------------------

RECORD = ".rlinfra-merge.json"
MERGE_FILE = re.compile(r"^(model_world_size_\d+_rank_\d+\.pt|fsdp_config\.json)$")


class MergeError(Exception):
    """One line: why this checkpoint cannot be merged."""


def _steps_found(found):
    return ", ".join(str(s) for s in found) or "none"


def merge_source(
    ckpt_dir: str, experiment: str, step: int | None = None, host: str = "this host"
) -> tuple[int, str, list[tuple[str, int, float]]]:
    """``(step, actor_dir, files)`` of the checkpoint to merge: the named step, else the one verl's tracker
    names. ``files``: ``[(name, size, mtime)]`` of the shards and fsdp_config.json, by name. Raises
    MergeError with the line to show."""
    ckpt_dir = ckpt_dir.rstrip("/") or "/"
    if not os.path.isdir(ckpt_dir):
        raise MergeError(
            "experiment %s has no checkpoint directory %s on %s (no checkpoint saved yet, or "
            "verl_job_checkpoint_root differs from the job's)" % (experiment, ckpt_dir, host)
        )
    found = steps(ckpt_dir)
    if step is None:
        tracker = os.path.join(ckpt_dir, TRACKER)
        try:
            with open(tracker) as f:
                text: str | None = f.read().strip()
        except OSError:
            text = None
        if text is None or not re.match(r"^[0-9]+$", text):
            raise MergeError(
                "experiment %s has no checkpoint to merge: %s %s; steps found: %s%s"
                % (
                    experiment,
                    tracker,
                    "does not exist" if text is None else "does not hold a step number",
                    _steps_found(found),
                    " (name one with -e step=N)" if found else "",
                )
            )
        step = int(text)
    actor = os.path.join(ckpt_dir, "global_step_%d" % step, "actor")
    if not os.path.isdir(actor):
        raise MergeError(
            "experiment %s has no checkpoint of step %d: %s does not exist; steps found: %s"
            % (experiment, step, actor, _steps_found(found))
        )
    files = []
    for name in sorted(os.listdir(actor)):
        path = os.path.join(actor, name)
        if MERGE_FILE.match(name) and os.path.isfile(path):
            st = os.stat(path)
            files.append((name, st.st_size, st.st_mtime))
    names = [f[0] for f in files]
    missing = (
        (["fsdp_config.json"] if "fsdp_config.json" not in names else [])
        + (["model_world_size_*_rank_*.pt shards"] if not any(SHARD.match(n) for n in names) else [])
        + (["huggingface/config.json"] if not os.path.isfile(os.path.join(actor, "huggingface", "config.json")) else [])
    )
    if missing:
        raise MergeError(
            "%s is not a complete verl FSDP checkpoint (it has no %s): merge.yml merges the actor "
            "checkpoints that verl's FSDP workers save" % (actor, ", ".join(missing))
        )
    return step, actor, files


def fingerprint(files: Iterable[tuple[Any, ...]]) -> str:
    """Names, sizes and modification times of the shards: a checkpoint saved again under the same step (a
    restarted experiment) is merged again."""
    return ";".join("%s:%s:%s" % f for f in files)


def read_record(target: str) -> dict[str, Any]:
    """The record of the model directory's last merge ({} when there is none or it is unreadable)."""
    try:
        with open(os.path.join(target, RECORD)) as f:
            record = json.load(f)
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def merge_needed(record: Mapping[str, Any], step: int, source: str, print_: str, force: bool = False) -> bool:
    return bool(
        force or record.get("step") != step or record.get("source") != source or record.get("fingerprint") != print_
    )


def report(
    experiment: str,
    step: int,
    source: str,
    target: str,
    merged: bool,
    check_mode: bool = False,
    record: Mapping[str, Any] | None = None,
    hf_repo: str = "",
    uploaded: bool = False,
) -> str:
    """The one line merge.yml ends with."""
    if merged:
        line = "%s step %d of %s (%s) into %s" % (
            "would merge" if check_mode else "merged",
            step,
            experiment,
            source,
            target,
        )
    else:
        line = (
            "%s already holds step %d of %s (merged %s); nothing to merge (-e verl_job_merge_force=true merges "
            "again)" % (target, step, experiment, (record or {}).get("merged_at", "?"))
        )
    if uploaded:
        line += "; uploaded to Hugging Face repo " + hf_repo
    elif hf_repo and not check_mode:
        line += "; already uploaded to Hugging Face repo " + hf_repo
    return line


def not_verl_report(experiment: str, framework: str) -> str:
    """The one line merge.yml ends with for an experiment that verl does not train (nothing is merged)."""
    return (
        "nothing to merge: experiment %s is a %s experiment, and merge.yml merges the FSDP actor checkpoints of "
        "verl experiments" % (experiment, framework)
    )


def merge_paths_seen(actor: str, target: str) -> list[tuple[str, str]]:
    """``(shown, tested)`` directories the container must see before a merge into ``target``: the checkpoint, and the
    target's directory - or, not made yet, its nearest existing parent (made on the host, it appears inside through
    that one's volume)."""
    parent = os.path.dirname(os.path.normpath(target))
    tested = parent
    while not os.path.isdir(tested) and os.path.dirname(tested) != tested:
        tested = os.path.dirname(tested)
    return [(actor, actor), (parent, tested)]


def info(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``verl_checkpoint_info`` module's result (it only reads)."""
    return dict(changed=False, **inspect(params["path"]))
