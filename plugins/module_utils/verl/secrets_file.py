# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The secrets file of a run, and the Ray worker hook that reads it (docs/SECURITY.md, "Secrets").

Ray writes every ``runtime_env.env_vars`` value into the command line of its worker-setup process
(``setup_worker.py --serialized-runtime-env-context=...``) on every node, so secret values never go
into the runtime_env. submit.yml (action verl_submit, module verl_secrets_file) writes them to ``<secrets dir>/<cluster>/<submission id>.env``
(0600 in a 0700 directory, on the shared volume) and only that file's path travels, as
``RLINFRA_SECRETS_FILE``. The driver's shell sources the file (:data:`ENTRYPOINT_PREFIX`); every
Ray worker of the job runs :func:`load` first (``runtime_env.worker_process_setup_hook``).

This file is also the hook itself: verl_submit copies it to ``<secrets dir>/rlinfra_secrets.py``,
a directory on the job's PYTHONPATH. Standard library only, and no import of the collection.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from typing import Any

FILE_VAR = "RLINFRA_SECRETS_FILE"
HOOK_MODULE = "rlinfra_secrets"
HOOK = HOOK_MODULE + ".load"
# `.` is a shell builtin: the values go from the file into the driver's environment, never into an argv.
# dash (Debian's /bin/sh, which Ray's job supervisor runs the entrypoint with) exits when `.` cannot
# read the file, so a missing file fails the job at once instead of running it without its secrets.
ENTRYPOINT_PREFIX = 'set -a; . "$%s"; set +a; ' % FILE_VAR
# The first line of every file :func:`dumps` writes: what marks a file as one rlinfra may remove (secrets_run.ours).
HEADER = "# rlinfra: secrets of one run; removed when the run ends (docs/SECURITY.md)"
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def default_dir(checkpoint_root: str | None) -> str:
    """``.rlinfra/secrets`` next to the checkpoint root: on the shared volume every node mounts
    (``/data/checkpoints`` -> ``/data/.rlinfra/secrets``)."""
    root = (checkpoint_root or "/data/checkpoints").rstrip("/") or "/"
    return os.path.join(os.path.dirname(root) or "/", ".rlinfra", "secrets")


def file_path(directory: str, cluster: str, submission_id: str) -> str:
    """One file per run (its first attempt's submission id): recovery attempts share it."""
    return "%s/%s/%s.env" % (directory.rstrip("/"), cluster, submission_id)


def dumps(values: Mapping[str, Any]) -> str:
    """``NAME='value'`` lines, quoted for a POSIX shell (and read back by :func:`loads`)."""
    lines = [HEADER]
    for name in sorted(values):
        value = values[name]
        if not NAME_RE.match(str(name)):
            raise ValueError("%r is not an environment variable name" % (name,))
        if value is None or "\0" in str(value):
            raise ValueError("the value of %s cannot be an environment variable" % name)
        lines.append("%s=%s" % (name, shlex.quote(str(value))))
    return "\n".join(lines) + "\n"


def loads(text: str) -> dict[str, str]:
    """The ``{name: value}`` of a file written by :func:`dumps` (values may span lines)."""
    out = {}
    for token in shlex.split(text, comments=True, posix=True):
        name, sep, value = token.partition("=")
        if not sep or not NAME_RE.match(name):
            raise ValueError("not a NAME=value line: %s" % name[:40])
        out[name] = value
    return out


def load(path: str | None = None) -> dict[str, str] | list[str]:
    """Ray's worker_process_setup_hook: the run's secrets into this worker's environment.

    A missing file fails the worker with one line (Ray shows it in the task's or actor's error):
    the run ended and its file was removed, or the shared volume is not mounted on this node."""
    path = path or os.environ.get(FILE_VAR)
    if not path:
        return {}
    try:
        with open(path) as f:
            values = loads(f.read())
    except OSError as e:
        raise RuntimeError(
            "rlinfra: cannot read the run's secrets file %s (%s): the run ended and the file was "
            "removed, or the shared volume is not mounted on this node; submit the run again "
            "(submit.yml)" % (path, e.strerror or e)
        ) from None
    os.environ.update(values)
    return sorted(values)
