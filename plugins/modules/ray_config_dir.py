#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_config_dir
short_description: Remove the collection's files from Ray's configuration directory, and the directory once empty
version_added: 0.14.0
description:
  - Removes the entries of O(path) that the collection writes there - the cluster token C(auth_token), C(ray.env),
    C(ray-secrets.env), the registry's credentials C(registry/) and every C(rlinfra-*) record - and each of O(files);
    then O(path) itself when nothing else is left in it.
  - Anything else in O(path) (a user's TLS certificates, say) stays, and so does the directory; RV(kept) names it.
  - Used by C(roles/ray/tasks/teardown.yml) (module_utils/ray/teardown.py); a second run changes nothing.
author:
  - rlinfra maintainers (@rlinfra)
options:
  path:
    description: Ray's configuration directory (C(ray_config_dir)).
    type: path
    required: true
  files:
    description: More files to remove, wherever they are (the C(rlinfra_ray) local fact).
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    support: full
    description: Says what would be removed and kept; removes nothing.
extends_documentation_fragment:
  - rlinfra.verl.attributes.ABSENT
"""

EXAMPLES = r"""
- name: Remove the token, the environment files, the records and the rlinfra_ray local fact
  rlinfra.verl.ray_config_dir:
    path: /etc/ray
    files: [/etc/ansible/facts.d/rlinfra_ray.fact]
  register: config
"""

RETURN = r"""
removed:
  description: What was (in check mode, would be) removed, O(path) last when it went.
  returned: success
  type: list
  elements: str
kept:
  description: The entries of O(path) that are not the collection's, which keep the directory.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.teardown import config_absent

ARGS = vocabulary.Args(
    path=vocabulary.AbsPath("config", required=True),
    files=vocabulary.ListOf(vocabulary.AbsPath("config"), default=[]),
    state=vocabulary.Choice(("absent",), default="absent"),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, config_absent)


if __name__ == "__main__":
    main()
