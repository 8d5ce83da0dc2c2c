#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: code_checkout
short_description: Check a git repository out once, at the commit its ref names, on the shared volume
version_added: 0.3.0
description:
  - The action resolves O(ref) to a commit on the controller (C(git ls-remote)), so a run names the exact code it runs
    before anything happens on the cluster; on the target it puts that commit, with its submodules, at
    C(<root>/<name>@<commit>) unless it is there already (changed=false).
  - The tree is built in a temporary directory beside it and renamed into place when complete, so every node and
    every run at that commit find either nothing or the whole checkout. C(.git/rlinfra-code.json) records the
    repository, the ref, the commit and the submodules' commits. Two runs take turns (a lock per repository name).
  - C(submit.yml) runs it for an experiment's C(code) section and starts the entrypoint in the checkout
    (docs/EXPERIMENTS.md).
  - A token (HTTPS) reaches git only through its environment, as an C(http.<origin>.extraHeader) for the repository's
    own host; a deploy key (SSH) only as a 0600 file in a 0700 directory removed afterwards. Neither is ever in an
    argument, a message or the checkout.
  - Needs C(git) on the controller and on the target.
author:
  - rlinfra maintainers (@rlinfra)
options:
  repo:
    description: The repository - C(https://), C(ssh://), C(git://), C(file://) or C(user@host:path). No credentials in it.
    type: str
    required: true
  ref:
    description: A branch, a tag or a full commit; C(HEAD) is the repository's default branch.
    type: str
    default: HEAD
  commit:
    description: The commit to check out; set by the action from O(ref) when empty.
    type: str
    default: ""
  submodules:
    description: Check the submodules out too (recursively, at the commits the checkout names).
    type: bool
    default: true
  path:
    description: The directory of the repository the caller will work in (checked to exist); C(.) for the top.
    type: str
    default: "."
  name:
    description: The checkout's directory name before C(@<commit>); default the repository's name.
    type: str
  root:
    description: Where checkouts go, on the shared volume.
    type: path
    default: /data/code
  token:
    description: An HTTPS token (sent as C(x-access-token) Basic credentials to the repository's host only). Never logged.
    type: str
    default: ""
  ssh_key:
    description: An SSH private key (a deploy key) for C(ssh://) and C(user@host:path) repositories. Never logged.
    type: str
    default: ""
  lock_timeout:
    description: Seconds to wait for another checkout of the same repository name.
    type: int
    default: 1800
attributes:
  check_mode:
    support: full
    description: Resolves the ref and reports whether the commit would be checked out; writes nothing.
  diff_mode:
    support: none
    description: Nothing to show.
"""

EXAMPLES = r"""
- name: The training code, at the commit main names now
  rlinfra.verl.code_checkout:
    repo: https://github.com/NVIDIA-NeMo/RL.git
    ref: main
    token: "{{ lookup('ansible.builtin.env', 'GITHUB_TOKEN') }}"
  register: code

- name: Where it is
  ansible.builtin.debug:
    msg: "{{ code.dir }} ({{ code.commit }})"
"""

RETURN = r"""
commit:
  description: The commit checked out.
  returned: success
  type: str
dir:
  description: The checkout, C(<root>/<name>@<commit>).
  returned: success
  type: str
workdir:
  description: O(path) inside it, where an entrypoint runs.
  returned: success
  type: str
submodules:
  description: The submodules checked out, each with C(path) and C(commit).
  returned: success
  type: list
  elements: dict
line:
  description: One line saying what was found or done, for the play's output.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout

# Declared in module_utils/verl/code_checkout.py: the action checks the same declaration on the controller.
ARGS = code_checkout.ARGS
ARGUMENT_SPEC = code_checkout.ARGUMENT_SPEC


def main():
    code_checkout.run(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
