#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# The action (plugins/action/verl_submit.py) decides on the controller whether the run exists and whether another
# run holds its checkpoints, then runs this module once on the head: the secrets file, the working_dir and the job
# in one call (each was a module call of its own, about a second apiece on a loaded head).

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_submit
short_description: Submit a rendered experiment to its Ray cluster once - secrets file, working_dir, job
version_added: 0.2.0
description:
  - Takes the job rendered by M(rlinfra.verl.verl_experiment) and the cluster's job list
    (M(rlinfra.verl.ray_cluster_info) with C(jobs=true)).
  - When the run already has an attempt (a re-run after the controller died, or a recovery's C(<id>-aN)) it is
    not submitted again; RV(submission_id) names the newest attempt to follow.
  - Refuses, with one line, a new run while another run still writes the same checkpoint directory.
  - On the target (the head), in one module call - writes the run's secrets file (as
    M(rlinfra.verl.verl_secrets_file) does) and removes those of ended runs; puts the working_dir zip at
    O(package_dest) (0600, kept for a recovery after a head restart) and uploads it unless the cluster has it (as
    M(rlinfra.verl.ray_package) does); submits the job (as M(rlinfra.verl.ray_job) does).
  - A zip of up to 8 MiB travels inside the module call; a larger one is copied to the head first.
  - Secret values go only to the secrets file, never into the job's C(runtime_env) nor into the result.
