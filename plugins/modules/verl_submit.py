#!/usr/bin/python
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
    description: The result of M(rlinfra.verl.verl_experiment_render).
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
runtime:
  description:
    - How the target ran the code - V(script) (the module's code as a plain Python script through the connection, without
      Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself - the
      local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run - no
      pipelining, a path to expand on the target, an option the module refuses).
  returned: when the head was called (a new run, or a secrets file to write)
  type: str
  sample: script
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.job_submit import submit_job
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.job_submit_args import (
    check_package_data,
    concealed,
    job_problems,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.package import RAY_PKG_PREFIX

JOB_SAMPLE = {
    "submission_id": "rlinfra-sample-default",
    "entrypoint": "echo hi",
    "runtime_env": {},
    "metadata": {},
    "resources": {},
    "secrets_file": None,
    "package": None,
    "checkpoint_dir": "/data/checkpoints/sample",
}

ARGS = vocabulary.Args(
    job=vocabulary.Custom(
        "dict",
        vocabulary.Custom.lines(job_problems),
        [
            ("no_id", dict(JOB_SAMPLE, submission_id=None)),
            ("id_slash", dict(JOB_SAMPLE, submission_id="a/b")),
            ("entrypoint_blank", dict(JOB_SAMPLE, entrypoint=" ")),
            ("entrypoint_list", dict(JOB_SAMPLE, entrypoint=["x"])),
            ("env_vars_list", dict(JOB_SAMPLE, runtime_env={"env_vars": ["A=1"]})),
            ("metadata_mapping", dict(JOB_SAMPLE, metadata={"x": {"a": 1}})),
            ("gpu_custom", dict(JOB_SAMPLE, resources={"entrypoint_resources": {"GPU": 1}})),
            ("secrets_file_outside", dict(JOB_SAMPLE, secrets_file="/etc/x.env", secrets_dir="/data/secrets")),
            ("secrets_dir_relative", dict(JOB_SAMPLE, secrets_file="s/x.env", secrets_dir="s")),
            ("package_uri", dict(JOB_SAMPLE, package={"uri": "gcs://../../etc/passwd", "path": "/tmp/x.zip"})),
            (
                "package_path",
                dict(JOB_SAMPLE, package={"uri": "gcs://%s%s.zip" % (RAY_PKG_PREFIX, "0" * 40), "path": "x.zip"}),
            ),
            ("checkpoint_dir", dict(JOB_SAMPLE, checkpoint_dir="../ckpt")),
        ],
        JOB_SAMPLE,
        required=True,
    ),
    jobs=vocabulary.ListOf(ray_client.JOB_RECORD, default=[]),
    secrets=vocabulary.MapOf(vocabulary.EnvName(), vocabulary.Secret(multiline=True, nullable=False), default={}),
    # Type str: the action validates on the controller, where type path would expand ~ and $VAR there.
    package_dest=vocabulary.AbsPath("writes", empty=True, default="", ansible="str"),
    write_secrets=vocabulary.Switch(default=True),
    submit=vocabulary.Switch(default=True),
    hook=vocabulary.Text(lines=True, max_len=1 << 20, default=""),
    package_data=vocabulary.Custom(
        "str", check_package_data, [("not_base64", "not base64!"), ("length", "abc")], "", default="", no_log=True
    ),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, submit_job, concealed=concealed)


if __name__ == "__main__":
    main()
