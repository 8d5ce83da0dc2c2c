#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: owned_dir
short_description: Remove a directory only when it is provably this collection's own
version_added: 0.4.0
description:
  - Removes O(path) (C(state=absent)) after proving it may go (module_utils/common/owned.py, the rule every removal of a
    user-visible directory follows) - an absolute path without C(..), not a system or top-level directory, not equal
    to, inside or containing any of O(keep) (written or with links resolved), not a symbolic link, not a mount point,
    and, when it holds anything, holding one of O(markers) (a file the collection writes there).
  - With O(dirs), each of several directories the same way; every one is checked before any is removed.
  - A refusal is one line and changes nothing. In check mode it says what would be removed, or refuses the same way,
    so a playbook can check every directory before it removes any.
author:
  - rlinfra maintainers (@rlinfra)
options:
  path:
    description: The directory to remove; O(path) (with O(markers)) or O(dirs) must be given.
    type: path
  markers:
    description: Names of files, one of which a directory the collection made holds (C(rlinfra-owned.txt), which the venv
      and Ray's temp dir get when the collection makes them).
    type: list
    elements: str
  dirs:
    description: Several directories to remove, each checked before any goes.
    type: list
    elements: dict
    default: []
    version_added: 0.14.0
    suboptions:
      path:
        description: The directory.
        type: path
        required: true
      markers:
        description: As O(markers), for this directory.
        type: list
        elements: str
        required: true
      what:
        description: How the messages name it.
        type: str
        default: directory
  keep:
    description: Directories that must survive whatever O(path) is (the shared volume); O(path) may not be, lie in
      or contain one.
    type: list
    elements: path
    default: []
  what:
    description: How the messages name the directory.
    type: str
    default: directory
attributes:
  check_mode:
    support: full
    description: Checks the directory and says whether it would be removed; removes nothing.
extends_documentation_fragment:
  - rlinfra.verl.attributes.ABSENT
"""

EXAMPLES = r"""
- name: Purge the venv, only if site.yml made it
  rlinfra.verl.owned_dir:
    path: /opt/rlinfra/venv
    markers: [rlinfra-owned.txt]
    keep: [/data]
    what: Python environment
"""

RETURN = r"""
removed:
  description: Whether a directory was removed (in check mode, whether one would be).
  returned: success
  type: bool
paths:
  description: The directories removed (in check mode, that would be).
  returned: success
  type: list
  elements: str
  version_added: 0.14.0
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module

ARGS = vocabulary.Args(
    path=vocabulary.AbsPath("owns"),
    markers=vocabulary.ListOf(vocabulary.Name(), empty=False),
    dirs=vocabulary.ListOf(
        vocabulary.Options(
            dict(
                path=vocabulary.AbsPath("owns", required=True),
                markers=vocabulary.ListOf(vocabulary.Name(), required=True, empty=False),
                what=vocabulary.Text(empty=False, max_len=100, default="directory"),
            )
        ),
        default=[],
    ),
    keep=vocabulary.ListOf(vocabulary.AbsPath("reads"), default=[]),
    what=vocabulary.Text(empty=False, max_len=100, default="directory"),
    state=vocabulary.Choice(("absent",), default="absent"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, owned.remove_dir)


if __name__ == "__main__":
    main()
