# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Ray client's transport (module_utils/ray/client.py's :class:`RayClient` is built on it): the errors every
call raises, the dashboard address and token as a request may carry them, and one HTTP request with its retries,
its error lines and the token masked out of them.

Standard library only (module_utils/common/plain_http.py): the client runs in plain node scripts too."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url

TOKEN_HINT = "pass the cluster's token as auth_token or set RAY_AUTH_TOKEN"


class RayError(Exception):
    """Any failure talking to the Ray dashboard; ``str()`` is one line fit for ``fail_json``."""

    def __init__(self, msg: str, status: int | None = None, body: str | None = None) -> None:
        super().__init__(msg)
        self.status = status
        self.body = body

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.status is not None:
            out["http_status"] = self.status
        if self.body:
            out["http_body"] = self.body[-4000:]
        return out


class RayAuthError(RayError):
    """HTTP 401/403: the token is missing or wrong."""


class RayUnreachableError(RayError):
    """Connection refused, timed out or reset: nothing answered at the address."""


class RayHTTPError(RayError):
    """Any other HTTP error status."""


ADDRESS_EXAMPLE = "e.g. http://10.0.0.5:8265"

DASHBOARD_URL = vocabulary.Url(schemes=("http", "https"), path=False, default_scheme="http")


def normalize_address(address: object) -> str:
    """``scheme://host[:port]`` of the dashboard, or one line of :class:`RayError` (the vocabulary's URL rule: a
    path, query, fragment or credentials would silently change every request - ``http://h:8265/#/jobs`` is the
    dashboard's page, not its API - and the line never shows what could be a token)."""
    if isinstance(address, str) and not address.strip():
        raise RayError("address is empty: give the Ray dashboard URL, %s" % ADDRESS_EXAMPLE)
    try:
        url = DASHBOARD_URL.validate(address.strip() if isinstance(address, str) else address)
    except vocabulary.Bad as e:
        raise RayError(DASHBOARD_URL.line("address", address, str(e))) from e
    parts = urlsplit(url)
    host = "[%s]" % parts.hostname if ":" in parts.hostname else parts.hostname
    return "%s://%s%s" % (parts.scheme.lower(), host, ":%d" % parts.port if parts.port else "")


def check_token(token: object) -> None:
    """A token goes into an HTTP header: http.client refuses control characters there with an error
    that quotes the header, the token included. The token itself is never part of the message."""
    if token and (not isinstance(token, str) or any(not 33 <= ord(c) <= 126 for c in token)):
        raise RayError(
            "the auth token contains spaces, line breaks or other characters a token cannot have; give "
            "the token alone (the content of the cluster's token file)"
        )


def _summarize(body: str | None) -> str:
    """One line out of an error body; Ray's 500s are whole Python tracebacks."""
    lines = [ln.strip() for ln in (body or "").splitlines() if ln.strip() not in ("", ".")]
    if not lines:
        return "(empty body)"
    if lines[0].startswith("Traceback"):
        # The last "SomeError: text" line says what went wrong; nested tracebacks repeat it.
        errors = [
            ln for ln in lines if ":" in ln and ln.split(":", 1)[0].rsplit(".", 1)[-1].endswith(("Error", "Exception"))
        ]
        return (errors[-1] if errors else lines[-1])[:500]
    return " ".join(lines)[:1000]


class DashboardTransport:
    """Requests to the Ray dashboard. GETs are retried with exponential backoff on connection errors
    and 5xx; POST and DELETE are sent once because they change state."""

    fact: dict[str, Any]

    def __init__(
        self,
        address: str,
        token: str | None = None,
        validate_certs: bool = True,
        timeout: float = 30,
        retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.address = normalize_address(address)
        check_token(token)
        self._token = token or None
        self.validate_certs = validate_certs
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._sleep = sleep
        self.fact = {}  # the rlinfra_ray local fact the options were completed from (client_from_module)

    def _redact(self, text: object) -> str:
        text = text if isinstance(text, str) else str(text)
        return mask_values(text, [self._token])

    def _fail(self, cls: type[RayError], msg: str, status: int | None = None, body: str | None = None) -> RayError:
        return cls(self._redact(msg), status=status, body=self._redact(body) if body else body)

    def request(self, method: str, path: str, payload: Any = None) -> Any:
        """Send one request and return the decoded JSON (or text when the body is not JSON)."""
        url = self.address + path
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = "Bearer " + self._token
        data: bytes | str | None = None
        if isinstance(payload, bytes):
            data = payload
            headers["Content-Type"] = "application/octet-stream"
        elif payload is not None:
            data = json.dumps(payload)
            headers["Content-Type"] = "application/json"
        attempts = 1 + (self.retries if method == "GET" else 0)
        for attempt in range(attempts):
            retry = attempt + 1 < attempts
            try:
                resp = open_url(
                    url,
                    data=data,
                    headers=headers,
                    method=method,
                    timeout=self.timeout,
                    validate_certs=self.validate_certs,
                    use_netrc=False,
                    follow_redirects="none",
                )
                raw = resp.read().decode("utf-8", "replace")
                break
            except HTTPError as e:
                try:
                    body = e.read().decode("utf-8", "replace")
                except Exception:
                    body = ""
                if e.code in (401, 403):
                    what = "rejected the auth token" if self._token else "requires an auth token and none was given"
                    raise self._fail(
                        RayAuthError,
                        "Ray dashboard at %s %s (HTTP %d: %s); %s"
                        % (self.address, what, e.code, _summarize(body), TOKEN_HINT),
                        e.code,
                        body,
                    ) from e
                if e.code >= 500 and retry:
                    self._sleep(self.backoff * 2**attempt)
                    continue
                raise self._fail(
                    RayHTTPError,
                    "Ray dashboard %s %s failed: HTTP %d: %s" % (method, path, e.code, _summarize(body)),
                    e.code,
                    body,
                ) from e
            except ValueError as e:  # anything urllib refuses to send; the inputs are checked above
                raise self._fail(
                    RayError, "cannot send %s %s to the Ray dashboard at %s: %s" % (method, path, self.address, e)
                ) from e
            except (URLError, OSError, http.client.HTTPException) as e:
                reason = getattr(e, "reason", e)
                if isinstance(reason, ssl.SSLError):
                    raise self._fail(
                        RayError,
                        "TLS error talking to the Ray dashboard at %s: %s "
                        "(set validate_certs: false for a self-signed certificate)" % (self.address, reason),
                    ) from e
                if retry:
                    self._sleep(self.backoff * 2**attempt)
                    continue
                if isinstance(reason, (socket.timeout, TimeoutError)):
                    reason = "timed out after %ss" % self.timeout
                raise self._fail(
                    RayUnreachableError,
                    "Ray dashboard at %s is unreachable (%s); check the address "
                    "and that the head node's dashboard is up and reachable from here" % (self.address, reason),
                ) from e
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw
