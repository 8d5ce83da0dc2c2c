# -*- coding: utf-8 -*-
# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one Hyperbolic API client of the collection.

Standard library plus ``ansible.module_utils.urls.open_url`` only. Two halves:

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
import json
import random
import re
import shlex
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from urllib.error import HTTPError, URLError

from ansible.module_utils.urls import open_url

DEFAULT_API_URL = "https://api.hyperbolic.xyz"
DEFAULT_SSH_USER = "ubuntu"
DEFAULT_SSH_PORT = 22
UP_STATUSES = ("running", "online")

# source name -> (path, human description)
SOURCES = {
    "on_demand": "/v2/on-demand/virtual-machine-rentals",
    "marketplace": "/v1/marketplace/instances",
}

USER_AGENT = "rlinfra.verl-hyperbolic/0.1"

__all__ = [
    "DEFAULT_API_URL", "DEFAULT_SSH_USER", "SOURCES", "UP_STATUSES",
    "HyperbolicError", "HyperbolicAuthError", "HyperbolicNotFound", "HyperbolicUnavailable",
    "HyperbolicResponseError", "HyperbolicClient",
    "parse_ssh_command", "normalize_on_demand", "normalize_marketplace", "normalize_instances",
    "status_is_wanted",
]


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------
class HyperbolicError(Exception):
    """Base error; ``str(err)`` is one line, safe to show (never holds the API key)."""

    def __init__(self, message, status=None, url=None, api_message=None):
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


def _one_line(text, limit=300):
    text = _WS.sub(" ", str(text)).strip()
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def api_message(body):
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
    except ValueError:
        return _one_line(body)
    if isinstance(data, dict):
        for key in ("detail", "message", "error", "msg", "error_message"):
            value = data.get(key)
            if value:
                if isinstance(value, (dict, list)):
                    # FastAPI validation errors and nested {"error": {"message": ...}}
                    if isinstance(value, dict) and value.get("message"):
                        return _one_line(value["message"])
                    return _one_line(json.dumps(value, sort_keys=True))
                return _one_line(value)
    return _one_line(body)


def _retry_after_seconds(value, now=None):
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


