# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The decisions of the job watchdog (``rlinfra.verl.ray_job_wait``), without any I/O: which node
left, whether an attempt ended by an event the experiment recovers from, whether a checkpoint can
resume on the cluster's current shape, and the lines the user reads. The action does the talking."""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.ray.cluster_shape import cluster_shape, world_size
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.metrics import describe as describe_metrics

RECOVERY_EVENTS = ("node_lost", "head_restart", "stalled", "failed")
# min_nodes None: the number of nodes alive when the run was first submitted.
RECOVERY_DEFAULTS = {
    "max_restarts": 0,
    "on": ["node_lost", "head_restart", "stalled"],
    "backoff_s": 10,
    "min_nodes": None,
    "node_wait_timeout": 600,
    "allow_reshard": False,
    # When the machines end (a reservation, an allocation): the run is told to save before it, less
    # the margin (verl: its save and one step; NeMo RL: its start and its save).
    "deadline": None,
    "deadline_margin": 600,
    # A machine gone for good rented again from the head (provision.yml's clusters): after how long
    # absent, how many times a run, and how long its converge may take.
    "replace": False,
    "replace_after": 600,
    "max_replacements": 1,
    "replace_timeout": 1800,
}

# verl's key metrics, shown first in progress lines and summaries.
DEFAULT_METRICS = [
    "critic/score/mean",
    "critic/rewards/mean",
    "reward/mean",
    "actor/pg_loss",
    "pg_loss",
    "actor/entropy",
    "response_length/mean",
    "timing_s/step",
]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
ACTIVE = ("PENDING", "RUNNING")
WHY = {
    "succeeded": "succeeded",
    "failed": "the job failed",
    "node_lost": "a node left the cluster",
    "head_restart": "the Ray head restarted (Ray keeps no jobs across a head restart)",
    "stalled": "no new training step",
    "stopped": "stopped from outside this wait",
    "timeout": "still running at the wait timeout",
    "unreachable": "the dashboard stopped answering",
    "missing": "the job does not exist",
    "not_resumed": "started over instead of resuming from its checkpoint",
    "deadline": "no time left before recovery.deadline",
}


# How a lost node shows in a driver's failure before Ray has marked the node dead (its health
# checks take up to ~30 s): Ray's actor/worker/object errors and NCCL's connection errors.
LOST_NODE_SIGNS = re.compile(
    r"ActorDiedError|ActorUnavailableError|RayActorError|NodeDiedError|OwnerDiedError|ObjectLostError|"
    r"WorkerCrashedError|LocalRayletDiedError|The actor died unexpectedly|node .{0,80}(?:died|is dead|was marked dead)|"
    r"NCCL (?:error|communicator was aborted)|ncclRemoteError|Connection reset by peer",
    re.IGNORECASE,
)


def looks_like_lost_node(text: str | None) -> bool:
    """Whether a failure's message or log tail reads like a node (or its processes) went away."""
    return bool(LOST_NODE_SIGNS.search(text or ""))


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(max(0, seconds))
    return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


