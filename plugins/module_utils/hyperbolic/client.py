# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one Hyperbolic API client of the collection.

Standard library plus ``ansible.module_utils.urls.open_url`` (and the collection's own ``numbers``) only.
Two halves:

* ``HyperbolicClient``: authenticated GETs with timeouts, retries with exponential
  backoff (429, 5xx, timeouts, connection errors; ``Retry-After`` honoured), clear
  exceptions for 401/403 (``HyperbolicAuthError``) and 404 (``HyperbolicNotFound``).
  The API key is only ever sent in the ``Authorization`` header and is scrubbed
  from every message this module produces.
* Pure parsing helpers that turn the raw answers of both sources into one flat,
  normalised record per instance (``normalize_instances``), including the SSH
  details taken from ``providerData.sshNetworking`` or from an ``sshCommand`` line.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import math
import random
import re
import shlex
import socket
import ssl
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import loose_count, whole_number
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary import urlsplit_words


def open_url(*args: Any, **kwargs: Any) -> Any:
    """``ansible.module_utils.urls.open_url``, imported on the first request: every ``ansible-playbook`` run loads the
    inventory plugins (which import this file) when they are enabled, and would pay for it (~30 ms) without a request
    to make. The idle guard runs this client on a node without Ansible, with its own opener."""
    from ansible.module_utils.urls import open_url as ansible_open_url

    return ansible_open_url(*args, **kwargs)


DEFAULT_API_URL = "https://api.hyperbolic.xyz"
DEFAULT_SSH_USER = "ubuntu"
DEFAULT_SSH_PORT = 22
UP_STATUSES = ("running", "online")

# source name -> (path, human description)
SOURCES = {
    "on_demand": "/v2/on-demand/virtual-machine-rentals",
    "marketplace": "/v1/marketplace/instances",
}

MAX_RESPONSE_MIB = 16
USER_AGENT = "rlinfra.verl-hyperbolic/0.1"

__all__ = [
    "DEFAULT_API_URL",
    "DEFAULT_SSH_USER",
    "SOURCES",
    "UP_STATUSES",
    "HyperbolicError",
    "HyperbolicAuthError",
    "HyperbolicNotFound",
    "HyperbolicUnavailable",
    "HyperbolicResponseError",
    "HyperbolicClient",
    "parse_ssh_command",
    "parse_ssh_command_strict",
    "normalize_on_demand",
    "normalize_marketplace",
    "normalize_instances",
    "status_is_wanted",
    "check_api_url",
    "check_api_key",
    "redact_url",
    "valid_ssh_host",
    "valid_ssh_user",
    "expand_nodes",
    "check_number",
    "one_line",
    "url_is_plain_remote_http",
]


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
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


def _retry_after_seconds(value: Any, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = str(value).strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


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


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return True
    reason = getattr(exc, "reason", None)
    return isinstance(reason, (socket.timeout, TimeoutError))


# --------------------------------------------------------------------------------------
# Client
# --------------------------------------------------------------------------------------
class HyperbolicClient:
    """Minimal, read-only Hyperbolic API client.

    ``sleep`` and ``opener`` are injectable for tests.
    """

    def __init__(
        self,
        api_key: str | None,
        api_url: str | None = DEFAULT_API_URL,
        timeout: float = 30.0,
        retries: int = 4,
        retry_backoff: float = 1.0,
        retry_max_wait: float = 60.0,
        validate_certs: bool = True,
        http_agent: str = USER_AGENT,
        sleep: Callable[[float], None] = time.sleep,
        opener: Callable[..., Any] = open_url,
        max_response_mib: float = MAX_RESPONSE_MIB,
    ):
        self._api_key = check_api_key(api_key)
        # An answer is read whole and decoded in memory: bounded, so a broken or hostile API cannot take the
        # controller's memory (a 76 MB answer took 1.4 GB and 65 s before).
        self.max_response_mib = check_number("max_response_mib", max_response_mib, above=True, maximum=1024)
        self.max_response_bytes = int(self.max_response_mib * 1024 * 1024)
        self.api_url = check_api_url(api_url)
        self.timeout = check_number("timeout", timeout, above=True)
        self.retries = int(check_number("retries", retries, maximum=100, integer=True))
        self.retry_backoff = check_number("retry_backoff", retry_backoff)
        self.retry_max_wait = check_number("retry_max_wait", retry_max_wait)
        self.validate_certs = bool(validate_certs)
        self.http_agent = http_agent
        self._sleep = sleep
        self._open = opener
        self.requests_made = 0
        self._count_lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        return "HyperbolicClient(api_url=%r)" % self.api_url

    # ---------------------------------------------------------------- helpers
    def scrub(self, text: object) -> str:
        """Remove the API key from any text (defence in depth for error messages)."""
        return mask_values(str(text), [self._api_key])

    def _backoff(self, attempt: int) -> float:
        base = self.retry_backoff * (2**attempt)
        # "equal jitter": between half and the full exponential step
        return min(self.retry_max_wait, base / 2.0 + random.uniform(0, base / 2.0))

    # ---------------------------------------------------------------- requests
    def get_json(self, path: str) -> Any:
        """GET ``path`` and return the decoded JSON, retrying transient failures."""
        return self.request_json("GET", path)

    def request_json(self, method: str, path: str, payload: Any = None, retry: bool = True) -> Any:
        """``method`` ``path`` (with ``payload`` as a JSON body) and return the decoded JSON. Transient failures
        are retried unless ``retry`` is false: a request that must not run twice (renting a machine) fails at once,
        and the caller finds out from the listing whether it took effect."""
        url = self.api_url + path
        headers = {
            "Authorization": "Bearer " + self._api_key,
            "Accept": "application/json",
        }
        data = None
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        retries = self.retries if retry else 0
        attempt = 0
        while True:
            retry_after = None
            try:
                with self._count_lock:
                    self.requests_made += 1
                resp = self._open(
                    url,
                    data=data,
                    method=method,
                    headers=headers,
                    timeout=self.timeout,
                    validate_certs=self.validate_certs,
                    http_agent=self.http_agent,
                    follow_redirects="safe",
                    use_netrc=False,
                    unredirected_headers=["Authorization"],
                )
                try:
                    body = resp.read(self.max_response_bytes + 1)
                finally:
                    close = getattr(resp, "close", None)
                    if close:
                        close()
                if len(body) > self.max_response_bytes:
                    raise HyperbolicResponseError(
                        "the answer to %s %s is over %s MiB, more than an instance list can be: not read; if the "
                        "account really holds that much, raise max_response_mib"
                        % (method, path, "%g" % self.max_response_mib)
                    )
                return self._decode(url, body)
            except HTTPError as exc:
                status = exc.code
                try:
                    body = exc.read()
                except Exception:  # pylint: disable=broad-except
                    body = b""
                msg = self.scrub(api_message(body)) or (exc.reason and str(exc.reason)) or ""
                if status in (401, 403):
                    raise HyperbolicAuthError(
                        "Hyperbolic API rejected the API key: HTTP %d %s on %s %s: %s; check "
                        "HYPERBOLIC_API_KEY (or api_key)"
                        % (
                            status,
                            "Unauthorized" if status == 401 else "Forbidden",
                            method,
                            path,
                            msg or "(no message)",
                        ),
                        status=status,
                        url=url,
                        api_message=msg,
                    ) from exc
                if status == 404:
                    raise HyperbolicNotFound(
                        "HTTP 404 on %s %s: %s" % (method, path, msg or "Not Found"),
                        status=status,
                        url=url,
                        api_message=msg,
                    ) from exc
                if status == 429 or 500 <= status <= 599:
                    retry_after = _retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
                    last = "HTTP %d%s" % (status, (": " + msg) if msg else "")
                    last_status = status
                    unreachable = False
                else:
                    raise HyperbolicError(
                        "Hyperbolic API answered HTTP %d on %s %s: %s" % (status, method, path, msg or "(no message)"),
                        status=status,
                        url=url,
                        api_message=msg,
                    ) from exc
            except HyperbolicError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                # timeouts, refused connections, resets, truncated answers
                reason = getattr(exc, "reason", None)
                if isinstance(exc, ssl.SSLCertVerificationError) or isinstance(reason, ssl.SSLCertVerificationError):
                    # a certificate problem does not go away by retrying
                    raise HyperbolicError(
                        "Hyperbolic API %s %s: TLS certificate verification failed: %s"
                        % (method, url, _one_line(self.scrub(reason or exc))),
                        url=url,
                    ) from exc
                unreachable = False
                if _is_timeout(exc):
                    last = "no answer within %gs (timed out)" % self.timeout
                elif isinstance(exc, (URLError, http.client.HTTPException, OSError)):
                    reason = getattr(exc, "reason", None) or exc
                    last = _one_line(self.scrub(reason))
                    # no TCP connection at all, as opposed to a connection that broke mid-answer
                    unreachable = isinstance(exc, URLError) and not isinstance(exc, HTTPError)
                    if not unreachable:
                        last = "connection error: " + last
                else:
                    # anything else (a bug, or input urllib refuses) must still be one key-free line
                    raise HyperbolicError(
                        "Hyperbolic API %s %s failed: %s: %s"
                        % (method, url, type(exc).__name__, _one_line(self.scrub(exc))),
                        url=url,
                    ) from None
                last_status = None
            if attempt >= retries:
                tries = "%d attempt%s" % (attempt + 1, "" if attempt == 0 else "s")
                if unreachable:
                    raise HyperbolicUnavailable(
                        "Hyperbolic API unreachable at %s after %s: %s; check api_url (or "
                        "HYPERBOLIC_API_URL) and the network" % (url, tries, last),
                        url=url,
                    )
                raise HyperbolicUnavailable(
                    "Hyperbolic API %s %s failed after %s: %s" % (method, url, tries, last), status=last_status, url=url
                )
            wait = self._backoff(attempt)
            if retry_after is not None:
                wait = min(self.retry_max_wait, max(wait, retry_after))
            self._sleep(wait)
            attempt += 1

    def _decode(self, url, body):
        raw = body if isinstance(body, bytes) else str(body or "").encode("utf-8", "replace")
        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            # RecursionError: arrays nested thousands deep, which no instance list is
            exc = "nested too deeply" if isinstance(exc, RecursionError) else exc
            start = raw[:60].decode("utf-8", "replace")
            raise HyperbolicResponseError(
                "malformed JSON from %s: %s (the answer starts with %s); is api_url the Hyperbolic API?"
                % (url, _one_line(exc, 100), _one_line(repr(self.scrub(start)), 80) if raw.strip() else "nothing"),
                url=url,
            ) from None

    def list_source(self, source: str) -> list[dict[str, Any]]:
        """Raw instance list of one source (a list of dicts). Raises HyperbolicNotFound on 404."""
        if source not in SOURCES:
            raise HyperbolicError("unknown Hyperbolic source %r (known: %s)" % (source, ", ".join(SOURCES)))
        path = SOURCES[source]
        data = self.get_json(path)
        return extract_items(source, data, self.api_url + path)

    def fetch(self, sources: Iterable[str]) -> dict[str, Any]:
        """Fetch every requested source (concurrently: they are independent APIs).

        Returns ``{"api_url": ..., "sources": {name: [raw items]}, "skipped": {name: message}}``
        where ``skipped`` lists sources that answered 404. Any other failure raises (the first
        failing source in the given order), so a caller never sees a half-fetched answer.
        """
        sources = list(dict.fromkeys(sources))

        notes = {}

        def one(source):
            if source not in SOURCES:
                raise HyperbolicError("unknown Hyperbolic source %r (known: %s)" % (source, ", ".join(SOURCES)))
            where = self.api_url + SOURCES[source]
            try:
                data = self.get_json(SOURCES[source])
            except HyperbolicNotFound as exc:
                return None, str(exc)
            items = extract_items(source, data, where)
            note = null_list_note(source, data, where)
            if note:
                notes[source] = note
            return items, None

        if len(sources) > 1:
            with ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="hyperbolic") as pool:
                futures = [pool.submit(one, source) for source in sources]
            outcomes = []
            for future in futures:  # in source order: the first failure wins, deterministically
                outcomes.append(future.result())
        else:
            outcomes = [one(source) for source in sources]
        result: dict[str, Any] = {"api_url": self.api_url, "sources": {}, "skipped": {}, "notes": notes}
        for source, (items, skipped) in zip(sources, outcomes):
            if skipped is None:
                result["sources"][source] = items
            else:
                result["skipped"][source] = skipped
        return result


def null_list_note(source: str, data: Any, where: str) -> str | None:
    """One warning when the instance list in an answer is null rather than a list: read as an account without
    instances, but said, since it is just as likely an API fault."""
    if (
        isinstance(data, dict)
        and any(k in data and data[k] is None for k in ("instances", "rentals", "data", "items"))
        and not any(isinstance(data.get(k), list) for k in ("instances", "rentals", "data", "items"))
    ):
        key = next(k for k in ("instances", "rentals", "data", "items") if k in data and data[k] is None)
        return "%s answer from %s holds %s: null, read as no instances" % (source, where, key)
    return None


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


def extract_items(source: str, data: Any, where: str = "answer") -> list[dict[str, Any]]:
    """Validate the top-level shape of a source's answer and return its list of items."""
    if source == "marketplace":
        expected = 'a JSON object {"instances": [...]}'
        if isinstance(data, dict):
            # {"instances": null} is an account without instances; an object without the key at
            # all (an error envelope answered with 200) is not
            items = data.get("instances", False)
            if items is None:
                items = []
        elif isinstance(data, list):  # tolerate a bare list
            items = data
        else:
            items = None
    else:
        expected = "a JSON array of rentals"
        if isinstance(data, dict):  # tolerate an envelope such as {"rentals": [...]} / {"data": [...]}
            items = None
            for key in ("rentals", "instances", "data", "items"):
                if isinstance(data.get(key), list):
                    items = data[key]
                    break
        else:
            items = data
    if not isinstance(items, list):
        raise HyperbolicResponseError(
            "unexpected %s answer from %s: expected %s, got %s" % (source, where, expected, _describe(data))
        )
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise HyperbolicResponseError(
                "unexpected %s answer from %s: item #%d is %s, not a JSON object"
                % (source, where, index, _json_type(item))
            )
    return items


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------
# ssh(1) options that take an argument (man ssh, OpenSSH 9)
_SSH_ARG_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")
# options that reach the host through another one: the destination alone would not be reachable
# (or would be another machine), so such a command is not turned into a host
_SSH_INDIRECT_OPTS = {"proxycommand", "proxyjump"}
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME = re.compile(r"(?:%s\.)*%s\.?" % (_LABEL, _LABEL))
_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)")
_USER_OK = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
SSH_COMMAND_FORM = "ssh USER@HOST [-p PORT]"


