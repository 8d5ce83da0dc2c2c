# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The run's secrets file, its working_dir zip and the job, in one call on the head: module ``rlinfra.verl.verl_submit``
(the documentation and the options) and the same code as a plain script there (its action, through
plugin_utils/node_script.py)."""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import env_secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    RayError,
    check_entrypoint,
    check_resources,
    check_runtime_env,
    check_submission_id,
    client_from_module,
    string_values,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package import (
    PackageError,
    ensure_package,
    package_name,
    read_package,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_run

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient

# Uploads of up to Ray's 100 MiB limit over a slow link take longer than the client's default 30 s.
UPLOAD_TIMEOUT = 300


class Failed(Exception):
    pass


def secrets_file(module: Any, job: Mapping[str, Any]) -> bool:
    p = module.params
    try:
        return secrets_run.converge(
            job["secrets_dir"],
            job["secrets_file"],
            p["secrets"],
            p["hook"],
            p["jobs"],
            p["write_secrets"],
            "present",
            check=module.check_mode,
        ).get("changed", False)
    except (OSError, ValueError) as e:
        raise Failed(
            "the run's secrets file: secrets file %s: %s" % (job["secrets_file"], getattr(e, "strerror", None) or e)
        ) from e


def package_bytes(module: Any, dest: str) -> tuple[bytes, bool]:
    """The zip: from the call (then kept at ``dest``, 0600) or, for a large one the action copied, from ``dest``.
    Returns ``(data, changed)``."""
    p = module.params
    if p["package_data"]:
        data = base64.b64decode(p["package_data"])
        try:
            with open(dest, "rb") as f:
                same = f.read(len(data) + 1) == data
        except OSError:
            same = False
        if not same and not module.check_mode:
            makedirs(os.path.dirname(dest) or ".", 0o700)
            write_atomic(dest, data, 0o600, prefix=".rlinfra-zip.")
        return data, not same
    return read_package(dest), False


def upload(module: Any, client: RayClient, package: Mapping[str, Any]) -> bool:
    """The working_dir on the cluster, as rlinfra.verl.ray_package puts it there. True when something changed."""
    try:
        name = package_name(package["uri"])
        data, changed = package_bytes(module, module.params["package_dest"])
        if module.check_mode:
            return changed or not client.has_package(name)
        return ensure_package(client, package["uri"], data) or changed
    except (PackageError, RayError) as e:
        raise Failed("the working_dir %s: %s" % (package["uri"], e)) from e


def create(module: Any, client: RayClient, job: Mapping[str, Any]) -> tuple[bool, str | None]:
    """The job, as rlinfra.verl.ray_job with state=submitted creates it. Returns ``(created, status)``."""
    sid = job["submission_id"]
    args = attempts.submit_args(sid, job["entrypoint"], job["runtime_env"], job["metadata"], job.get("resources"))
    runtime_env, problems = check_runtime_env(args["runtime_env"])
    metadata, meta_problems = string_values("metadata", args["metadata"])
    try:
        check_submission_id(sid)
    except RayError as e:
        problems.append(str(e))
    problems += (
        meta_problems
        + check_entrypoint(args["entrypoint"])
        + check_resources(
            args.get("entrypoint_num_cpus"),
            args.get("entrypoint_num_gpus"),
            args.get("entrypoint_memory"),
            args.get("entrypoint_resources"),
        )
    )
    if problems:
        raise Failed("job %s: %s" % (sid, "\n".join(problems)))
    try:
        existing = client.get_job(sid)
        if existing is not None or module.check_mode:
            return existing is None, (existing or {}).get("status")
        # False: another client submitted the same id between the GET and the POST.
        created = client.submit_job(
            sid,
            args["entrypoint"],
            runtime_env=runtime_env,
            metadata=metadata or None,
            entrypoint_num_cpus=args.get("entrypoint_num_cpus"),
            entrypoint_num_gpus=args.get("entrypoint_num_gpus"),
            entrypoint_memory=args.get("entrypoint_memory"),
            entrypoint_resources=args.get("entrypoint_resources"),
        )
        return created, (client.get_job(sid) or {}).get("status")
    except RayError as e:
        raise Failed("job %s: %s" % (sid, e)) from e


def submit_job(p: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's result for parameters ``p``; ``module`` is an AnsibleModule or a plain_module.PlainModule."""
    job = p["job"]
    env_vars = (job.get("runtime_env") or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(env_secret_values(env_vars))
    changed, status = False, None
    try:
        if job.get("secrets_file"):
            changed = secrets_file(module, job)
        elif job.get("secrets_run_dir"):
            try:
                changed = bool(secrets_run.prune(job["secrets_run_dir"], p["jobs"], module.check_mode))
            except OSError as e:
                raise Failed(
                    "the secrets files of ended runs in %s: %s" % (job["secrets_run_dir"], e.strerror or e)
                ) from e
        if p["submit"]:
            try:
                client = client_from_module(module, timeout=UPLOAD_TIMEOUT)
            except RayError as e:
                raise Failed("job %s: %s" % (job["submission_id"], e)) from e
            if job.get("package"):
                changed = upload(module, client, job["package"]) or changed
            created, status = create(module, client, job)
            changed = created or changed
    except Failed as e:
        return dict(failed=True, msg=str(e), changed=changed)
    return dict(changed=changed, status=status)