def _is_timeout(exc):
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

    def __init__(self, api_key, api_url=DEFAULT_API_URL, timeout=30.0, retries=4,
                 retry_backoff=1.0, retry_max_wait=60.0, validate_certs=True,
                 http_agent=USER_AGENT, sleep=time.sleep, opener=open_url):
        if not api_key:
            raise HyperbolicError("no Hyperbolic API key given (set api_key or HYPERBOLIC_API_KEY)")
        self._api_key = str(api_key)
        self.api_url = str(api_url or DEFAULT_API_URL).rstrip("/")
        self.timeout = float(timeout)
        self.retries = max(0, int(retries))
        self.retry_backoff = max(0.0, float(retry_backoff))
        self.retry_max_wait = max(0.0, float(retry_max_wait))
        self.validate_certs = bool(validate_certs)
        self.http_agent = http_agent
        self._sleep = sleep
        self._open = opener
        self.requests_made = 0
        self._count_lock = threading.Lock()

    def __repr__(self):  # never show the key
        return "HyperbolicClient(api_url=%r)" % self.api_url

    # ---------------------------------------------------------------- helpers
    def scrub(self, text):
        """Remove the API key from any text (defence in depth for error messages)."""
        text = str(text)
        if self._api_key and self._api_key in text:
            text = text.replace(self._api_key, "<redacted>")
        return text

    def _backoff(self, attempt):
        base = self.retry_backoff * (2 ** attempt)
        # "equal jitter": between half and the full exponential step
        return min(self.retry_max_wait, base / 2.0 + random.uniform(0, base / 2.0))

    # ---------------------------------------------------------------- requests
    def get_json(self, path):
        """GET ``path`` and return the decoded JSON, retrying transient failures."""
        url = self.api_url + path
        headers = {
            "Authorization": "Bearer " + self._api_key,
            "Accept": "application/json",
        }
        attempt = 0
        while True:
            retry_after = None
            try:
                with self._count_lock:
                    self.requests_made += 1
                resp = self._open(
                    url, method="GET", headers=headers, timeout=self.timeout,
                    validate_certs=self.validate_certs, http_agent=self.http_agent,
                    follow_redirects="safe", use_netrc=False,
                    unredirected_headers=["Authorization"],
                )
                try:
                    body = resp.read()
                finally:
                    close = getattr(resp, "close", None)
                    if close:
                        close()
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
                        "Hyperbolic API rejected the API key: HTTP %d %s on GET %s: %s" % (
                            status, "Unauthorized" if status == 401 else "Forbidden", path,
                            msg or "(no message)"),
                        status=status, url=url, api_message=msg)
                if status == 404:
                    raise HyperbolicNotFound(
                        "HTTP 404 on GET %s: %s" % (path, msg or "Not Found"),
                        status=status, url=url, api_message=msg)
                if status == 429 or 500 <= status <= 599:
                    retry_after = _retry_after_seconds(exc.headers.get("Retry-After") if exc.headers else None)
                    last = "HTTP %d%s" % (status, (": " + msg) if msg else "")
                    last_status = status
                else:
                    raise HyperbolicError(
                        "Hyperbolic API answered HTTP %d on GET %s: %s" % (status, path, msg or "(no message)"),
                        status=status, url=url, api_message=msg)
            except HyperbolicError:
                raise
            except Exception as exc:  # pylint: disable=broad-except
                # timeouts, refused connections, resets, truncated answers
                reason = getattr(exc, "reason", None)
                if isinstance(exc, ssl.SSLCertVerificationError) or isinstance(reason, ssl.SSLCertVerificationError):
                    # a certificate problem does not go away by retrying
                    raise HyperbolicError(
                        "Hyperbolic API GET %s: TLS certificate verification failed: %s" % (
                            url, _one_line(self.scrub(reason or exc))), url=url)
                if _is_timeout(exc):
                    last = "no answer within %gs (timed out)" % self.timeout
                elif isinstance(exc, (URLError, http.client.HTTPException, OSError)):
                    reason = getattr(exc, "reason", None) or exc
                    last = "connection error: %s" % _one_line(self.scrub(reason))
                else:
                    raise
                last_status = None
            if attempt >= self.retries:
                raise HyperbolicUnavailable(
                    "Hyperbolic API GET %s failed after %d attempt%s: %s" % (
                        url, attempt + 1, "" if attempt == 0 else "s", last),
                    status=last_status, url=url)
            wait = self._backoff(attempt)
            if retry_after is not None:
                wait = min(self.retry_max_wait, max(wait, retry_after))
            self._sleep(wait)
            attempt += 1

    def _decode(self, url, body):
        try:
            if isinstance(body, bytes):
                body = body.decode("utf-8")
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HyperbolicResponseError(
                "Hyperbolic API answered GET %s with something that is not JSON (%s)" % (url, _one_line(exc, 120)),
                url=url)

    def list_source(self, source):
        """Raw instance list of one source (a list of dicts). Raises HyperbolicNotFound on 404."""
        if source not in SOURCES:
            raise HyperbolicError("unknown Hyperbolic source %r (known: %s)" % (source, ", ".join(SOURCES)))
        path = SOURCES[source]
        data = self.get_json(path)
        return extract_items(source, data, self.api_url + path)

    def fetch(self, sources):
        """Fetch every requested source (concurrently: they are independent APIs).

        Returns ``{"api_url": ..., "sources": {name: [raw items]}, "skipped": {name: message}}``
        where ``skipped`` lists sources that answered 404. Any other failure raises (the first
        failing source in the given order), so a caller never sees a half-fetched answer.
        """
        sources = list(dict.fromkeys(sources))

        def one(source):
            try:
                return self.list_source(source), None
            except HyperbolicNotFound as exc:
                return None, str(exc)

        if len(sources) > 1:
            with ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="hyperbolic") as pool:
                futures = [pool.submit(one, source) for source in sources]
            outcomes = []
            for future in futures:  # in source order: the first failure wins, deterministically
                outcomes.append(future.result())
        else:
            outcomes = [one(source) for source in sources]
        result = {"api_url": self.api_url, "sources": {}, "skipped": {}}
        for source, (items, skipped) in zip(sources, outcomes):
            if skipped is None:
                result["sources"][source] = items
            else:
                result["skipped"][source] = skipped
        return result


