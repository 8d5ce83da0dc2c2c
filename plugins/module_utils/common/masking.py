# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Masking secrets in what the collection shows: the one place that replaces a secret by ``********``.

Two kinds of masking, both here:

* known values (a token the task was given, the values of the run's secret variables): :func:`mask_values` for
  text, :func:`masked` for a whole result (dicts and lists, keys included), :func:`redact_bytes` and
  :func:`mask_partial_tail` for log bytes read from a node;
* values that look like secrets by their name or shape, known or not (``HF_TOKEN=...``, ``Authorization: Bearer``,
  a password in a URL): :func:`mask_patterns` for a line the collection repeats, ``node_logs.name_maskers`` for
  log bytes (its expressions are built from the same name rule, module_utils/common/secret_names.py).

Longest value first everywhere: a secret that contains another is never left half-masked. Standard library only:
modules on the nodes import it through the plain-script route.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import SECRET_NAME_PATTERN

MASK = "********"
MASK_BYTES = MASK.encode("ascii")

# The collection's rule for secret names, matched in free text in any case: NAME=value, NAME: value, "NAME": "value";
# and bearer tokens and passwords in URLs. Every run of name or scheme characters is bounded: these expressions read
# whole values too (an experiment's 128 KiB env value), and an unbounded run before a word that is not there costs
# the square of the length.
_SECRET = re.compile(
    r"""(?i)((?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]{0,64}(?:%s)[A-Za-z0-9_.-]{0,64}["']?\s*[=:]\s*["']?)(?!(?:bearer|basic)\s)([^\s"',;&)}\]]+)"""
    % SECRET_NAME_PATTERN
)
_BEARER = re.compile(r"(?i)(\b(?:bearer|basic)\s+)([A-Za-z0-9._~+/=-]{8,})")
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^/\s:@]*:)([^@\s/]+)(@)")
# A token given as the user of a web URL (https://<token>@github.com/org/x.git): git, pip and curl send it as the
# password. Over ssh a user alone (ssh://git@host) is a name, not a credential.
_URL_TOKEN_USER = re.compile(r"(?i)(\b(?:[a-z0-9.-]{1,31}\+)?https?://)([^/\s:@]+)(@)")
# A URL's query, whole: a signed download URL (a CDN's Signature=, X-Amz-Signature=) is a credential for its file
# whatever its parameters are called, and an error text of an HTTP client repeats the URL it failed on.
_URL_QUERY = re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^\s?#'\"]{0,2048}\?)([^\s#'\"]+)")


def _longest_first(values: Iterable[str | None]) -> list[str]:
    return sorted({v for v in values if v}, key=len, reverse=True)


def mask_values(text: str, values: Iterable[str | None], mask: str = MASK) -> str:
    """``text`` with every occurrence of each value replaced by ``mask``; empty values ignored."""
    if not text:
        return text
    for value in _longest_first(values):
        text = text.replace(value, mask)
    return text


def masked(value: Any, secrets: Iterable[Any]) -> Any:
    """``value`` (a result: str, dict, list...) with every occurrence of each secret string masked, keys included."""
    secrets = _longest_first(s for s in secrets if isinstance(s, str))

    def walk(v):
        if isinstance(v, str):
            return mask_values(v, secrets)
        if isinstance(v, dict):
            return dict((walk(k), walk(x)) for k, x in v.items())
        if isinstance(v, (list, tuple, set)):
            return [walk(x) for x in v]
        return v

    return walk(value) if secrets else value


def mask_patterns(text: Any) -> str:
    """``text`` with the values that look like secrets (by name, and by shape: :func:`mask_shapes`, a URL's query)
    replaced by ``********``."""
    text = _shapes(_SECRET.sub(lambda m: m.group(1) + MASK, str(text)))
    return _URL_QUERY.sub(lambda m: m.group(1) + MASK, text) if "://" in text else text


