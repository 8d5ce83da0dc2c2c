# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which environment variable names hold secrets: the collection's one rule.

A name is a secret when it contains, in any case, one of the words of :data:`SECRET_NAME_PATTERN`
(``HF_TOKEN``, ``WANDB_API_KEY``, ``aws_secret_access_key``, ``DB_PASSWORD``, ``GOOGLE_CREDENTIALS``,
``BASIC_AUTH``...). Everything that decides "secret or not" by name reads it from here:

* the modules that talk to Ray mask the values of such runtime_env variables in what they return
  (``ray_client.SECRET_NAME``);
* ``ray_node_logs`` masks such values wherever a log shows them (``node_logs``, which embeds the
  pattern text in its own expressions: keep it an alternation of words);
* the ray role writes such ``ray_env`` entries to the root-only ``ray-secrets.env`` and never logs
  them (the ``rlinfra.verl.secret_env`` / ``plain_env`` filters), unless the user names their own
  expression in ``ray_env_secret_pattern``.

Broad on purpose: a name taken for a secret by mistake is only hidden (its value is masked, its
line goes to the root-only file, which Ray reads all the same); a secret taken for a plain name
would be shown. Standard library only: modules on the nodes import it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

# TOKENIZER: TOKENIZERS_PARALLELISM (set in most Hugging Face setups) is no secret, and its value ("true")
# would otherwise be masked everywhere in collected logs.
SECRET_NAME_PATTERN = "TOKEN(?!IZER)|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH"
SECRET_NAME = re.compile(SECRET_NAME_PATTERN, re.IGNORECASE)


# Hydra keys are full of names with "token" and "key" that hold no secret (data.prompt_key, max_num_batched_tokens,
# ppo_max_token_len_per_gpu, tokenizer.pad_token): for experiment params the rule reads the key's last part, which must
# name the secret itself: api_key, hf_token, access_token, secret, password, credentials...
# Plurals too (api_keys: a list of them), and the header that carries one (headers.Authorization, x-api-key); never
# the bare plural "tokens" (max_new_tokens).
SECRET_PARAM = re.compile(
    r"(^|[_.-])(api[_-]?keys?|access[_-]?keys?|secret[_-]?keys?|private[_-]?keys?|"
    r"auth[_-]?tokens?|access[_-]?tokens?|(hf|wandb|github|gh|gitlab|openai|hub)[_-]?(tokens?|keys?)|"
    r"token|secrets?|passwords?|passwd|passphrase|authorization|credentials?)$",
    re.IGNORECASE,
)
SPECIAL_TOKENS = re.compile(r"(^|_)(pad|bos|eos|unk|sep|cls|mask|start|end|image|video|audio)_token$", re.IGNORECASE)
# camelCase and PascalCase words (wandbApiKey, openAIApiKey, HfToken) read as snake_case ones: wandb_Api_Key.
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def is_secret_param(key: Any) -> bool:
    """Whether the Hydra params key ``key`` (dotted) names a secret, by its last part (see :data:`SECRET_PARAM`)."""
    last = _CAMEL.sub("_", str(key).rsplit(".", 1)[-1].lstrip("+~"))
    return bool(SECRET_PARAM.search(last)) and not SPECIAL_TOKENS.search(last)


def name_rule(pattern: str | None = None) -> re.Pattern[str]:
    """The compiled rule: the collection's (:data:`SECRET_NAME`) when ``pattern`` is empty, else the
    user's own regular expression, searched case-sensitively (as the ray role always read
    ``ray_env_secret_pattern``). ``re.error`` for an expression that does not compile."""
    if not pattern:
        return SECRET_NAME
    return re.compile(pattern)


def is_secret_name(name: Any, pattern: str | None = None) -> bool:
    """Whether the variable ``name`` holds a secret (see :func:`name_rule` for ``pattern``)."""
    return name_rule(pattern).search(str(name)) is not None


# Where a secret is kept, or what it is called, is no secret: secrets_file, secrets_dir, RAY_AUTH_TOKEN_PATH,
# ray_env_secret_pattern, secret_names hold a path, a pattern or names.
_PLACE = re.compile(r"(^|[_.-])(files?|dirs?|directory|path|paths|pattern|names?)$", re.IGNORECASE)


def holds_secret_value(name: Any) -> bool:
    """Whether a field called ``name`` holds a secret's value (a secret's name that does not name a place)."""
    return is_secret_name(name) and not _PLACE.search(str(name))


def split_env(env: Mapping[str, Any] | None, pattern: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(plain, secret)``: the entries of the mapping ``env`` that are not / are secrets: by name (the rule, or the
    user's ``pattern``), or by a value that is a credential by its shape whatever its name (``MY_URL`` holding
    ``https://bob:<password>@host``), which then goes where the secrets go (the root-only file), never the shown one."""
    # masking reads this module's name rule: imported here, not at the top, to keep the two free of a cycle.
    from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import holds_credentials

    rule = name_rule(pattern)
    plain: dict[str, Any]
    secret: dict[str, Any]
    plain, secret = {}, {}
    for name, value in (env or {}).items():
        (secret if rule.search(str(name)) or holds_credentials(str(value)) else plain)[name] = value
    return plain, secret


def env_secret_values(env: Any, names: Collection[Any] = ()) -> list[str]:
    """The values, as text, of the entries of ``env`` that are secrets by the collection's rule or are
    listed in ``names``; empty values are left out. What a module adds to ``no_log_values``."""
    if not isinstance(env, dict):
        return []
    return [str(v) for k, v in env.items() if v and (SECRET_NAME.search(str(k)) or k in names)]
