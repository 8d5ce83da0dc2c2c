# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters ``rlinfra.verl.secret_env`` and ``rlinfra.verl.plain_env``: the two halves of an environment
mapping, split by the collection's one rule for secret names (plugins/module_utils/common/secret_names.py).
The ray role writes the plain half to ``ray.env`` and the secret half to the root-only ``ray-secrets.env``:

    {{ ray_env | rlinfra.verl.plain_env(ray_env_secret_pattern) }}
    {{ ray_env | rlinfra.verl.secret_env(ray_env_secret_pattern) }}

An empty pattern (the role's default) means the collection's rule; any other is the user's own regular
expression, searched case-sensitively in each name.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import split_env


def _split(env, pattern, name):
    if env is None:
        env = {}
    if not isinstance(env, dict):
        raise AnsibleFilterError(
            "%s expects a mapping of variable names to values, got %s" % (name, type(env).__name__)
        )
    if pattern is not None and not isinstance(pattern, str):
        raise AnsibleFilterError("%s: the secret name pattern must be text, got %r" % (name, pattern))
    try:
        return split_env(env, pattern)
    except re.error as e:
        raise AnsibleFilterError(
            "%s: the secret name pattern %r is not a regular expression (%s)" % (name, pattern, e)
        ) from e


def secret_env(env, pattern=""):
    """The entries of ``env`` whose names are secrets."""
    return _split(env, pattern, "secret_env")[1]


def plain_env(env, pattern=""):
    """The entries of ``env`` whose names are not secrets."""
    return _split(env, pattern, "plain_env")[0]


class FilterModule:
    def filters(self):
        return {"secret_env": secret_env, "plain_env": plain_env}
