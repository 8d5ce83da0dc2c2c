# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The checks of ``rlinfra.verl.verl_submit``'s arguments beyond the vocabulary's own: the rendered job (by the rules
ray_job, ray_package and the secrets file apply), the zip sent inside the call, and the values a refusal must mask.
Its work is module_utils/ray/job_submit.py's; this file stays off the script route (plugin_utils/node_script.py)."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import env_secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.attempts import ENTRYPOINT_RESOURCES
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    check_entrypoint,
    check_resources,
    check_runtime_env,
    string_values,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package import RAY_PKG_PREFIX

# The action sends a zip of up to 8 MiB inside the call, base64.
PACKAGE_DATA_MAX = 4 * -(-8 * 1024 * 1024 // 3)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
PACKAGE_URI = vocabulary.Text(
    empty=False,
    max_len=200,
    pattern=r"^gcs://%s[0-9a-f]{40}\.zip$" % RAY_PKG_PREFIX,
    what="a package URI made by rlinfra, gcs://%s<sha1 of the zip>.zip" % RAY_PKG_PREFIX,
)
SUBMISSION_ID = vocabulary.SubmissionId()
ABS_PATH = vocabulary.AbsPath("writes", empty=True)


def _line(name: str, t: Any, value: Any) -> str | None:
    """The vocabulary's line for ``value`` as ``t`` at ``name``, or None when it is good."""
    try:
        t.check(value)
    except vocabulary.Bad as e:
        return t.line(name, value, e)
    return None


def job_problems(job: Any) -> list[str]:
    """What the module reads of the rendered job (M(rlinfra.verl.verl_experiment_render)), by the rules
    ray_job, ray_package and the secrets file apply; one line each, naming ``job.<key>``."""
    problems = [_line("job.submission_id", SUBMISSION_ID, job.get("submission_id"))]
    entrypoint = job.get("entrypoint")
    if not isinstance(entrypoint, str):
        problems.append(
            "job.entrypoint must be the shell command that starts the driver, got %s" % vocabulary.type_word(entrypoint)
        )
    else:
        problems += ["job." + x for x in check_entrypoint(entrypoint)]
    for key, check in (
        ("runtime_env", lambda v: check_runtime_env(v)[1]),
        ("metadata", lambda v: string_values("metadata", v)[1]),
        ("resources", lambda v: check_resources(*[v.get(k) for k in ENTRYPOINT_RESOURCES])),
    ):
        value = job.get(key)
        if value is not None and not isinstance(value, dict):
            problems.append("job.%s must be a mapping, got %s" % (key, vocabulary.type_word(value)))
        elif value:
            problems += [("job.resources." if key == "resources" else "job.") + x for x in check(value)]
    if job.get("secrets_file"):
        problems += [
            _line("job.secrets_dir", vocabulary.AbsPath("owns"), job.get("secrets_dir")),
            _line(
                "job.secrets_file",
                vocabulary.AbsPath("writes", under=str(job.get("secrets_dir") or "/")),
                job["secrets_file"],
            ),
        ]
    package = job.get("package")
    if package is not None and not isinstance(package, dict):
        problems.append("job.package must be a mapping (uri, path), got %s" % vocabulary.type_word(package))
    elif package:
        problems += [
            _line("job.package.uri", PACKAGE_URI, package.get("uri")),
            _line("job.package.path", vocabulary.AbsPath("reads"), package.get("path")),
        ]
    problems.append(_line("job.checkpoint_dir", ABS_PATH, job.get("checkpoint_dir") or ""))
    return [x for x in problems if x]


def check_package_data(value: Any) -> Any:
    """The zip the action sends inside the call: base64, at most :data:`PACKAGE_DATA_MAX` characters."""
    if len(value) > PACKAGE_DATA_MAX:
        raise vocabulary.Bad(
            "be at most %d characters (a zip of 8 MiB, base64): a larger zip is copied first" % PACKAGE_DATA_MAX
        )
    if len(value) % 4 or not _BASE64.match(value):
        raise vocabulary.Bad("be the zip in base64 (set by the action; leave it unset)")
    return value


def concealed(params: Any) -> list[str]:
    """A refusal's invocation shows the job: its secret-looking values, masked before the fields are checked."""
    env = (params["job"] or {}).get("runtime_env")
    return env_secret_values(env.get("env_vars") if isinstance(env, dict) else None)
