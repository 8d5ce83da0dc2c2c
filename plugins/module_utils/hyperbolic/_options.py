# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the Hyperbolic client checks before it asks: the API URL (``check_api_url``; ``url_is_plain_remote_http``
for the warning about a key sent in clear), the key (``check_api_key``) and its numeric options (``check_number``).
Each refusal is one HyperbolicError line that never shows the key. A private helper of the ``hyperbolic`` package:
callers import these names from ``hyperbolic/client.py``.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import urlsplit_words
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._errors import (
    _CONTROL,
    _WS,
    HyperbolicError,
    _one_line,
    redact_url,
)

DEFAULT_API_URL = "https://api.hyperbolic.xyz"

__all__ = ["DEFAULT_API_URL", "check_api_url", "url_is_plain_remote_http", "check_api_key", "check_number"]


def check_api_url(url: object) -> str:
    """The API base URL without trailing slash, or HyperbolicError saying what is wrong with it.

    Only ``http(s)://host[:port][/path]``: anything else would either fail deep inside urllib
    with a confusing message or (``file:``, ``ftp:``) read something that is not the API.
    """
    text = "" if url is None else str(url)
    if not text.strip():
        return DEFAULT_API_URL
    shown = _one_line(redact_url(text), 120)
    fix = "set api_url (or HYPERBOLIC_API_URL) to a URL such as %s" % DEFAULT_API_URL
    # Neither a value with spaces nor one urlsplit cannot read is shown: where its user-info ends is not known
    # (https://user:<token> reads as a port), and urlsplit's own words may quote it.
    if text != text.strip() or _WS.search(text) or _CONTROL.search(text):
        raise HyperbolicError("api_url contains spaces or control characters (not shown); %s" % fix)
    try:
        parts = urlsplit(text)
        _port = parts.port  # read for its ValueError on a bad port
    except ValueError as exc:
        raise HyperbolicError("api_url is not a valid URL (%s; not shown); %s" % (urlsplit_words(exc), fix)) from exc
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise HyperbolicError("api_url %r is not an http:// or https:// URL with a host; %s" % (shown, fix))
    if parts.username is not None or parts.password is not None:
        raise HyperbolicError(
            "api_url %r must not contain user:password@; the key goes in HYPERBOLIC_API_KEY (or api_key)" % shown
        )
    if parts.query or parts.fragment:
        raise HyperbolicError("api_url %r must not have a ?query or #fragment; %s" % (shown, fix))
    return text.rstrip("/")


def url_is_plain_remote_http(url: str) -> bool:
    """True for ``http://`` to anything but loopback (the key would cross the network in clear)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return False
    host = (parts.hostname or "").lower()
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


_KEY_OK = re.compile(r"[\x21-\x7e]+")


def check_api_key(key: object) -> str:
    """The key, stripped, or HyperbolicError (whose message never contains the key)."""
    key = "" if key is None else str(key).strip()
    if not key:
        raise HyperbolicError("no API key: set HYPERBOLIC_API_KEY or the api_key option")
    if not _KEY_OK.fullmatch(key):
        # a pasted key with a newline or a space in the middle: urllib would reject the
        # header with a message that quotes it, so stop here without ever showing it
        raise HyperbolicError(
            "the API key contains spaces, control or non-ASCII characters; "
            "set HYPERBOLIC_API_KEY (or api_key) to the key alone"
        )
    return key


def check_number(
    name: str,
    value: Any,
    minimum: float = 0.0,
    maximum: float | None = None,
    integer: bool = False,
    above: bool = False,
) -> float:
    """``value`` as a finite number within bounds, or HyperbolicError naming the option."""
    try:
        if isinstance(value, bool):
            raise ValueError(value)
        number = float(value)
        if not math.isfinite(number) or (integer and number != int(number)):
            raise ValueError(value)
    except (TypeError, ValueError):
        raise HyperbolicError(
            "%s must be a%s number, got %s" % (name, "n integer" if integer else "", _one_line(repr(value), 40))
        ) from None
    if (number <= minimum if above else number < minimum) or (maximum is not None and number > maximum):

        def shown_bound(x):  # 31622400, not 3.16224e+07
            return "%d" % x if float(x).is_integer() else "%g" % x

        if maximum is not None and above:
            bounds = "more than %s and at most %s" % (shown_bound(minimum), shown_bound(maximum))
        elif maximum is not None:
            bounds = "between %s and %s" % (shown_bound(minimum), shown_bound(maximum))
        else:
            bounds = "%s %s" % ("more than" if above else "at least", shown_bound(minimum))
        raise HyperbolicError("%s must be %s, got %s" % (name, bounds, _one_line(repr(value), 40)))
    return number
