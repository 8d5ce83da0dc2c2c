# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Quoting for the rendered entrypoint: a params value as Hydra's override grammar reads it, then each argv item for
/bin/sh (Ray runs the entrypoint with ``/bin/sh -c``). Pure functions; experiment_render.py is their caller."""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

# Characters Hydra reads as one unquoted string (a subset of its grammar's ID/UNQUOTED_CHAR/COLON
# tokens); anything else is single-quoted for Hydra.
_HYDRA_BARE = re.compile(r"^[A-Za-z0-9_/.][A-Za-z0-9_/.+@%:-]*$")
_HYDRA_DICT_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")


def hydra_quote(text: str) -> str:
    """Single-quote ``text`` for Hydra's override grammar.

    Hydra un-escapes only backslashes that precede a quote or end the string, so exactly those
    are doubled, and quotes are backslash-escaped.
    """
    text = re.sub(r"(\\+)\Z", lambda m: m.group(1) * 2, text)
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + text + "'"


def hydra_value(value: Any, nested: bool = False) -> str:
    """Render a YAML value as a Hydra override value.

    Top-level strings made only of safe characters stay bare (Hydra types them as it would on a
    command line, so ``1e-6`` is a float); other strings, and every string inside a list or dict,
    are single-quoted. Lists render as ``['console','wandb']``, dicts as ``{a:1,b:'x'}``.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        if not nested and _HYDRA_BARE.match(value):
            return value
        return hydra_quote(value)
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v, True) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join("%s:%s" % (k, hydra_value(v, True)) for k, v in value.items()) + "}"
    raise TypeError("cannot render %s as a Hydra value" % type(value).__name__)


def hydra_override(key: str, value: Any) -> str:
    if key.startswith("~") and value is None:
        return key
    return "%s=%s" % (key, hydra_value(value))


def shell_quote(text: str) -> str:
    """Quote one argv item for /bin/sh; readable where possible, always exact."""
    if text and _SHELL_SAFE.match(text):
        return text
    if "'" not in text:
        return "'" + text + "'"
    if not re.search(r'[$`"\\!]', text):  # nothing is special inside double quotes then
        return '"' + text + '"'
    return shlex.quote(text)
