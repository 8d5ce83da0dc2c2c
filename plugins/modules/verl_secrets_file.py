#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_secrets_file
short_description: Write or remove the secrets file of one Ray job run on the shared volume
version_added: 0.2.0
description:
  - Secret values never go into a Ray job's C(runtime_env) (Ray copies C(env_vars) into the command lines of its
    worker-setup processes on every node). They go to one file per run, C(<secrets_dir>/<cluster>/<submission id>.env)
    (mode 0600, directories 0700, on the shared volume), whose path the job carries (E(RLINFRA_SECRETS_FILE)).
  - With O(state=present) it creates the directories, installs the worker hook that reads the file
    (C(<secrets_dir>/rlinfra_secrets.py), O(hook)), removes the files of the cluster's runs that have no
    PENDING or RUNNING attempt left in O(jobs), and writes the file when O(write) is true and its content differs.
  - With O(state=absent) it removes the file of the run.
  - Used by M(rlinfra.verl.verl_submit); see docs/SECURITY.md, "Secrets".
author:
  - rlinfra maintainers (@rlinfra)
options:
  secrets_dir:
    description: The directory of secrets files on the shared volume.
    type: path
    required: true
  path:
    description: The run's file, C(<secrets_dir>/<cluster>/<submission id>.env); any other path is refused.
    type: path
    required: true
  values:
    description: The run's secrets, C(NAME) to value. Never logged.
    type: dict
    default: {}
  hook:
    description: Source of the worker hook module installed as C(<secrets_dir>/rlinfra_secrets.py); empty leaves it alone.
    type: str
    default: ""
  jobs:
    description: The cluster's jobs (M(rlinfra.verl.ray_cluster_info) C(jobs)); the files of runs without an active attempt go.
    type: list
    elements: dict
    default: []
  write:
    description: Write the file (false when the run's newest attempt can start no process any more).
    type: bool
    default: true
  state:
    description: V(present) writes the file, V(absent) removes it.
    type: str
    choices: [present, absent]
    default: present
attributes:
  check_mode:
    support: full
    description: Reports what would change and changes nothing.
  diff_mode:
    support: none
    description: The content is secret.
"""

EXAMPLES = r"""
- name: Write the run's secrets file
  rlinfra.verl.verl_secrets_file:
    secrets_dir: /data/.rlinfra/secrets
    path: /data/.rlinfra/secrets/default/rlinfra-grpo-default.env
    values:
      HF_TOKEN: "{{ lookup('ansible.builtin.env', 'HF_TOKEN') }}"
    jobs: "{{ cluster.jobs }}"

- name: Remove it once the run ended
  rlinfra.verl.verl_secrets_file:
    secrets_dir: /data/.rlinfra/secrets
    path: /data/.rlinfra/secrets/default/rlinfra-grpo-default.env
    state: absent
"""

RETURN = r"""
written:
  description: Whether the run's file was written (or would be, in check mode).
  returned: always
  type: bool
removed:
  description: Files removed - the stale files of ended runs, or the run's file with O(state=absent).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_run

ARGS = vocabulary.Args(
    secrets_dir=vocabulary.AbsPath("owns", required=True),
    path=vocabulary.AbsPath(
        "writes", required=True
    ),  # and <secrets_dir>/<cluster>/<submission id>.env: secrets_run.bad_path, after the types
    values=vocabulary.MapOf(
        vocabulary.EnvName(), vocabulary.Secret(multiline=True), default={}
    ),  # values may span lines (a key)
    hook=vocabulary.Text(lines=True, max_len=1048576, what="the hook module's Python source", default=""),
    jobs=vocabulary.ListOf(
        vocabulary.MapOf(
            vocabulary.Text(empty=False, max_len=200),
            vocabulary.Raw(reason="a Ray job's record as ray_cluster_info returns it, read with .get"),
        ),
        max_items=100000,
        default=[],
    ),
    write=vocabulary.Switch(default=True),
    state=vocabulary.Choice(("present", "absent"), default="present"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    secrets_run.secrets_file(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
