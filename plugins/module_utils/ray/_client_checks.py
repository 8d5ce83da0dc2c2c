# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Checks of the Ray modules' options and values, before any request (re-exported by module_utils/ray/client.py):
the submission id, durations, the log's tail, the runtime_env, the entrypoint and its resources, and a job record as
M(rlinfra.verl.ray_cluster_info) returns it. Each option check returns its problems, one line each.

Standard library only: it runs in plain node scripts too."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_http import RayError

# Ray routes /api/jobs/{id} on the decoded path: an id with '/' (even sent as %2F) can be created but
# never read, stopped nor deleted again, and Ray names the driver's log file after it. These ids
# round-trip everywhere; 200 leaves room for Ray's "job-driver-<id>.log" in a 255-byte file name.
SUBMISSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
# Limits of the module options (docs: the modules' DOCUMENTATION).
MIN_POLL_INTERVAL = 0.1
MAX_LOGS_TAIL_LINES = 10000
# Linux refuses any single argv or environment string of 131072 bytes (NUL included) or more, and
# Ray starts the entrypoint as one: /bin/sh -c ENTRYPOINT.
MAX_ARG_BYTES = 131071
RAY_RESOURCE_PRECISION = 0.0001  # ray._raylet.RESOURCE_UNIT_SCALING = 10000
RAY_BUILTIN_RESOURCES = {"cpu": "entrypoint_num_cpus", "gpu": "entrypoint_num_gpus", "memory": "entrypoint_memory"}

SUBMISSION_ID = vocabulary.SubmissionId()


def check_submission_id(submission_id: object) -> str:
    """The id itself, or one line of :class:`RayError` saying what an id may contain."""
    try:
        return SUBMISSION_ID.validate(submission_id)
    except vocabulary.Bad as e:
        raise RayError(SUBMISSION_ID.line("submission_id", submission_id, e)) from e


# Checks of module options, before any request. Each returns a list of problems, one line each
# ("OPTION: what is wrong; what to do"); the modules fail with them and contact nothing.


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_seconds(name: str, value: Any, minimum: float = 0, hint: str = "") -> list[str]:
    """A duration option: a finite number of seconds, at least ``minimum``."""
    if value is None:
        return []
    if not _finite_number(value):
        return ["%s must be a finite number of seconds, got %r" % (name, value)]
    if value < minimum:
        return [
            "%s %s, got %r%s"
            % (name, "must not be negative" if minimum == 0 else "must be at least %s" % minimum, value, hint)
        ]
    return []


def check_tail_lines(value: int | None, maximum: int | None = MAX_LOGS_TAIL_LINES) -> list[str]:
    """``maximum`` None: no upper bound (ray_job_poll is also how the whole log is read to be saved)."""
    if value is not None and value < 0:
        return ["logs_tail_lines must not be negative, got %d (0 does not read the log)" % value]
    if value is not None and maximum is not None and value > maximum:
        return ["logs_tail_lines must be at most %d, got %d (the saved log holds the whole output)" % (maximum, value)]
    return []


def _nul(text: object) -> bool:
    return isinstance(text, str) and "\0" in text


def string_values(
    name: str, mapping: Mapping[Any, Any] | None, what: str = "a string"
) -> tuple[dict[str, str], list[str]]:
    """``(mapping with str values, problems)``: numbers become their text (Ansible turns "1" into
    1), anything else (booleans, null, lists, mappings) is refused rather than guessed at."""
    out, problems = {}, []
    for key, value in (mapping or {}).items():
        if not isinstance(key, str) or not key or _nul(key):
            problems.append("%s: %r is not a valid name" % (name, key))
        elif isinstance(value, str):
            if _nul(value):
                problems.append("%s.%s: the value contains a NUL character (\\0), which Ray cannot carry" % (name, key))
            else:
                out[key] = value
        elif _finite_number(value):
            out[key] = str(value)
        else:
            problems.append("%s.%s: expected %s, got %s; quote it to pass text" % (name, key, what, describe(value)))
    return out, problems


def describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean (%s)" % value
    if isinstance(value, float):
        return "a number that is not finite (%s)" % value
    kind = "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__
    text = repr(value)
    return "%s (%s)" % (kind, text if len(text) <= 60 else text[:57] + "...")