def extract_items(source, data, where="answer"):
    """Validate the top-level shape of a source's answer and return its list of items."""
    if source == "marketplace":
        if isinstance(data, dict):
            items = data.get("instances")
            if items is None:
                items = []
        elif isinstance(data, list):  # tolerate a bare list
            items = data
        else:
            items = None
    else:
        if isinstance(data, dict):  # tolerate an envelope such as {"rentals": [...]} / {"data": [...]}
            items = None
            for key in ("rentals", "instances", "data", "items"):
                if isinstance(data.get(key), list):
                    items = data[key]
                    break
        else:
            items = data
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise HyperbolicResponseError(
            "unexpected %s answer from %s: expected %s" % (
                source, where,
                'a JSON object {"instances": [...]}' if source == "marketplace" else "a JSON array of rentals"))
    return items


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------
# ssh(1) options that take an argument (man ssh, OpenSSH 9)
_SSH_ARG_OPTS = set("BbcDEeFIiJLlmOoPpQRSWw")


def _port(value):
    try:
        port = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def parse_ssh_command(command, default_user=DEFAULT_SSH_USER):
    """Parse an ``ssh`` command line into ``{"host", "port", "user"}`` (or None).

    Accepts the options in any order (``ssh -p 2222 ubuntu@h``, ``ssh ubuntu@h -p 2222``),
    ``-pPORT``, ``-l USER``, ``-o Port=...``/``-o User=...``, ``ssh://user@host:port``,
    bracketed IPv6 and a trailing remote command.
    """
    if not command or not isinstance(command, str):
        return None
    if "'" in command or '"' in command or "\\" in command:
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = command.split()
    else:  # the usual case; str.split is much cheaper than shlex
        argv = command.split()
    if argv and argv[0].rsplit("/", 1)[-1] in ("ssh", "ssh.exe"):
        argv = argv[1:]
    host = user = port = None
    opt_user = opt_port = None
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            i += 1
            if i < len(argv) and host is None:
                host = argv[i]
            break
        if tok.startswith("-") and len(tok) > 1:
            flag = tok[1]
            if flag in _SSH_ARG_OPTS:
                if len(tok) > 2:
                    val = tok[2:]
                else:
                    i += 1
                    val = argv[i] if i < len(argv) else None
                if val is not None:
                    if flag == "p":
                        opt_port = _port(val)
                    elif flag == "l":
                        opt_user = val
                    elif flag == "o":
                        key, dummy, oval = val.replace("=", " ", 1).partition(" ")
                        key = key.strip().lower()
                        if key == "port":
                            opt_port = opt_port or _port(oval)
                        elif key == "user":
                            opt_user = opt_user or oval.strip()
            # flags without argument (-A, -t, -4, -v, ...) are ignored
            i += 1
            continue
        if host is None:
            host = tok
            i += 1
            # anything after the destination is the remote command, except options
            # given after it (``ssh user@h -p 2222``), which ssh also accepts.
            continue
        # a second positional: remote command; stop unless more options follow
        i += 1
    if not host:
        return None
    if host.startswith("ssh://"):
        rest = host[len("ssh://"):].rstrip("/")
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
        if rest.startswith("["):
            rest_host, dummy, tail = rest[1:].partition("]")
            if tail.startswith(":"):
                port = _port(tail[1:])
        elif rest.count(":") == 1:
            rest_host, p = rest.split(":")
            port = _port(p)
        else:
            rest_host = rest
        host = rest_host
    elif "@" in host:
        user, host = host.rsplit("@", 1)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        return None
    return {
        "host": host,
        "port": opt_port or port or DEFAULT_SSH_PORT,
        "user": opt_user or user or default_user,
    }


def _ssh_from_networking(networking, default_user):
    if isinstance(networking, dict):
        networking = [networking]
    if not isinstance(networking, list):
        return None
    for entry in networking:
        if not isinstance(entry, dict):
            continue
        host = entry.get("host") or entry.get("ip") or entry.get("hostname")
        if not host:
            continue
        return {
            "host": str(host),
            "port": _port(entry.get("port")) or DEFAULT_SSH_PORT,
            "user": str(entry.get("user") or entry.get("username") or default_user),
        }
    return None


