#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: converge_record
short_description: Check a node against what site.yml's last converge left, or record it
version_added: 0.9.0
description:
  - O(state=check) (site.yml's first step on every node) sets the facts M(rlinfra.verl.node_facts) sets and
    C(ansible_converge_record) saying whether the node is exactly as the record of its last converge says - same
    inputs (the collection's files and the roles' variables, digested on the controller), same files, Python
    packages, unit states, firewall table, mounts, addresses and GPUs. When it is, the facts that converge
    published (C(ray_node_ip), C(python_env_fingerprint), C(python_env_frozen), C(python_env_python_version))
    are set again from the record, so that later plays can use them without converging the node.
  - O(state=write) (site.yml's last step, after the cluster was found whole) observes the node and writes the
    record, root-only. The record is a cache of a verified converge, not configuration, so writing it reports
    C(changed=false) (RV(recorded) says whether it was rewritten).
  - Reads only with O(state=check); a missing, half-written or older record means the node is converged in full.
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: Check the node against the record, or write the record.
    type: str
    choices: [check, write]
    default: check
  path:
    description: The record's path.
    type: path
    default: /etc/ray/rlinfra-converged.json
  inputs:
    description:
      - Digest of what the run was given. With O(state=check) the action plugin computes it when omitted; with
        O(state=write) pass the one the check returned (C(ansible_converge_record.inputs)), since the run has set
        facts since.
    type: str
  watch:
    description: With O(state=write), what the record watches on the node.
    type: dict
    default: {}
    suboptions:
      files:
        description: Files whose content, mode and owner are watched.
        type: list
        elements: path
        default: []
      dirs:
        description: Directories whose regular files (directly in them) are watched, names included.
        type: list
        elements: path
        default: []
      packages:
        description: Glob patterns of site-packages directories whose package metadata entries are watched.
        type: list
        elements: str
        default: []
      units:
        description: systemd units whose active and unit-file states are watched.
        type: list
        elements: str
        default: []
      nft_tables:
        description: nftables tables (family inet) whose live rules are watched, with the controller's address.
        type: list
        elements: str
        default: []
  facts:
    description: With O(state=write), facts the converge published, set again by a check that finds the node unchanged.
    type: dict
    default: {}
  members:
    description: With O(state=write), the hosts of the node's cluster; a check's caller compares them with today's.
    type: list
    elements: str
    default: []
  settings:
    description:
      - Before the node is contacted, check the variables of these roles as values, as M(rlinfra.verl.check_settings)
        does (same rules, same one line); a bad value fails the task and the node is not read. Saves site.yml a
        task per node.
    type: list
    elements: str
    default: []
    choices: [storage_lvm, nfs_mount, python_env, ray, fitness]
attributes:
  action:
    support: full
    description: The controller digests the inputs for a check.
  check_mode:
    support: full
    description: A check only reads; a write in check mode says whether it would rewrite the record.
  diff_mode:
    support: none
    description: No diff.
  facts:
    support: full
    description: Sets C(ansible_converge_record), the node's addresses and local facts, and with an unchanged node the recorded facts.
seealso:
  - module: rlinfra.verl.node_facts
extends_documentation_fragment:
  - rlinfra.verl.local_facts
"""

EXAMPLES = r"""
- name: Is the node as its last converge left it? (the Ray settings checked first)
  rlinfra.verl.converge_record:
    settings: [ray]
  become: true

- name: Record the converge (after the cluster was found whole)
  rlinfra.verl.converge_record:
    state: write
    inputs: "{{ ansible_converge_record.inputs }}"
    watch:
      dirs: [/etc/ray, /opt/rlinfra/venv]
      packages: [/opt/rlinfra/venv/lib/python*/site-packages]
      units: [ray-worker.service]
    facts:
      ray_node_ip: "{{ ray_node_ip }}"
  become: true
"""

RETURN = r"""
ansible_facts:
  description: The facts set.
  returned: always
  type: dict
  contains:
    ansible_converge_record:
      description:
        - C(converged) (bool), C(reason) (empty when converged, else why not, one phrase), C(inputs) (the digest),
          C(members) (the cluster's hosts the record names).
      type: dict
      sample: {converged: false, reason: ray-worker.service is inactive (enabled), inputs: 3f2a..., members: [node1, node2]}
recorded:
  description: With O(state=write), whether the record was (or in check mode would be) rewritten.
  returned: success
  type: bool
reason:
  description: Why the node is not as recorded (empty when it is).
  returned: success
  type: str
runtime:
  description:
    - How the node was read (and written) - V(script) (the module's code as a plain Python script through the connection,
      without Ansible's module runtime), V(local) (the action's own process, when the target is the controller itself -
      the local connection without become, with the Python that runs Ansible) or V(module) (when that cannot run, or a
      path has a C(~) or C($) for the node to expand).
  returned: always
  type: str
  sample: script
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import converge_record

# systemctl reads a unit name starting with '-' as an option.
UNIT_NAME = vocabulary.Text(
    empty=False,
    max_len=256,
    pattern=r"^[A-Za-z0-9_][A-Za-z0-9:_.@\\-]*$",
    what="a systemd unit name (letters, digits, : _ . @ \\ -, starting with a letter, digit or _)",
)
NFT_TABLE = vocabulary.Text(
    empty=False,
    max_len=41,
    pattern=r"^[A-Za-z][A-Za-z0-9_]{0,40}$",
    what="an nftables table name (letters, digits and _, starting with a letter, at most 41)",
)

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("check", "write"), default="check"),
    path=vocabulary.AbsPath("config", default="/etc/ray/rlinfra-converged.json"),
    inputs=vocabulary.Text(
        max_len=64,
        pattern=r"^[0-9a-f]{64}$",
        what="the digest a check returned (ansible_converge_record.inputs: 64 hexadecimal digits)",
    ),
    watch=vocabulary.Options(
        dict(
            files=vocabulary.ListOf(vocabulary.AbsPath("reads"), default=[]),
            dirs=vocabulary.ListOf(vocabulary.AbsPath("reads"), default=[]),
            # Glob patterns (python*), matched on the node.
            packages=vocabulary.ListOf(vocabulary.AbsPath("reads", ansible="str"), default=[]),
            units=vocabulary.ListOf(UNIT_NAME, default=[]),
            nft_tables=vocabulary.ListOf(NFT_TABLE, default=[]),
        ),
        default={},
    ),
    facts=vocabulary.MapOf(
        vocabulary.Text(
            empty=False,
            max_len=255,
            pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
            what="a variable name (letters, digits, _; not starting with a digit)",
        ),
        vocabulary.Raw(reason="a fact's value is whatever the converge published; a check sets it again as it was"),
        default={},
    ),
    members=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=255), default=[]),
    settings=vocabulary.ListOf(
        vocabulary.Choice(("storage_lvm", "nfs_mount", "python_env", "ray", "fitness")), default=[]
    ),
    local=vocabulary.ListOf(vocabulary.Name(), default=["rlinfra_ray"]),
    fact_dir=vocabulary.AbsPath("config", default="/etc/ansible/facts.d"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    converge_record.run(ARGS.new_module(AnsibleModule, required_if=[("state", "write", ["inputs"])]))


if __name__ == "__main__":
    main()
