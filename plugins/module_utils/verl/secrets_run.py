# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""When a run's secrets file (plugins/module_utils/verl/secrets_file.py) is written, kept and removed,
and the converging of it on the head (module rlinfra.verl.verl_secrets_file)."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import refuse_link, write_if_changed
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.attempts import attempts_of
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import ACTIVE_STATUSES
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.secrets_file import HEADER, HOOK_MODULE, dumps

# A run left in these states starts no new process: neither a recovery (the wait resubmits only
# after a failure) nor a re-attach needs its secrets.
FINAL_OK = frozenset(("SUCCEEDED", "STOPPED"))
# The wait ends with the job still possibly running (it is left running on a timeout, unknown when
# the dashboard stopped answering): its workers may still start and read the file.
UNFINISHED_REASONS = frozenset(("timeout", "unreachable", "check_mode", "error", "detached", "supervisor"))


def sources(
    names: Iterable[str], given: Mapping[str, Any] | Collection[str], environ: Mapping[str, str]
) -> tuple[list[str], list[str]]:
    """``(from_vars, from_env)``: the secrets among ``names`` whose values the user gave in Ansible
    (``given``: the names of verl_job_secrets with a value, or that dict), else that the controller's
    environment has; a value in Ansible wins."""
    from_vars = [n for n in names if n in given and (not isinstance(given, dict) or given[n] not in ("", None))]
    from_env = [n for n in names if n not in from_vars and environ.get(n)]
    return from_vars, from_env


def values(names: Iterable[str], given: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """The ``{name: value}`` of the secrets among ``names``, by the rule of :func:`sources`."""
    from_vars, from_env = sources(names, given or {}, environ)
    out = {n: str(given[n]) for n in from_vars}
    out.update((n, environ[n]) for n in from_env)
    return out


def needed(current: Mapping[str, Any] | None) -> bool:
    """``current``: the run's newest attempt (or None, a new submission)."""
    return current is None or (current or {}).get("status") not in FINAL_OK


def done(waited: Mapping[str, Any] | None) -> bool:
    """After a wait: True when the run's latest attempt can start no process any more."""
    waited = waited or {}
    if waited.get("skipped") or not waited.get("reason"):
        return False
    if waited.get("reason") in UNFINISHED_REASONS:
        return False
    return waited.get("status") not in ACTIVE_STATUSES


def stale(paths: Iterable[str] | None, jobs: Iterable[Mapping[str, Any]] | None, keep: str | None = None) -> list[str]:
    """The files among ``paths`` (``<dir>/<cluster>/<submission id>.env``) whose run has no
    PENDING/RUNNING attempt in ``jobs`` (that cluster's job list); ``keep`` is never stale."""
    out = []
    for path in paths or []:
        name = os.path.basename(str(path))
        if not name.endswith(".env"):
            continue
        base = name[: -len(".env")]
        if base == keep:
            continue
        if not any(j.get("status") in ACTIVE_STATUSES for j in attempts_of(jobs, base)):
            out.append(path)
    return sorted(out)


def ours(path: str) -> bool:
    """Whether ``path`` is a secrets file rlinfra wrote (a file, not a link, starting with :data:`HEADER`): the only
    files removed here. The directory is the user's choice (verl_job_secrets_dir) and its name the cluster's, so a
    ``<name>.env`` in it may be anyone's (a project's own .env)."""
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, errors="replace") as f:
            return f.readline().rstrip("\n") == HEADER
    except OSError:
        return False


def _ours_to_remove(paths, jobs, keep=None):
    return [x for x in stale(paths, jobs, keep) if ours(x)]


def _mkdir(path, mode, check):
    # chmod and listing go through a link to wherever it points; a system directory (verl_job_secrets_dir=/data)
    # would be closed to everyone else.
    try:
        refuse_link(path, "a secrets directory")
    except OSError as e:
        raise ValueError("%s: %s; make it a directory, or set verl_job_secrets_dir to one" % (path, e.strerror)) from e
    if vocabulary.normpath(path) in owned.SYSTEM:
        raise ValueError(
            "%s is a system directory: it would be made 0700; set verl_job_secrets_dir to a directory of its own" % path
        )
    if os.path.isdir(path):
        if (os.stat(path).st_mode & 0o7777) == mode:
            return False
        if not check:
            os.chmod(path, mode)
        return True
    if not check:
        os.makedirs(path, mode=mode, exist_ok=True)
        os.chmod(path, mode)
    return True