# A private key pasted where a public one or a name belongs (hyperbolic_ssh_public_key): its first line says so.
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
# A whole key, or what a line kept of one (the line may have been cut short).
_PRIVATE_KEY_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)", re.S
)
# Tokens whose issuers give them a fixed prefix (GitHub, Hugging Face, GitLab, OpenAI and the like, Slack, AWS): known
# by their shape wherever they are, a name field included (code.token_secret: ghp_...). Not a bare 40-hex string: a
# git commit has that shape.
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_-])(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,}|hf_[A-Za-z0-9]{30,}|"
    r"glpat-[A-Za-z0-9_-]{20,}|sk-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|AKIA[0-9A-Z]{16})"
    r"(?![A-Za-z0-9_-])"
)


# What :func:`holds_credentials` finds, for the lines that refuse such a value.
CREDENTIAL_WORDS = (
    "a password or token in a URL, a bearer token, a GitHub or Hugging Face token or the like, or a private key"
)


def holds_credentials(text: Any) -> bool:
    """Whether ``text`` carries a credential by its shape alone, whatever it is called: a password or token in a URL
    (``https://user:pw@host``, ``https://<token>@host``) or an ``Authorization`` value (``Bearer <token>``). What a
    value that goes on a command line or into a shown file must not hold; a PEM private key; a token of a known
    issuer by its prefix (``ghp_...``, ``hf_...``). A ``NAME=value`` with a secret-like name is
    left to the name rules: ``/data/keys:/opt/x`` (a PYTHONPATH) has that shape and no secret."""
    if not isinstance(text, str):
        return False
    return bool(
        _BEARER.search(text)
        or _PRIVATE_KEY.search(text)
        or _TOKEN.search(text)
        or "://" in text
        and (_URL_PASSWORD.search(text) or _URL_TOKEN_USER.search(text))
    )


def mask_shapes(text: Any) -> Any:
    """``text`` with every value that is a credential by its shape alone (:func:`holds_credentials`: a bearer token,
    a known issuer's token, a password or token in a URL, a private key) replaced by ``********``, and nothing
    else: the last guard of every line an action shows, whatever field the value came from."""
    return _shapes(text) if isinstance(text, str) and holds_credentials(text) else text


def _shapes(text: str) -> str:
    text = _BEARER.sub(lambda m: m.group(1) + MASK, text)
    text = _TOKEN.sub(MASK, _PRIVATE_KEY_BLOCK.sub(MASK, text))
    if "://" not in text:
        return text
    text = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), text)
    return _URL_TOKEN_USER.sub(lambda m: m.group(1) + MASK + m.group(3), text)


def redact_bytes(
    data: bytes, variants: Iterable[bytes], maskers: Iterable[re.Pattern[bytes]] = (), mask: bytes = MASK_BYTES
) -> tuple[bytes, int]:
    """``data`` (bytes) with every occurrence of each variant, and every group ``value`` a masker finds, masked;
    returns (bytes, count)."""
    count = 0
    for value in variants:
        n = data.count(value)
        if n:
            count += n
            data = data.replace(value, mask)
    for regex in maskers:
        hits = [0]

        # Used by regex.sub within this iteration only: the closure over this round's hits is the intent.
        def sub(m: re.Match[bytes]) -> bytes:
            if m.group("value") == mask:
                return m.group(0)
            hits[0] += 1  # noqa: B023 - see above
            start, end = m.span("value")
            return m.group(0)[: start - m.start()] + mask + m.group(0)[end - m.start() :]

        data = regex.sub(sub, data)
        count += hits[0]
    return data, count


def mask_partial_tail(data: bytes, variants: Iterable[bytes], mask: bytes = MASK_BYTES) -> tuple[bytes, int]:
    """A file read while it is written may end in the first bytes of a secret: mask such a tail."""
    if not data or data.endswith(b"\n"):
        return data, 0
    for value in variants:
        for n in range(min(len(value) - 1, len(data)), 0, -1):
            if data.endswith(value[:n]):
                return data[:-n] + mask, 1
    return data, 0
