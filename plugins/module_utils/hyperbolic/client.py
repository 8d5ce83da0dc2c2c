# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one Hyperbolic API client of the collection.

Standard library plus ``ansible.module_utils.urls.open_url`` (and the collection's own ``numbers``) only.

``HyperbolicClient``: authenticated GETs with timeouts, retries with exponential backoff (429, 5xx, timeouts,
connection errors; ``Retry-After`` honoured), clear exceptions for 401/403 (``HyperbolicAuthError``) and 404
(``HyperbolicNotFound``). The API key is only ever sent in the ``Authorization`` header and is scrubbed from every
message this module produces.

Callers import every name of the client from this file; the rest lives in private helpers of the package:

* ``_errors.py``: the errors and the one-line, key-free text of their messages (``one_line``, ``redact_url``,
  ``api_message``).
* ``_options.py``: the checks of ``api_url``, the key and the numeric options (``check_api_url``, ``check_api_key``,
  ``check_number``, ``url_is_plain_remote_http``).
* ``_instances.py``: pure parsing helpers that turn the raw answers of both sources into one flat, normalised record
  per instance (``extract_items``, ``normalize_instances``, ``expand_nodes``, ``status_is_wanted``).
* ``_ssh.py``: the SSH details of a record, taken from ``providerData.sshNetworking`` or from an ``sshCommand`` line
  (``parse_ssh_command``, ``valid_ssh_host``, ``valid_ssh_user``, ``no_machine``).
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.error import HTTPError, URLError

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._errors import (
    HyperbolicAuthError,
    HyperbolicError,
    HyperbolicNotFound,
    HyperbolicResponseError,
    HyperbolicUnavailable,
    _one_line,
    api_message,
    one_line,
    redact_url,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._instances import (
    expand_nodes,
    extract_items,
    normalize_instances,
    normalize_marketplace,
    normalize_on_demand,
    null_list_note,
    rented_name,
    status_is_wanted,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._options import (
    DEFAULT_API_URL,
    check_api_key,
    check_api_url,
    check_number,
    url_is_plain_remote_http,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._ssh import (
    DEFAULT_SSH_PORT,
    DEFAULT_SSH_USER,
    LOOPBACK,
    NO_MACHINE,
    SSH_COMMAND_FORM,
    no_machine,
    parse_ssh_command,
    parse_ssh_command_strict,
    valid_ssh_host,
    valid_ssh_user,
)


def open_url(*args: Any, **kwargs: Any) -> Any:
    """``ansible.module_utils.urls.open_url``, imported on the first request: every ``ansible-playbook`` run loads the
    inventory plugins (which import this file) when they are enabled, and would pay for it (~30 ms) without a request
    to make. The idle guard runs this client on a node without Ansible, with its own opener."""
    from ansible.module_utils.urls import open_url as ansible_open_url

    return ansible_open_url(*args, **kwargs)


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
    "DEFAULT_SSH_PORT",
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
    "rented_name",
    "extract_items",
    "null_list_note",
    "status_is_wanted",
    "check_api_url",
    "check_api_key",
    "api_message",
    "redact_url",
    "valid_ssh_host",
    "valid_ssh_user",
    "no_machine",
    "NO_MACHINE",
    "LOOPBACK",
    "SSH_COMMAND_FORM",
    "expand_nodes",
    "check_number",
    "one_line",
    "url_is_plain_remote_http",
]


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
