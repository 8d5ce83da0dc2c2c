#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_node_state
short_description: Tell whether a running Ray node must restart, from a record of what it was started with
version_added: 0.2.0
description:
  - With O(state=query) (read-only) compares what decides a restart of the node's Ray - the digests of
    O(inputs) (for example its C(ray_env), token and unit settings) and the fingerprint of the Python
    environment (from the record M(rlinfra.verl.python_env_sync) keeps in the venv) - with the record the
    last successful converge left in O(path), and says whether the running service O(service) would restart
    and why (RV(reasons)).
  - With O(python_env) it also compares the package lists and the interpreter a run would install with the
    ones the environment was installed from, so that a restart can be foreseen before anything is installed.
  - With O(state=recorded) writes the record (root-only, mode 0600) - after Ray was (re)started with it.
  - Only digests are kept and returned; hash secrets before passing them in O(inputs).
author:
  - rlinfra maintainers (@rlinfra)
options:
  path:
    description: The record file, for example C(/etc/ray/rlinfra-state.json).
    type: path
    required: true
  service:
    description: The systemd unit running Ray on the node; a restart is only foreseen when it is active.
    type: str
    required: true
  inputs:
    description:
      - What decides a restart apart from the Python environment, as named parts (each is hashed on its own, so
        RV(reasons) names the parts that changed). Pass digests of secrets, never secrets.
    type: dict
    default: {}
  python_env_state:
    description: The record of the Python environment Ray runs from (C(<venv>/rlinfra-state.json), written by M(rlinfra.verl.python_env_sync)).
    type: path
  python_env:
    description:
      - What the run will install into the environment; compared with what the environment was installed
        from (RV(reasons) then names C(python_env)). For O(state=query) only.
    type: dict
    suboptions:
      python:
        description: The environment's interpreter (its C(python -VV) line is part of the comparison).
        type: path
        required: true
      packages:
        description: C(python_env_packages).
        type: list
        elements: str
        default: []
      no_build_isolation_packages:
        description: C(python_env_no_build_isolation_packages).
        type: list
        elements: str
        default: []
      no_deps_packages:
        description: C(python_env_no_deps_packages).
        type: list
        elements: str
        default: []
  state:
    description: V(query) compares, V(recorded) writes the record.
    type: str
    choices: [query, recorded]
    default: query
attributes:
  check_mode:
    support: full
    description: V(query) only reads; V(recorded) reports whether it would write.
  diff_mode:
    support: none
    description: RV(reasons) says what differs.
seealso:
  - module: rlinfra.verl.python_env_sync
  - module: rlinfra.verl.ray_node_guard
"""

EXAMPLES = r"""
- name: Would Ray restart on this node?
  rlinfra.verl.ray_node_state:
    path: /etc/ray/rlinfra-state.json
    service: ray-worker.service
    python_env_state: /opt/rlinfra/venv/rlinfra-state.json
    inputs:
      ray_env: "{{ ray_env | dictsort | to_json | hash('sha256') }}"
      unit: {temp_dir: /workspace/ray, num_gpus: auto}
  register: ray_state

- name: Record what Ray was started with
  rlinfra.verl.ray_node_state:
    path: /etc/ray/rlinfra-state.json
    service: ray-worker.service
    python_env_state: /opt/rlinfra/venv/rlinfra-state.json
    inputs:
      ray_env: "{{ ray_env | dictsort | to_json | hash('sha256') }}"
      unit: {temp_dir: /workspace/ray, num_gpus: auto}
    state: recorded
"""

RETURN = r"""
runtime:
  description:
    - How the target ran the code - V(script) (the module's code as a plain Python script through the connection, without
      Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself - the
      local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run - no
      pipelining, a path to expand on the target, an option the module refuses).
  returned: always
  type: str
  sample: script
active:
  description: Whether O(service) is active.
  returned: always
  type: bool
recorded:
  description: Whether a record existed before this call.
  returned: always
  type: bool
restart:
  description: Whether Ray is running and would restart (RV(active) and RV(reasons) not empty).
  returned: when O(state=query)
  type: bool
reasons:
  description:
    - Why, as short names. V(no_record) - nothing says what Ray was started with; V(python_env) - the package
      lists or the interpreter changed; V(environment) - the installed environment is not the one Ray was
      started from; any other name - that part of O(inputs) changed.
  returned: when O(state=query)
  type: list
  elements: str
  sample: [python_env, ray_env]
fingerprint:
  description: The fingerprint of the installed Python environment (from O(python_env_state)), or null.
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_state import node_state

# systemctl reads a unit name starting with '-' as an option.
UNIT_NAME = dict(
    empty=False,
    max_len=256,
    pattern=r"^[A-Za-z0-9_][A-Za-z0-9:_.@\\-]*$",
    what="a systemd unit name (letters, digits, : _ . @ \\ -, starting with a letter, digit or _)",
)

ARGS = vocabulary.Args(
    path=vocabulary.AbsPath("config", required=True),
    service=vocabulary.Text(required=True, sample="ray-worker.service", **UNIT_NAME),
    inputs=vocabulary.MapOf(
        vocabulary.Name(),
        vocabulary.Raw(reason="a part is hashed whole, whatever its shape (its digest is compared)"),
        default={},
    ),
    python_env_state=vocabulary.AbsPath("reads"),
    python_env=vocabulary.Options(
        dict(
            python=vocabulary.AbsPath("reads", required=True),
            packages=vocabulary.ListOf(vocabulary.Requirement(), default=[]),
            no_build_isolation_packages=vocabulary.ListOf(vocabulary.Requirement(), default=[]),
            no_deps_packages=vocabulary.ListOf(vocabulary.Requirement(), default=[]),
        )
    ),
    state=vocabulary.Choice(("query", "recorded"), default="query"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, node_state)


if __name__ == "__main__":
    main()
