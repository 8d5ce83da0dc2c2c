# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filters of the secrets-file route (plugins/module_utils/verl/secrets_run.py, docs/SECURITY.md):

{{ names | rlinfra.verl.secret_values(verl_job_secrets) }}   {name: value} from there, else the environment
{{ names | rlinfra.verl.values_to_mask(verl_job_secrets) }}  those values and every value given there
{{ waited | rlinfra.verl.secrets_file_done }}                remove it: the waited run has ended
{{ code | rlinfra.verl.code_secrets(verl_job_secrets) }}     the credentials of an experiment's code, what is missing
"""

from __future__ import annotations

import os

from ansible_collections.rlinfra.verl.plugins.module_utils.verl.secrets_run import done as secrets_file_done
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.secrets_run import values


def secret_values(names, given=None):
    """Values of the secrets ``names``: from ``given`` (verl_job_secrets), else the controller's environment."""
    return values(list(names or []), dict(given or {}), os.environ)


def values_to_mask(names, given=None):
    """What to mask in logs: the secrets ``names`` as a submit finds them, plus every other value of ``given``
    (masking one value too many costs nothing)."""
    found = list(secret_values(names, given).values())
    return found + [str(v) for v in (given or {}).values() if v not in ("", None) and str(v) not in found]


def code_secrets(code, given=None):
    """The credentials of an experiment's ``code:`` section (its ``token_secret`` and ``ssh_key_secret`` name them), by
    :func:`secret_values`' rule: ``{"token", "ssh_key"}`` ('' for none), ``missing`` (the names without a value) and
    ``error`` (the line that refuses the run then, '' when none is missing)."""
    code = code or {}
    named = [n for n in (code.get("token_secret"), code.get("ssh_key_secret")) if n]
    found = secret_values(named, given)
    missing = [n for i, n in enumerate(named) if n not in found and n not in named[:i]]
    return dict(
        token=found.get(code.get("token_secret") or "", ""),
        ssh_key=found.get(code.get("ssh_key_secret") or "", ""),
        missing=missing,
        error=(
            "code: %s (named by code.token_secret / code.ssh_key_secret) has no value: set it in verl_job_secrets (e.g. "
            "from Vault) or in the controller's environment." % ", ".join(missing)
            if missing
            else ""
        ),
    )


class FilterModule:
    def filters(self):
        return {
            "secret_values": secret_values,
            "values_to_mask": values_to_mask,
            "secrets_file_done": secrets_file_done,
            "code_secrets": code_secrets,
        }
