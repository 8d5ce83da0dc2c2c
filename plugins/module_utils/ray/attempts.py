# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Attempts of one run: the first submission keeps the run's submission id (``rlinfra-smoke-default``),
each automatic recovery submits the next attempt as ``<id>-a2``, ``<id>-a3``, ... The one place that
names attempts and finds them among a cluster's jobs (the Jobs API list)."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from typing import Any

ATTEMPT_SUFFIX = "-a"


def attempt_id(base: str, number: int) -> str:
    """Submission id of attempt ``number`` (1-based) of the run ``base``."""
    number = int(number)
    return base if number <= 1 else "%s%s%d" % (base, ATTEMPT_SUFFIX, number)


def attempt_number(submission_id: str | None, base: str) -> int | None:
    """1 for ``base`` itself, N for ``base-aN``, None for any other id."""
    if submission_id == base:
        return 1
    match = re.match(re.escape(base + ATTEMPT_SUFFIX) + r"([2-9]|[1-9][0-9]+)$", submission_id or "")
    return int(match.group(1)) if match else None


def attempts_of(jobs: Iterable[Mapping[str, Any]] | None, base: str) -> list[dict[str, Any]]:
    """The jobs (dicts with ``submission_id``) that are attempts of ``base``, by attempt number,
    each with its ``attempt`` number added."""
    out = []
    for job in jobs or []:
        number = attempt_number((job or {}).get("submission_id"), base)
        if number is not None:
            out.append(dict(job, attempt=number))
    return sorted(out, key=lambda j: j["attempt"])


def with_lines(jobs: Iterable[Mapping[str, Any]] | None, base: str) -> list[dict[str, Any]]:
    """The run's attempts, oldest first, each with a ``line`` to print."""
    out = []
    for job in attempts_of(jobs, base):
        why = (job.get("metadata") or {}).get("rlinfra_recovered_from")
        job["line"] = "attempt %d: %s %s, started %s, ended %s%s" % (
            job["attempt"],
            job["submission_id"],
            job.get("status"),
            job.get("start_time") or "-",
            job.get("end_time") or "-",
            " (resubmitted after %s)" % why.replace("_", " ") if why else "",
        )
        out.append(job)
    return out


def newest_attempt(jobs: Iterable[Mapping[str, Any]] | None, base: str) -> dict[str, Any] | None:
    """The newest attempt of ``base`` among ``jobs``, or None when the run was never submitted."""
    found = attempts_of(jobs, base)
    return found[-1] if found else None


ENTRYPOINT_RESOURCES = ("entrypoint_num_cpus", "entrypoint_num_gpus", "entrypoint_memory", "entrypoint_resources")


def submit_args(
    submission_id: str,
    entrypoint: str,
    runtime_env: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None,
    resources: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The arguments of rlinfra.verl.ray_job that submit one attempt (the first by verl_submit, the
    next ones by ray_job_wait's recovery): the experiment's entrypoint resources only when set."""
    args = dict(
        submission_id=submission_id,
        entrypoint=entrypoint,
        runtime_env=runtime_env or {},
        metadata=metadata or {},
        state="submitted",
        logs_tail_lines=0,
    )
    for key in ENTRYPOINT_RESOURCES:
        if (resources or {}).get(key) is not None:
            if resources is None:  # never: it holds the key (for the type checker)
                raise AssertionError("resources is set here")
            args[key] = resources[key]
    return args


def checkpoint_holder(
    jobs: Iterable[Mapping[str, Any]] | None, checkpoint_dir: str | None, base: str, active: Collection[str]
) -> Mapping[str, Any] | None:
    """The first job in one of the ``active`` statuses that is not an attempt of ``base`` but writes
    ``checkpoint_dir`` (its ``rlinfra_checkpoint_dir`` metadata), or None."""
    want = str(checkpoint_dir or "").rstrip("/")
    for job in jobs or []:
        meta = job.get("metadata") or {}
        if (
            want
            and job.get("status") in active
            and attempt_number(job.get("submission_id"), base) is None
            and str(meta.get("rlinfra_checkpoint_dir") or "").rstrip("/") == want
        ):
            return job
    return None
