# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""ray_job_wait's options completed from the run's experiment (a verl_experiment_render result): which options
the experiment gives, and the rule that an option set on the task wins (plugins/action/ray_job_wait.py)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

# What an `experiment` (a verl_experiment_render result) gives when the option itself is not set.
FROM_WAIT = (
    "timeout",
    "progress_interval",
    "poll_interval",
    "stop_on_timeout",
    "stall_timeout",
    "outage_grace",
    "supervise",
)


def from_experiment(args: dict[str, Any], given: Collection[str]) -> dict[str, Any]:
    """``args`` completed from ``args['experiment']`` (a verl_experiment_render result): the run's id,
    its wait settings, runtime_env, recovery, what a recovery submits, its checkpoints and hosts.
    An option set on the task wins."""
    exp = args["experiment"]
    package = exp.get("package")
    derived = dict(
        base_submission_id=exp.get("submission_id") or "",
        runtime_env=exp.get("runtime_env"),
        label=(exp.get("experiment") or {}).get("name") or "",
        recovery=(exp.get("experiment") or {}).get("recovery") or {},
        job=dict(
            job_template=exp.get("job_template"),
            metadata=exp.get("metadata") or {},
            resources=exp.get("resources") or {},
            package=dict(uri=package["uri"], src=args["package_src"]) if package else None,
        ),
        checkpoint_dir=exp.get("checkpoint_dir") or "",
        hosts=exp.get("cluster_hosts") or [],
        secret_names=list((exp.get("secrets") or {}).get("present") or []),
        secrets_file=exp.get("secrets_file") or "",
        cluster=exp.get("cluster") or "",
        **{k: (exp.get("wait") or {})[k] for k in FROM_WAIT if k in (exp.get("wait") or {})},
    )
    out = dict(args)
    out.update((k, v) for k, v in derived.items() if k not in given)
    if not out["on_end"]:
        out["on_end"] = (exp.get("experiment") or {}).get("on_end") or "keep"
    return out
