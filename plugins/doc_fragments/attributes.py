# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Attributes that several modules share word for word (as community.general.attributes does): a module whose check or
diff mode says something of its own writes it in its own documentation instead."""

from __future__ import annotations


class ModuleDocFragment:
    # A module that only reads: check mode is its normal run.
    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    description: Only reads.
  diff_mode:
    support: none
    description: Nothing to diff.
"""

    # A module that is an action plugin of the collection (plugins/action/), with a module file for its documentation.
    ACTION = r"""
attributes:
  action:
    support: full
    description: Runs as an action plugin on the controller, which calls modules on the target as needed.
"""

    # A module that only removes what the collection made (state=absent): what its check mode says is its own.
    ABSENT = r"""
options:
  state:
    description: Only C(absent); the module removes what it manages.
    type: str
    default: absent
    choices: [absent]
attributes:
  diff_mode:
    support: none
    description: Nothing to diff.
"""