def _ssh_details(item, default_user, *containers):
    """SSH details from either shape, looking at ``item`` and nested ``containers``."""
    provider = item.get("providerData")
    if isinstance(provider, dict):
        found = _ssh_from_networking(provider.get("sshNetworking"), default_user)
        if found:
            return found
    for obj in (item,) + tuple(c for c in containers if isinstance(c, dict)):
        found = _ssh_from_networking(obj.get("sshNetworking"), default_user)
        if found:
            return found
    for obj in (item, provider) + tuple(containers):
        if isinstance(obj, dict):
            found = parse_ssh_command(obj.get("sshCommand") or obj.get("ssh_command"), default_user)
            if found:
                return found
    return None


def _int(value):
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return None


def _str(value):
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return None


def normalize_on_demand(item, default_user=DEFAULT_SSH_USER):
    """One on-demand rental -> normalised record (see ``normalize_instances``)."""
    provider = item.get("providerData") if isinstance(item.get("providerData"), dict) else {}
    gpu_type = _str(item.get("gpuType") or provider.get("gpuType"))
    region = _str(item.get("region") or provider.get("region"))
    return {
        "source": "on_demand",
        "id": _str(item.get("id")),
        "label": _str(item.get("label") or item.get("name")) or None,
        "status": _str(item.get("status")) or "",
        "gpu_type": gpu_type,
        "gpu_count": _int(item.get("gpuCount", provider.get("gpuCount"))),
        "region": region,
        "ssh": _ssh_details(item, default_user),
    }


def normalize_marketplace(item, default_user=DEFAULT_SSH_USER):
    """One marketplace instance -> normalised record (see ``normalize_instances``)."""
    inst = item.get("instance") if isinstance(item.get("instance"), dict) else {}
    hardware = inst.get("hardware") if isinstance(inst.get("hardware"), dict) else {}
    gpus = hardware.get("gpus") if isinstance(hardware.get("gpus"), list) else []
    models = [g.get("model") for g in gpus if isinstance(g, dict) and g.get("model")]
    gpu_count = _int(inst.get("gpu_count"))
    if gpu_count is None:
        gpu_count = _int(item.get("gpu_count"))
    if gpu_count is None and gpus:
        gpu_count = len(gpus)
    location = inst.get("location") if isinstance(inst.get("location"), dict) else {}
    region = _str(location.get("region") or inst.get("region") or item.get("region"))
    return {
        "source": "marketplace",
        "id": _str(item.get("id") or inst.get("id")),
        "label": _str(item.get("label") or item.get("name") or inst.get("label")) or None,
        "status": _str(inst.get("status") or item.get("status")) or "",
        "gpu_type": _str(models[0]) if models else None,
        "gpu_count": gpu_count,
        "region": region,
        "ssh": _ssh_details(item, default_user, inst),
    }


_NORMALIZERS = {"on_demand": normalize_on_demand, "marketplace": normalize_marketplace}


def normalize_instances(source, items, default_user=DEFAULT_SSH_USER):
    """Normalise the raw items of one source.

    Each record: ``source``, ``id``, ``label`` (or None), ``status`` (as the API spells it),
    ``gpu_type``, ``gpu_count``, ``region``, ``ssh`` (``{"host","port","user"}`` or None).
    Raises HyperbolicResponseError on an item without an id (nothing is half-parsed).
    """
    normalize = _NORMALIZERS[source]
    records = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise HyperbolicResponseError("%s item #%d is not a JSON object" % (source, index))
        record = normalize(item, default_user)
        if not record["id"]:
            raise HyperbolicResponseError("%s item #%d has no id" % (source, index))
        records.append(record)
    return records


def status_is_wanted(status, wanted):
    """Case-insensitive status filter.

    ``wanted`` is a collection of lower-case statuses; an empty one, or one holding ``*`` or
    ``all``, keeps every instance.
    """
    if not wanted or "*" in wanted or "all" in wanted:
        return True
    return (status or "").strip().lower() in wanted