def prune(run_dir: str | None, jobs: Iterable[Mapping[str, Any]] | None, check: bool = False) -> list[str]:
    """The files of ended runs in ``run_dir`` (``<secrets dir>/<cluster>``) removed, for a submit whose own run has no
    secrets file; returns the paths removed."""
    if not run_dir or not os.path.isdir(run_dir) or os.path.islink(run_dir):
        return []
    removed = _ours_to_remove(sorted(os.path.join(run_dir, n) for n in os.listdir(run_dir)), jobs)
    for old in removed:
        if not check:
            os.unlink(old)
    return removed


def converge(
    secrets_dir: str,
    path: str,
    values: Mapping[str, Any] | None,
    hook: str | None,
    jobs: Iterable[Mapping[str, Any]] | None,
    write: bool,
    state: str,
    check: bool = False,
) -> dict[str, Any]:
    """The run's file at ``path`` present (with ``values``) or absent; returns the module's result."""
    run_dir = os.path.dirname(path)
    if state == "absent":
        gone = os.path.lexists(path)
        if gone and not ours(path):
            raise ValueError(
                "refusing to remove it: it is not a secrets file rlinfra wrote (its first line is not %r)" % HEADER
            )
        if gone and not check:
            os.unlink(path)
        return dict(changed=gone, written=False, removed=[path] if gone else [])
    text = dumps(values or {})  # a value no shell can hold fails here, before anything changes
    changed = _mkdir(secrets_dir, 0o700, check)
    changed = _mkdir(run_dir, 0o700, check) or changed
    if hook:
        changed = write_if_changed(os.path.join(secrets_dir, HOOK_MODULE + ".py"), hook, 0o644, check) or changed
    present = sorted(os.path.join(run_dir, n) for n in os.listdir(run_dir)) if os.path.isdir(run_dir) else []
    removed = _ours_to_remove(present, jobs, keep=os.path.basename(path)[: -len(".env")])
    for old in removed:
        if not check:
            os.unlink(old)
    written = bool(write) and write_if_changed(path, text, 0o600, check)
    return dict(changed=changed or bool(removed) or written, written=written, removed=removed)


def bad_path(p: Mapping[str, Any]) -> str:
    """'' when ``path`` is a run's file, ``<secrets_dir>/<cluster>/<submission id>.env``; else the line. Its directory
    is made 0700 and its other .env files of ended runs removed: never a directory outside secrets_dir."""
    path, root = os.path.normpath(p["path"]), os.path.normpath(p["secrets_dir"])
    parts = os.path.relpath(path, root).split(os.sep) if vocabulary.inside(path, root) else []
    if len(parts) == 2 and parts[0] not in (".", "..") and parts[1].endswith(".env") and len(parts[1]) > len(".env"):
        return ""
    return (
        "path must be a run's file <secrets_dir>/<cluster>/<submission id>.env, one directory inside secrets_dir "
        "%s, got %r" % (p["secrets_dir"], p["path"])
    )


def secrets_file(module: Any) -> None:
    """The ``verl_secrets_file`` module's work, with its AnsibleModule: ``path`` checked (:func:`bad_path`), then
    :func:`converge`; exits through ``module``."""
    p = module.params
    why = bad_path(p)
    if why:
        module.fail_json(msg=why, changed=False)
    try:
        result = converge(
            p["secrets_dir"],
            p["path"],
            p["values"],
            p["hook"],
            p["jobs"],
            p["write"],
            p["state"],
            check=module.check_mode,
        )
    except (OSError, ValueError) as e:
        module.fail_json(msg="secrets file %s: %s" % (p["path"], getattr(e, "strerror", None) or e))
    module.exit_json(**result)