def fmt_metric(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return ("%.4g" % value) if abs(value) < 1e5 else ("%.3e" % value)
    return str(value)


def pick_metrics(metrics: Mapping[str, Any] | None, preferred: Iterable[str], limit: int) -> list[tuple[str, Any]]:
    metrics = metrics or {}
    chosen = [k for k in preferred if k in metrics][:limit]
    if not chosen:
        chosen = list(metrics)[: min(limit, 4)]
    return [(k, metrics[k]) for k in chosen]


def progress_line(label: str, res: Mapping[str, Any], preferred: Iterable[str], limit: int, attempt: int = 1) -> str:
    status = res.get("status") or "UNKNOWN"
    head = "%s: %s%s" % (label, status, " (attempt %d)" % attempt if attempt > 1 else "") if label else status
    parts = [head, hms(res.get("duration_s"))]
    step = res.get("last_step")
    if step is None:
        parts.append("no step yet")
    else:
        parts.append(
            " - ".join(
                ["step:%s" % step]
                + ["%s:%s" % (k, fmt_metric(v)) for k, v in pick_metrics(res.get("last_metrics"), preferred, limit)]
            )
        )
    return ", ".join(parts)


# The params that name a run's last step, per convention (the deadline's projection compares with it).
TOTAL_STEP_KEYS = ("trainer.total_training_steps", "grpo.max_num_steps")


def total_steps(template: Mapping[str, Any] | None) -> int | None:
    """The run's last step from a rendered job template's overrides, or None when it names none."""
    for key, value in (template or {}).get("pairs") or []:
        if key.lstrip("+") in TOTAL_STEP_KEYS and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def deadline_line(deadline: Any, left: float, step: int, per_step: float, total: int | None) -> str:
    """Where recovery.deadline (``left`` seconds away) cuts the run at ``per_step`` seconds a step, from ``step``."""
    pace = "%.1f s a step" % per_step
    if left <= 0:
        return "recovery.deadline %s has passed at step %s (%s); the run was told to save before it" % (
            deadline,
            step,
            pace,
        )
    reach = step + int(left // per_step) if per_step > 0 else step
    if total and reach >= total:
        return "recovery.deadline %s (in %s): at %s the run ends at step %d about %s before it" % (
            deadline,
            hms(left),
            pace,
            total,
            hms(left - (total - step) * per_step),
        )
    return (
        "recovery.deadline %s (in %s) cuts the run at about step %d%s (%s); it is told to save before it "
        "(a next run on new machines resumes from there)"
        % (deadline, hms(left), reach, " of %d" % total if total else "", pace)
    )


def recovery_settings(recovery: Mapping[str, Any] | None) -> dict[str, Any]:
    """The experiment's ``recovery`` mapping with its defaults."""
    out: dict[str, Any] = dict(RECOVERY_DEFAULTS)
    out.update({k: v for k, v in (recovery or {}).items() if v is not None})
    out["on"] = list(out["on"])
    return out


def node_label(node: Mapping[str, Any], names: Mapping[str, str] | None) -> str:
    """``rlinfra-sbx-3 (172.23.0.4)``: the inventory host when the address is known, else the address."""
    ip = node.get("node_ip") or node.get("node_name") or node.get("node_id", "?")[:12]
    host = (names or {}).get(ip) or (names or {}).get(node.get("node_name") or "")
    return "%s (%s)" % (host, ip) if host else "%s (not in the inventory)" % ip


def alive(nodes: Iterable[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    return {n["node_id"]: n for n in nodes or [] if n.get("state") == "ALIVE" and n.get("node_id")}


def head_id(nodes: Iterable[dict[str, Any]] | None) -> str | None:
    return next((i for i, n in alive(nodes).items() if n.get("is_head")), None)


def registering(known: Mapping[str, dict[str, Any]], nodes: Iterable[dict[str, Any]] | None) -> bool:
    """True when the cluster that answers has no alive head and lists none of ``known`` (node_id -> node, as last seen)
    in any state: a head that restarted, whose dashboard answers before its own node (and the workers', under new ids)
    registered with its new GCS. Nothing can be called lost from such a list; a GCS that lived on lists a node that
    died as DEAD."""
    listed = list(nodes or [])
    return bool(known) and head_id(listed) is None and not any(n.get("node_id") in known for n in listed)


def lost_nodes(known: Mapping[str, dict[str, Any]], nodes: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Nodes of ``known`` (node_id -> node, alive when last seen) that are not alive in ``nodes``."""
    now = alive(nodes)
    return [n for i, n in known.items() if i not in now]


def end_event(status: str | None, lost_in_attempt: Sequence[Any], stopped_by_us: bool = False) -> str | None:
    """Why a terminal attempt ended, as a recovery event name."""
    if status == "SUCCEEDED":
        return "succeeded"
    if status == "STOPPED":
        return None if stopped_by_us else "stopped"
    return "node_lost" if lost_in_attempt else "failed"


def can_recover(event: str | None, settings: Mapping[str, Any], restarts_used: int) -> tuple[bool, str]:
    """(True, '') or (False, why not) for an event, given the experiment's recovery settings."""
    if event not in settings["on"]:
        if settings["max_restarts"] <= 0:
            return False, "recovery is off (recovery.max_restarts: 0)"
        return False, "recovery.on does not include %s" % event
    if restarts_used >= settings["max_restarts"]:
        return False, (
            "recovery is off (recovery.max_restarts: 0)"
            if settings["max_restarts"] <= 0
            else "all %d restart(s) of recovery.max_restarts are used" % settings["max_restarts"]
        )
    return True, ""


def shape_check(
    ckpt: Mapping[str, Any] | None, nodes: Iterable[Mapping[str, Any]], allow_reshard: bool = False
) -> tuple[bool, str]:
    """(ok, line): whether the latest checkpoint (``verl_checkpoint_info``'s result) can resume on a
    cluster made of ``nodes``. Without shards (no checkpoint, or not an FSDP one) there is nothing
    to check."""
    nnodes, gpus = cluster_shape(nodes)
    now = world_size(nnodes, gpus)
    written = (ckpt or {}).get("world_size")
    if not written or written == now:
        return True, ""
    if ckpt is None:  # never: its world size was read (for the type checker)
        raise AssertionError("ckpt is set here")
    line = (
        "checkpoint %s (step %s) was written by world size %d (model_world_size_%d_rank_*.pt) but the cluster "
        "now has %d node(s) x %d GPU(s) = world size %d"
        % (ckpt.get("step_dir"), ckpt.get("latest_step"), written, written, nnodes, gpus, now)
    )
    if allow_reshard:
        return True, line + "; resubmitting anyway (recovery.allow_reshard: true)"
    return False, line + (
        "; not resubmitted: bring the cluster back to %d rank(s) (site.yml) and run submit.yml "
        "again, or set recovery.allow_reshard: true if the trainer can reshard" % written
    )


def incomplete_line(ckpt: Mapping[str, Any]) -> str:
    """What the resume passes over: the tracker's step lacks shards, or its directory is gone."""
    gaps = "; ".join(
        "step %s %s"
        % (
            i["step"],
            "has no directory"
            if i["missing_ranks"] is None
            else "lacks the shards of rank(s) %s" % ", ".join(str(r) for r in i["missing_ranks"][:8])
            + (" and %d more" % (len(i["missing_ranks"]) - 8) if len(i["missing_ranks"]) > 8 else ""),
        )
        for i in ckpt.get("incomplete") or []
    )
    if ckpt.get("resume_step") is None:
        return (
            "checkpoint %s holds no whole step (%s: a node lost while saving?): the next attempt starts from scratch"
            % (ckpt.get("path"), gaps)
        )
    return (
        "checkpoint %s: %s (a node lost while saving?); the next attempt resumes from step %s, the newest whole one "
        "(%s)" % (ckpt.get("path"), gaps, ckpt["resume_step"], ckpt.get("resume_dir"))
    )


def not_resumed_cause(template: Mapping[str, Any] | None, step: Any) -> str:
    """Why an attempt may have started over, from the overrides it was given (the experiment's params)."""
    params = dict((k, v) for k, v in (template or {}).get("pairs") or [])
    async_keys = sorted(k for k, v in params.items() if k.endswith("async_save") and str(v).lower() in ("true", "1"))
    if async_keys:
        return (
            "%s=true: verl's asynchronous save writes no tracker file (latest_checkpointed_iteration.txt), so "
            "trainer.resume_mode=auto starts over (verl issue 7952); turn it off, or resume by path "
            "(trainer.resume_mode=resume_path, trainer.resume_from_path=<checkpoint dir>/global_step_%s)"
            % (async_keys[0], step)
        )
    if str(params.get("trainer.resume_mode", "")).lower() == "disable":
        return "trainer.resume_mode is disable: the trainer ignores its checkpoints; set it to auto"
    return (
        "the trainer did not load the checkpoint: check that it reads it (verl: trainer.resume_mode auto, "
        "trainer.default_local_dir the run's checkpoint directory) and that the checkpoint's step directory is whole"
    )


def attempt_row(
    attempt: int, sid: str, res: Mapping[str, Any] | None, why: str | None, started: Any = None, stopped: bool = False
) -> dict[str, Any]:
    """One row of the summary; an attempt that had not ended when it was given up on is STOPPED (by
    the wait) or LOST (with the head)."""
    status = (res or {}).get("status")
    if status not in TERMINAL:
        status = "STOPPED" if stopped else "LOST" if why == "head_restart" else status
    return dict(
        attempt=attempt,
        submission_id=sid,
        status=status,
        why=why,
        last_step=(res or {}).get("last_step"),
        start_time=(res or {}).get("start_time") or started,
        end_time=(res or {}).get("end_time"),
        duration_s=(res or {}).get("duration_s"),
    )


def summary_lines(
    result: Mapping[str, Any], preferred: Iterable[str] = tuple(DEFAULT_METRICS), limit: int = 6
) -> list[str]:
    """The end-of-run summary the playbook prints, from the wait's result."""
    lines = []
    metrics = pick_metrics(result.get("last_metrics"), list(preferred), limit)
    lines.append(
        "status:        %s%s"
        % (result.get("status") or "UNKNOWN", " - %s" % result["reason_line"] if result.get("reason_line") else "")
    )
    lines.append("submission_id: %s" % result.get("submission_id"))
    lines.append(
        "duration:      %s" % ("-" if result.get("duration_s") is None else "%.1f s" % float(result["duration_s"]))
    )
    lines.append(
        "last step:     %s %s"
        % (
            "-" if result.get("last_step") is None else result["last_step"],
            " - ".join("%s:%s" % (k, fmt_metric(v)) for k, v in metrics),
        )
    )
    for node in result.get("lost_nodes") or []:
        lines.append(
            "%s %s at %s" % ("head down:    " if node.get("head") else "node lost:    ", node["label"], node["at"])
        )
    rows = result.get("attempts") or []
    if len(rows) > 1 or any(r.get("why") not in ("succeeded", None) for r in rows):
        lines.append("attempts:")
        for r in rows:
            lines.append(
                "  %d. %s: %s%s, steps reached %s"
                % (
                    r["attempt"],
                    r["submission_id"],
                    r.get("status") or "-",
                    " (%s)" % WHY.get(r.get("why"), r.get("why"))
                    if r.get("why") and r.get("why") != "succeeded"
                    else "",
                    "-" if r.get("last_step") is None else r["last_step"],
                )
            )
    for path in result.get("log_paths") or []:
        lines.append("log:           %s" % path)
    if result.get("artifacts_error"):
        lines.append("artifacts:     NOT SAVED - %s" % result["artifacts_error"])
    lines += describe_metrics(result.get("metrics"))
    return lines