def _port(value: Any) -> int | None:
    """A TCP port from an int or a string of digits; None when absent, ValueError when invalid."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError("port %s is not a number" % _one_line(repr(value), 40))
    port = whole_number(int(value) if isinstance(value, float) and value.is_integer() else value)
    if port is None:
        raise ValueError("port %s is not a number" % _one_line(repr(value), 40))
    if not 0 < port < 65536:
        raise ValueError("port %d is out of range 1-65535" % port)
    return port


def _is_ip(host: str) -> bool:
    if _IPV4.fullmatch(host):
        return True
    if ":" not in host:
        return False
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def valid_ssh_host(host: object) -> bool:
    """True for an IP address or a DNS-style host name (never an option such as ``-oX=y``)."""
    if not isinstance(host, str) or not host or len(host) > 253:
        return False
    if _is_ip(host):
        return True
    # "999.1.2.3" is neither an address nor a name
    return bool(_HOST_NAME.fullmatch(host)) and not host.rstrip(".").rsplit(".", 1)[-1].isdigit()


NO_MACHINE = "is no machine's address (0.0.0.0, ::, multicast and broadcast name none; SSH to 0.0.0.0 reaches this one)"
LOOPBACK = (
    "is this machine's own loopback: SSH there reaches the controller, not the rented machine; check the "
    "rental's address in Hyperbolic's console"
)


def no_machine(host: str) -> str:
    """What is wrong with an SSH host the API gave as a rented machine's (vocabulary.unreachable, loopback refused):
    NO_MACHINE for ``0.0.0.0``, ``::``, multicast, broadcast or a scoped address, LOOPBACK for this machine's own
    loopback (``127.0.0.1``, ``::1``, ``localhost``); '' for an address or name of a machine."""
    if not vocabulary.unreachable(host, loopback=False):
        return ""
    # Refused even where loopback is good (ray_private_ip): no machine at all; else only as the controller's own.
    return NO_MACHINE if vocabulary.unreachable(host) else LOOPBACK


def valid_ssh_user(user: object) -> bool:
    """True for a POSIX-style login name."""
    return isinstance(user, str) and bool(_USER_OK.fullmatch(user))


def _is_name_like(host: str) -> bool:
    """An IP address or a dotted name: something an API gives as an address, unlike a lone word."""
    return _is_ip(host) or "." in host.strip(".")


def parse_ssh_command_strict(command: object, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """Parse an ``ssh`` command line into ``{"host", "port", "user"}``; ValueError says why not.

    The command must start with ``ssh`` and name exactly one destination, ``USER@HOST`` (the
    user may also come from ``-l USER`` or ``-o User=``; without any, HOST must be an IP address
    or a dotted name and ``default_user`` applies). The port comes from ``-p PORT``/``-pPORT``
    or ``-o Port=`` before or after the destination, else 22; ``ssh://user@host:port`` works too.
    Other ssh options are ignored, except jump hosts and proxy commands, and anything after the
    destination that is not an option (a remote command, or prose) makes the command invalid.
    """
    if not isinstance(command, str) or not command.strip():
        raise ValueError("no sshCommand")
    shown = _one_line(repr(command), 80)
    if "'" in command or '"' in command or "\\" in command:
        try:
            argv = shlex.split(command)
        except ValueError:
            raise ValueError("sshCommand %s has unbalanced quotes" % shown) from None
    else:  # the usual case; str.split is much cheaper than shlex
        argv = command.split()
    if not argv or argv[0].rsplit("/", 1)[-1] not in ("ssh", "ssh.exe"):
        raise ValueError("sshCommand %s is not of the form '%s'" % (shown, SSH_COMMAND_FORM))
    argv = argv[1:]

    def port_of(value):
        try:
            return _port(value)
        except ValueError as exc:
            raise ValueError("sshCommand %s: %s" % (shown, exc)) from None

    destinations = []
    opt_user = opt_port = None
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            destinations.extend(argv[i + 1 :])
            break
        if tok.startswith("-") and len(tok) > 1:
            flag = tok[1]
            if flag in _SSH_ARG_OPTS:
                if len(tok) > 2:
                    val = tok[2:]
                else:
                    i += 1
                    if i >= len(argv):
                        raise ValueError("sshCommand %s ends in %s without its value" % (shown, tok))
                    val = argv[i]
                if flag == "p":
                    opt_port = port_of(val)
                    if opt_port is None:
                        raise ValueError("sshCommand %s has an empty -p" % shown)
                elif flag == "l":
                    opt_user = val
                elif flag == "J":
                    raise ValueError(
                        "sshCommand %s goes through a jump host (-J), which the inventory cannot express" % shown
                    )
                elif flag == "o":
                    key, dummy, oval = val.replace("=", " ", 1).partition(" ")
                    key = key.strip().lower()
                    if key == "port":
                        opt_port = opt_port or port_of(oval)
                    elif key == "user":
                        opt_user = opt_user or oval.strip()
                    elif key in _SSH_INDIRECT_OPTS:
                        raise ValueError(
                            "sshCommand %s goes through -o %s, which the inventory cannot express" % (shown, key)
                        )
            # flags without argument (-A, -t, -4, -v, ...) are ignored
            i += 1
            continue
        destinations.append(tok)
        i += 1
    if not destinations:
        raise ValueError("sshCommand %s names no USER@HOST" % shown)
    if len(destinations) > 1:
        raise ValueError(
            "sshCommand %s has words after the destination %s; expected '%s'"
            % (shown, _one_line(repr(destinations[0]), 60), SSH_COMMAND_FORM)
        )
    host = destinations[0]
    user = port = None
    if host.startswith("ssh://"):
        rest = host[len("ssh://") :].rstrip("/")
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
        if rest.startswith("["):
            rest, dummy, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = port_of(tail[1:])
            elif tail:
                raise ValueError("sshCommand %s has a malformed ssh:// address" % shown)
        elif rest.count(":") == 1:
            rest, p = rest.split(":")
            port = port_of(p)
        host = rest
    elif "@" in host:
        user, host = host.rsplit("@", 1)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    user = opt_user or user
    if not valid_ssh_host(host):
        raise ValueError("sshCommand %s: %s is not a host name or IP address" % (shown, _one_line(repr(host), 60)))
    refused = no_machine(host)
    if refused:
        raise ValueError("sshCommand %s: %s %s" % (shown, _one_line(repr(host), 60), refused))
    if user is None and not _is_name_like(host):
        raise ValueError("sshCommand %s is not of the form '%s'" % (shown, SSH_COMMAND_FORM))
    if user is not None and not valid_ssh_user(user):
        raise ValueError("sshCommand %s: %s is not a valid user name" % (shown, _one_line(repr(user), 40)))
    return {
        "host": host,
        "port": opt_port or port or DEFAULT_SSH_PORT,
        "user": user or default_user,
    }


def parse_ssh_command(command: object, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any] | None:
    """``parse_ssh_command_strict`` that answers None instead of raising."""
    try:
        return parse_ssh_command_strict(command, default_user)
    except ValueError:
        return None


def _ssh_from_networking(networking, default_user):
    """SSH details from an ``sshNetworking`` value; ValueError when present but unusable."""
    if isinstance(networking, dict):
        networking = [networking]
    if not isinstance(networking, list):
        raise ValueError("sshNetworking is %s, not a list" % _json_type(networking))
    problem = None
    for entry in networking:
        if not isinstance(entry, dict):
            problem = problem or "sshNetworking has an entry that is %s" % _json_type(entry)
            continue
        host = entry.get("host") or entry.get("ip") or entry.get("hostname")
        if not host:
            continue
        try:
            if not valid_ssh_host(host):
                raise ValueError("sshNetworking host %s is not a host name or IP address" % (_one_line(repr(host), 60)))
            refused = no_machine(host)
            if refused:
                raise ValueError("sshNetworking host %s %s" % (_one_line(repr(host), 60), refused))
            port = _port(entry.get("port"))
            user = entry.get("user") or entry.get("username") or default_user
            if not valid_ssh_user(user):
                raise ValueError("sshNetworking user %s is not a valid user name" % _one_line(repr(user), 40))
        except ValueError as exc:
            problem = problem or ("sshNetworking " + str(exc) if str(exc).startswith("port") else str(exc))
            continue
        return {"host": host, "port": port or DEFAULT_SSH_PORT, "user": user}
    if problem:
        raise ValueError(problem)
    return None


def _ssh_details(item, default_user, *containers):
    """``(details, problem)`` from either shape, looking at ``item`` and nested ``containers``.

    The first usable description wins. ``problem`` says why none was usable when some were given
    (``(None, None)``: the API gave no SSH details at all, e.g. a machine still booting).
    """
    provider = item.get("providerData")
    candidates = []
    if isinstance(provider, dict):
        candidates.append(("net", provider.get("sshNetworking")))
    for obj in (item,) + tuple(c for c in containers if isinstance(c, dict)):
        candidates.append(("net", obj.get("sshNetworking")))
    for obj in (item, provider) + tuple(containers):
        if isinstance(obj, dict):
            candidates.append(("cmd", obj.get("sshCommand") or obj.get("ssh_command")))
    problem = None
    for kind, value in candidates:
        if value is None or value == "" or value == []:
            continue
        try:
            if kind == "net":
                found = _ssh_from_networking(value, default_user)
            else:
                found = parse_ssh_command_strict(value, default_user)
        except ValueError as exc:
            problem = problem or str(exc)
            continue
        if found:
            return found, None
    return None, problem


def _str(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return None


def _record(source, ident, label, status, gpu_type, gpu_count, region, ssh, cost_per_hour=None, **more):
    details, problem = ssh
    record = {
        "source": source,
        "id": ident,
        "label": label,
        "status": status,
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "region": region,
        "ssh": details,
        "cost_per_hour": cost_per_hour,
        "kind": more.get("kind") or "virtual-machine",
        "private_ip": more.get("private_ip"),
        "user_metadata": more.get("user_metadata"),
    }
    if problem:
        record["ssh_error"] = problem
    if more.get("nodes"):
        record["nodes"] = more["nodes"]
    return record


def _bare_metal_nodes(meta, default_user):
    """The nodes of an earlier-shape bare-metal rental (HyperbolicLabs' CLI ``OnDemandInstanceMeta``:
    ``node_networking`` [{public_ip, private_ip}], ``username``): one SSH address each, port 22. Entries without a
    usable public address are left out; ``[]`` when there is no such list. ValueError for a public address that names
    no machine or this one (no_machine): the rental is then left out whole, never a node short or on the controller."""
    networking = meta.get("node_networking")
    if not isinstance(networking, list):
        return []
    user = meta.get("username") if valid_ssh_user(meta.get("username") or "") else default_user
    nodes = []
    for index, entry in enumerate(networking):
        public = entry.get("public_ip") if isinstance(entry, dict) else None
        refused = no_machine(public) if isinstance(public, str) else ""
        if refused:
            raise ValueError("node_networking[%d] public_ip %s %s" % (index, _one_line(repr(public), 60), refused))
        if isinstance(public, str) and valid_ssh_host(public):
            private = entry.get("private_ip")
            nodes.append(
                {
                    "host": entry["public_ip"],
                    "port": DEFAULT_SSH_PORT,
                    "user": user,
                    "private_ip": private if isinstance(private, str) and valid_ssh_host(private) else None,
                }
            )
    return nodes


def expand_nodes(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per node: a bare-metal rental of several nodes becomes ``<label>-node<i>`` records (``node`` = i,
    the rental id unchanged, so releasing any of them releases the rental); every other record is kept as it is."""
    out = []
    for record in records:
        nodes = record.get("nodes") or []
        if len(nodes) < 2:
            out.append(record)
            continue
        base = record.get("label") or record.get("id")
        for index, node in enumerate(nodes):
            copy = dict(
                record,
                label="%s-node%d" % (base, index),
                node=index,
                private_ip=node.get("private_ip"),
                ssh={k: node[k] for k in ("host", "port", "user")},
            )
            copy.pop("ssh_error", None)
            out.append(copy)
    return out