def check_runtime_env(runtime_env: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """``(runtime_env with env_vars as strings, problems)``. Ray creates a job whatever its env_vars
    hold and fails it when the driver starts; here they are refused before anything is sent."""
    if runtime_env is None:
        return None, []
    env = dict(runtime_env)
    problems = []
    env_vars = env.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict):
            problems.append("runtime_env.env_vars must be a mapping of NAME: value, got %s" % type(env_vars).__name__)
        else:
            values, problems = string_values("runtime_env.env_vars", env_vars)
            for key, value in values.items():
                if "=" in key:
                    problems.append(
                        "runtime_env.env_vars: %r is not a valid variable name ('=' ends a name in the "
                        "environment)" % key
                    )
                elif len(key.encode("utf-8")) + 1 + len(value.encode("utf-8", "surrogatepass")) > MAX_ARG_BYTES:
                    problems.append(
                        "runtime_env.env_vars.%s is over the %d bytes Linux allows for one environment "
                        "string; pass a file's path instead" % (key, MAX_ARG_BYTES)
                    )
            env["env_vars"] = values
    working_dir = env.get("working_dir")
    if working_dir is not None and (not isinstance(working_dir, str) or not working_dir.strip()):
        problems.append("runtime_env.working_dir must be a non-empty string (a URI or a path), got %r" % (working_dir,))
    return env, problems


def check_entrypoint(entrypoint: str | None) -> list[str]:
    if entrypoint is None:
        return []
    if not entrypoint.strip():
        return [
            "entrypoint is empty: give the shell command that starts the driver (leave entrypoint out only to "
            "look up, stop or delete an existing job)"
        ]
    if _nul(entrypoint):
        return ["entrypoint contains a NUL character (\\0), which no command line can carry"]
    size = len(entrypoint.encode("utf-8", "surrogatepass"))
    if size > MAX_ARG_BYTES:
        return [
            "entrypoint is %d bytes, over the %d Linux allows for one command line argument (Ray runs it with "
            "/bin/sh -c); move long values into a file" % (size, MAX_ARG_BYTES)
        ]
    return []


def _check_quantity(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not _finite_number(value):
        return ["%s must be a finite number, got %r" % (name, value)]
    if value < 0:
        return ["%s must not be negative, got %r" % (name, value)]
    if 0 < value < RAY_RESOURCE_PRECISION:
        return [
            "%s: %r is below Ray's resource precision; use 0 or at least %s" % (name, value, RAY_RESOURCE_PRECISION)
        ]
    return []


def check_resources(
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | None = None,
    custom: Mapping[Any, Any] | None = None,
) -> list[str]:
    """The entrypoint's resources, as Ray would refuse them only after creating the job."""
    problems = _check_quantity("entrypoint_num_cpus", num_cpus) + _check_quantity("entrypoint_num_gpus", num_gpus)
    problems += _check_quantity("entrypoint_memory", memory)
    for key, value in (custom or {}).items():
        if not isinstance(key, str) or not key.strip():
            problems.append("entrypoint_resources: %r is not a resource name" % (key,))
        elif key.lower() in RAY_BUILTIN_RESOURCES:
            problems.append(
                "entrypoint_resources.%s: Ray takes CPUs, GPUs and memory through their own options, not "
                "as custom resources; use %s" % (key, RAY_BUILTIN_RESOURCES[key.lower()])
            )
        else:
            problems += _check_quantity("entrypoint_resources.%s" % key, value)
    return problems


def check_job_record(job: object) -> dict[str, Any]:
    """A job of the cluster's list, as M(rlinfra.verl.ray_cluster_info) returns it."""
    if not isinstance(job, dict):
        raise vocabulary.Bad("be a job (a mapping)")
    for key in ("submission_id", "status"):
        if job.get(key) is not None:
            vocabulary.one_line(job[key], "a job whose %s is one line of text" % key)
    if job.get("metadata") is not None and not isinstance(job["metadata"], dict):
        raise vocabulary.Bad("be a job whose metadata is a mapping")
    return job


JOB_RECORD = vocabulary.Custom(
    "dict",
    check_job_record,
    [{"submission_id": ["x"]}, {"submission_id": "a\nb"}, {"submission_id": "x", "metadata": "m"}],
    {"submission_id": "rlinfra-sample-default", "status": "RUNNING"},
)
