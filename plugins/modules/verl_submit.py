#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

# Documentation only: the work is done by plugins/action/verl_submit.py, which runs
# rlinfra.verl.verl_secrets_file, rlinfra.verl.ray_package and rlinfra.verl.ray_job on the head.

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
  - On the target (the head) - writes the run's secrets file with M(rlinfra.verl.verl_secrets_file) and removes
    those of ended runs; copies the working_dir zip to O(package_dest) (0600, kept for a recovery after a head
    restart) and uploads it with M(rlinfra.verl.ray_package); submits the job with M(rlinfra.verl.ray_job).
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