def _cents_to_dollars(*values):
    for value in values:
        if isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and number >= 0:
            return round(number / 100.0, 4)
    return None


def normalize_on_demand(item: Any, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """One on-demand rental -> normalised record (see ``normalize_instances``), from either shape the public clients
    read (docs/INVENTORY.md): the current one (``label``, ``gpuType``, ``gpuCount``, ``providerData.sshNetworking``,
    ``currentTerm.costPerHourCents``, as claude-hyperbolic-guardrails and lisa-rtm read it) or the earlier
    ``/v2/marketplace`` one (``meta.ssh_command`` "ssh user@host -p port", ``meta.resources.gpus`` {model: {count}},
    ``meta.gpu_count``, ``meta.userMetadata``, ``costPerHour`` in cents, as SkyPilot's provisioner and HyperbolicLabs'
    CLI read it)."""
    provider = item.get("providerData") if isinstance(item.get("providerData"), dict) else {}
    meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
    resources: Any = meta.get("resources") if isinstance(meta.get("resources"), dict) else {}
    gpus = resources.get("gpus") if isinstance(resources.get("gpus"), dict) else {}
    model = next(iter(gpus), None)
    term = item.get("currentTerm") if isinstance(item.get("currentTerm"), dict) else {}
    kind = _str(meta.get("rental_type") or item.get("machineType") or provider.get("machineType")) or "virtual-machine"
    try:
        nodes, refused = (_bare_metal_nodes(meta, default_user) if kind == "bare-metal" else []), None
    except ValueError as exc:
        nodes, refused = [], str(exc)
    user_metadata = meta.get("userMetadata") if isinstance(meta.get("userMetadata"), dict) else None
    private_ip = meta.get("internal_ip") if isinstance(meta.get("internal_ip"), str) else None
    count = loose_count(item.get("gpuCount", provider.get("gpuCount")))
    if count is None:
        count = loose_count(meta.get("gpu_count"))
    if count is None and model is not None and isinstance(gpus.get(model), dict):
        count = loose_count(gpus[model].get("count"))
    return _record(
        "on_demand",
        _str(item.get("id")),
        _str(item.get("label") or item.get("name") or rented_name(meta) or meta.get("name")) or None,
        _str(item.get("status")) or ("terminated" if item.get("terminatedAt") else ""),
        _str(item.get("gpuType") or provider.get("gpuType") or model),
        count,
        _str(item.get("region") or provider.get("region")),
        (None, refused)
        if refused
        else _ssh_details(item, default_user, meta)
        if not nodes
        else ({k: nodes[0][k] for k in ("host", "port", "user")}, None),
        _cents_to_dollars(term.get("costPerHourCents"), item.get("costPerHour")),
        kind=kind,
        nodes=nodes,
        user_metadata=user_metadata,
        private_ip=private_ip
        if private_ip and valid_ssh_host(private_ip)
        else (nodes[0]["private_ip"] if nodes else None),
    )


def rented_name(item: Any) -> str | None:
    """The name this collection gave a marketplace instance it rented (``userMetadata.rlinfra.name``), else ''."""
    meta: Any = item.get("userMetadata") if isinstance(item.get("userMetadata"), dict) else {}
    ours = meta.get("rlinfra") if isinstance(meta.get("rlinfra"), dict) else {}
    return _str(ours.get("name"))


def normalize_marketplace(item: Any, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """One marketplace instance -> normalised record (see ``normalize_instances``)."""
    inst = item.get("instance") if isinstance(item.get("instance"), dict) else {}
    hardware: Any = inst.get("hardware") if isinstance(inst.get("hardware"), dict) else {}
    gpus = hardware.get("gpus") if isinstance(hardware.get("gpus"), list) else []
    models = [g.get("model") for g in gpus if isinstance(g, dict) and g.get("model")]
    gpu_count = loose_count(inst.get("gpu_count"))
    if gpu_count is None:
        gpu_count = loose_count(item.get("gpu_count"))
    if gpu_count is None and gpus:
        gpu_count = len(gpus)
    location: Any = inst.get("location") if isinstance(inst.get("location"), dict) else {}
    # No price: the instance listing's pricing is not documented in a known unit (the machines' listing, in cents per
    # GPU-hour, is where a rental's price is read: hyperbolic_rent records it when it rents).
    return _record(
        "marketplace",
        _str(item.get("id") or inst.get("id")),
        _str(item.get("label") or item.get("name") or inst.get("label") or rented_name(item)) or None,
        _str(inst.get("status") or item.get("status")) or "",
        _str(models[0]) if models else None,
        gpu_count,
        _str(location.get("region") or inst.get("region") or item.get("region")),
        _ssh_details(item, default_user, inst),
        user_metadata=item.get("userMetadata") if isinstance(item.get("userMetadata"), dict) else None,
    )


_NORMALIZERS = {"on_demand": normalize_on_demand, "marketplace": normalize_marketplace}


def normalize_instances(source: str, items: Any, default_user: str = DEFAULT_SSH_USER) -> list[dict[str, Any]]:
    """Normalise the raw items of one source.

    Each record: ``source``, ``id``, ``label`` (or None), ``status`` (as the API spells it),
    ``gpu_type``, ``gpu_count``, ``region``, ``ssh`` (``{"host","port","user"}`` or None), and
    ``ssh_error`` (why SSH details that were given are unusable) only when there is one.
    Raises HyperbolicResponseError on an answer that is not a list of objects, or an item
    without a usable id (nothing is half-parsed).
    """
    normalize = _NORMALIZERS[source]
    if not isinstance(items, list):
        raise HyperbolicResponseError("%s answer is %s, not a list of instances" % (source, _json_type(items)))
    records = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise HyperbolicResponseError("%s item #%d is %s, not a JSON object" % (source, index, _json_type(item)))
        record = normalize(item, default_user)
        if not record["id"]:
            raise HyperbolicResponseError(
                "%s item #%d has no usable id (got %s)" % (source, index, _describe(item.get("id")))
            )
        records.append(record)
    return records


def status_is_wanted(status: str | None, wanted: Collection[str]) -> bool:
    """Case-insensitive status filter.

    ``wanted`` is a collection of lower-case statuses; an empty one, or one holding ``*`` or
    ``all``, keeps every instance.
    """
    if not wanted or "*" in wanted or "all" in wanted:
        return True
    return (status or "").strip().lower() in wanted
