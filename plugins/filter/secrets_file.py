# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the secrets-file route (plugins/module_utils/secrets_file.py, docs/SECURITY.md):

    {{ values | rlinfra.verl.secrets_env_file }}                 the file's text (no_log tasks only)
    {{ current | rlinfra.verl.secrets_file_needed }}             write it: the run may (re)start a driver
    {{ waited | rlinfra.verl.secrets_file_done }}                remove it: the waited run has ended
    {{ paths | rlinfra.verl.secrets_files_stale(jobs, keep) }}   files of this cluster's runs that ended
"""

from __future__ import annotations

import os

from ansible_collections.rlinfra.verl.plugins.module_utils.attempts import attempts_of
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import ACTIVE_STATUSES
from ansible_collections.rlinfra.verl.plugins.module_utils.secrets_file import dumps

# A run left in these states starts no new process: neither a recovery (the wait resubmits only
# after a failure) nor a re-attach needs its secrets.
FINAL_OK = frozenset(("SUCCEEDED", "STOPPED"))
# The wait ends with the job still possibly running (it is left running on a timeout, unknown when
# the dashboard stopped answering): its workers may still start and read the file.
UNFINISHED_REASONS = frozenset(("timeout", "unreachable", "check_mode", "error"))


def secrets_env_file(values):
    return dumps(dict(values or {}))


def secrets_file_needed(current):
    """``current``: the run's newest attempt (or None, a new submission)."""
    return current is None or (current or {}).get("status") not in FINAL_OK


def secrets_file_done(waited):
    """After a wait: True when the run's latest attempt can start no process any more."""
    waited = waited or {}
    if waited.get("skipped") or not waited.get("reason"):
        return False
    if waited.get("reason") in UNFINISHED_REASONS:
        return False
    return waited.get("status") not in ACTIVE_STATUSES


def secrets_files_stale(paths, jobs, keep=None):
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


class FilterModule:
    def filters(self):
        return {"secrets_env_file": secrets_env_file, "secrets_file_needed": secrets_file_needed,
                "secrets_file_done": secrets_file_done, "secrets_files_stale": secrets_files_stale}