author:
  - rlinfra maintainers (@rlinfra)
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
options:
  job:
    description: The result of M(rlinfra.verl.verl_experiment) with C(stage=render).
    type: dict
    required: true
  jobs:
    description: The cluster's jobs, as M(rlinfra.verl.ray_cluster_info) returns them.
    type: list
    elements: dict
    default: []
  secrets:
    description: The run's secret values, C(NAME) to value; they go to its secrets file only. Never logged.
    type: dict
    default: {}
  package_dest:
    description: Path on the target where the working_dir zip is kept (used when the job has a package).
    type: str
    default: ""
  write_secrets:
    description: Set by the action (whether the run's secrets file is written or only kept); leave unset.
    type: bool
    default: true
  submit:
    description: Set by the action (false when the run already has an attempt); leave unset.
    type: bool
    default: true
  hook:
    description: Set by the action (the source of the secrets file's hook); leave unset.
    type: str
    default: ""
  package_data:
    description: Set by the action (the working_dir zip, base64, when it is small); leave unset.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: The modules it runs report what they would do and change nothing.
  diff_mode:
    support: none
    description: Nothing to diff; the secrets file's content is secret.
notes:
  - Member of the action group C(rlinfra.verl.ray) - C(module_defaults) with C(group/rlinfra.verl.ray) sets its dashboard options.
"""

EXAMPLES = r"""
- name: Submit the job
  rlinfra.verl.verl_submit:
    job: "{{ rendered }}"
    jobs: "{{ cluster.jobs }}"
    secrets: "{{ secret_env }}"
    package_dest: /tmp/rlinfra-job.zip
  register: submitted
"""

RETURN = r"""
submission_id:
  description: The attempt to follow - the new job, or the run's newest attempt when it already existed.
  returned: success
  type: str
  sample: rlinfra-smoke-default
submitted:
  description: Whether a new job was submitted.
  returned: success
  type: bool
status:
  description: The Ray status of that attempt.
  returned: success
  type: str
current:
  description: The run's newest attempt before this task (null for a new run).
  returned: success
  type: dict
msg:
  description: One line saying what was done.
  returned: always
  type: str
"""

import base64
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils import attempts as A
from ansible_collections.rlinfra.verl.plugins.module_utils import secrets_run as S
from ansible_collections.rlinfra.verl.plugins.module_utils.files import makedirs, write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_client import (
    DASHBOARD_ARGUMENT_SPEC, RayError, check_entrypoint, check_resources, check_runtime_env, check_submission_id,
    client_from_module, string_values)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray_package import (
    PackageError, ensure_package, package_name, read_package)
from ansible_collections.rlinfra.verl.plugins.module_utils.secret_names import secret_values

# Uploads of up to Ray's 100 MiB limit over a slow link take longer than the client's default 30 s.
UPLOAD_TIMEOUT = 300

ARGUMENT_SPEC = dict(
    DASHBOARD_ARGUMENT_SPEC,
    job=dict(type="dict", required=True),
    jobs=dict(type="list", elements="dict", default=[]),
    secrets=dict(type="dict", default={}, no_log=True),
    package_dest=dict(type="str", default=""),
    write_secrets=dict(type="bool", default=True),
    submit=dict(type="bool", default=True),
    hook=dict(type="str", default=""),
    package_data=dict(type="str", default="", no_log=True),
)


class Failed(Exception):
    pass


def secrets_file(module, job):
    p = module.params
    try:
        return S.converge(job["secrets_dir"], job["secrets_file"], p["secrets"], p["hook"], p["jobs"], p["write_secrets"],
                          "present", check=module.check_mode).get("changed", False)
    except (OSError, ValueError) as e:
        raise Failed("the run's secrets file: secrets file %s: %s" % (job["secrets_file"], getattr(e, "strerror", None) or e))


def package_bytes(module, dest):
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


def upload(module, client, package):
    """The working_dir on the cluster, as rlinfra.verl.ray_package puts it there. True when something changed."""
    try:
        name = package_name(package["uri"])
        data, changed = package_bytes(module, module.params["package_dest"])
        if module.check_mode:
            return changed or not client.has_package(name)
        return ensure_package(client, package["uri"], data) or changed
    except (PackageError, RayError) as e:
        raise Failed("the working_dir %s: %s" % (package["uri"], e))


def submit(module, client, job):
    """The job, as rlinfra.verl.ray_job with state=submitted creates it. Returns ``(created, status)``."""
    sid = job["submission_id"]
    args = A.submit_args(sid, job["entrypoint"], job["runtime_env"], job["metadata"], job.get("resources"))
    runtime_env, problems = check_runtime_env(args["runtime_env"])
    metadata, meta_problems = string_values("metadata", args["metadata"])
    try:
        check_submission_id(sid)
    except RayError as e:
        problems.append(str(e))
    problems += meta_problems + check_entrypoint(args["entrypoint"]) + check_resources(
        args.get("entrypoint_num_cpus"), args.get("entrypoint_num_gpus"), args.get("entrypoint_memory"),
        args.get("entrypoint_resources"))
    if problems:
        raise Failed("job %s: %s" % (sid, "\n".join(problems)))
    try:
        existing = client.get_job(sid)
        if existing is not None or module.check_mode:
            return existing is None, (existing or {}).get("status")
        # False: another client submitted the same id between the GET and the POST.
        created = client.submit_job(
            sid, args["entrypoint"], runtime_env=runtime_env, metadata=metadata or None,
            entrypoint_num_cpus=args.get("entrypoint_num_cpus"), entrypoint_num_gpus=args.get("entrypoint_num_gpus"),
            entrypoint_memory=args.get("entrypoint_memory"), entrypoint_resources=args.get("entrypoint_resources"))
        return created, (client.get_job(sid) or {}).get("status")
    except RayError as e:
        raise Failed("job %s: %s" % (sid, e))


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    job = p["job"]
    env_vars = (job.get("runtime_env") or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(secret_values(env_vars))
    changed, status = False, None
    try:
        if job.get("secrets_file"):
            changed = secrets_file(module, job)
        if p["submit"]:
            try:
                client = client_from_module(module, timeout=UPLOAD_TIMEOUT)
            except RayError as e:
                raise Failed("job %s: %s" % (job["submission_id"], e))
            if job.get("package"):
                changed = upload(module, client, job["package"]) or changed
            created, status = submit(module, client, job)
            changed = created or changed
    except Failed as e:
        module.fail_json(msg=str(e), changed=changed)
    module.exit_json(changed=changed, status=status)


if __name__ == "__main__":
    main()
