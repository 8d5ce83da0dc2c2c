# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Hyperbolic client's errors, and the text their messages are made of.

``HyperbolicError`` and its kinds (``HyperbolicAuthError``, ``HyperbolicNotFound``, ``HyperbolicUnavailable``,
``HyperbolicResponseError``); every message is one printable line that never holds the API key or a URL's user-info:
``one_line``, ``redact_url``, ``api_message`` (the best human line of an error answer), ``_json_type`` and
``_describe`` (a JSON value in a few words). A private helper of the ``hyperbolic`` package: callers import these names
from ``hyperbolic/client.py``.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "HyperbolicError",
    "HyperbolicAuthError",
    "HyperbolicNotFound",
    "HyperbolicUnavailable",
    "HyperbolicResponseError",
    "one_line",
    "redact_url",
    "api_message",
]


class HyperbolicError(Exception):
    """Base error; ``str(err)`` is one line, safe to show (never holds the API key)."""

    def __init__(self, message: str, status: int | None = None, url: str | None = None, api_message: str | None = None):
        super().__init__(message)
        self.status = status
        self.url = url
        self.api_message = api_message


class HyperbolicAuthError(HyperbolicError):
    """HTTP 401/403: the key was rejected. Never retried."""


class HyperbolicNotFound(HyperbolicError):
    """HTTP 404: the endpoint does not exist (e.g. a retired API)."""


class HyperbolicUnavailable(HyperbolicError):
    """Timeouts, 429, 5xx or connection errors that outlived every retry."""


class HyperbolicResponseError(HyperbolicError):
    """The API answered something that is not the documented shape."""


_WS = re.compile(r"\s+")
# C0/C1 controls other than whitespace: an API message must not be able to move the cursor,
# clear the screen or fake further lines on the user's terminal.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
# Up to the last '@' of the host part: https://user@<token>@host keeps no piece of the token.
_URL_USERINFO = re.compile(r"(?<=//)[^/?#\s]*@")


def _one_line(text: object, limit: int = 300) -> str:
    text = _WS.sub(" ", _CONTROL.sub("?", str(text))).strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def one_line(text: object, limit: int = 300) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    return _one_line(text, limit)


def redact_url(url: object) -> str:
    """``url`` without any ``user:password@`` part, query or fragment (a key can hide in each), for messages."""
    text = str(url)
    base = re.split(r"[?#]", text, maxsplit=1)[0]
    return _URL_USERINFO.sub("***@", base) + ("?..." if base != text else "")


def api_message(body: bytes | str | None) -> str:
    """Best human message from an error body (JSON ``detail``/``message``/``error`` or text)."""
    if body is None:
        return ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    body = body.strip()
    if not body:
        return ""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return _one_line(body)
    if isinstance(data, dict):
        # The on-demand API's errors carry a code beside the message (hyperbolic-go's APIError: Code, Message, Issues):
        # the line keeps it, for the caller and the reader ("INSUFFICIENT_BALANCE: ...").
        code: Any = data.get("code") if isinstance(data.get("code"), str) else ""
        code = code if re.match(r"^[A-Z][A-Z0-9_]{2,63}$", code) else ""
        issues = data.get("issues") if isinstance(data.get("issues"), list) else []
        for key in ("detail", "message", "error", "msg", "error_message"):
            value = data.get(key)
            if value:
                if isinstance(value, (dict, list)):
                    # FastAPI validation errors and nested {"error": {"message": ...}}
                    if isinstance(value, dict) and value.get("message"):
                        return _one_line(value["message"])
                    return _one_line(json.dumps(value, sort_keys=True))
                text = "%s: %s" % (code, value) if code else str(value)
                if issues:
                    text += " (%s)" % "; ".join(str(i) for i in issues[:5])
                return _one_line(text)
        if code:
            return code
    return _one_line(body)


_JSON_TYPES = (
    (dict, "a JSON object"),
    (list, "a JSON array"),
    (str, "a string"),
    (bool, "a boolean"),
    (int, "a number"),
    (float, "a number"),
    (type(None), "null"),
)


def _json_type(value: object) -> str:
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _describe(value: object) -> str:
    """A short, one-line description of a JSON value for error messages."""
    if isinstance(value, dict):
        keys = sorted(str(k) for k in value)
        return (
            "a JSON object with keys %s" % _one_line(", ".join(keys[:8]) + (", ..." if len(keys) > 8 else ""), 120)
            if keys
            else "an empty JSON object"
        )
    return _json_type(value)
