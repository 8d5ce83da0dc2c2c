# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one client for the Ray dashboard: Jobs REST API and State API (nodes).

Plain HTTP on the standard library (module_utils/common/plain_http.py) so that it runs on any host with only
Python (no ``requests``, no ``import ray``, no Ansible module runtime: a plain node script uses it too). Checked against Ray 2.60.
"""

from __future__ import annotations

import datetime
import http.client
import json
import math
import os
import re
import socket
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common import secret_names, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import tidy
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url

TERMINAL_STATUSES = frozenset(("SUCCEEDED", "FAILED", "STOPPED"))
ACTIVE_STATUSES = frozenset(("PENDING", "RUNNING"))
# Ray answers a re-used submission_id with HTTP 500 and a traceback ending in this sentence.
EXISTS_MARKER = "Please use a different submission_id"
TOKEN_HINT = "pass the cluster's token as auth_token or set RAY_AUTH_TOKEN"
# Names of runtime_env env_vars whose values are secrets: masked in everything a module returns.
SECRET_NAME = secret_names.SECRET_NAME

# The options every module that talks to the dashboard takes (documented once, in the
# rlinfra.verl.ray_dashboard doc fragment). An empty address means "this host's rlinfra_ray local fact";
# the token falls back to that fact's token_path, then to RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH where the
# module runs (resolve_token; not an argument fallback, which would come before the fact).
DASHBOARD_ARGS = dict(
    address=vocabulary.Url(schemes=("http", "https"), path=False, default_scheme="http", empty=True, default=""),
    auth_token=vocabulary.Secret(),
    auth_token_path=vocabulary.AbsPath("reads"),
    validate_certs=vocabulary.Switch(default=True),
)
DASHBOARD_ARGUMENT_SPEC = vocabulary.Args(**DASHBOARD_ARGS).spec
# The local fact site.yml writes on every node (roles/ray/tasks/node.yml), JSON with role, cluster, node_ip,
# gcs_address, dashboard_url, token_path, venv and temp_dir. Read on the host that runs the module.
FACT_PATH = "/etc/ansible/facts.d/rlinfra_ray.fact"


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
# Ray routes /api/jobs/{id} on the decoded path: an id with '/' (even sent as %2F) can be created but
# never read, stopped nor deleted again, and Ray names the driver's log file after it. These ids
# round-trip everywhere; 200 leaves room for Ray's "job-driver-<id>.log" in a 255-byte file name.
SUBMISSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
# Limits of the module options (docs: the modules' DOCUMENTATION).
MIN_POLL_INTERVAL = 0.1
MAX_LOGS_TAIL_LINES = 10000
# Linux refuses any single argv or environment string of 131072 bytes (NUL included) or more, and
# Ray starts the entrypoint as one: /bin/sh -c ENTRYPOINT.
MAX_ARG_BYTES = 131071
RAY_RESOURCE_PRECISION = 0.0001  # ray._raylet.RESOURCE_UNIT_SCALING = 10000
RAY_BUILTIN_RESOURCES = {"cpu": "entrypoint_num_cpus", "gpu": "entrypoint_num_gpus", "memory": "entrypoint_memory"}


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


SUBMISSION_ID = vocabulary.SubmissionId()


def check_submission_id(submission_id: object) -> str:
    """The id itself, or one line of :class:`RayError` saying what an id may contain."""
    try:
        return SUBMISSION_ID.validate(submission_id)
    except vocabulary.Bad as e:
        raise RayError(SUBMISSION_ID.line("submission_id", submission_id, e)) from e


# Checks of module options, before any request. Each returns a list of problems, one line each
# ("OPTION: what is wrong; what to do"); the modules fail with them and contact nothing.


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_seconds(name: str, value: Any, minimum: float = 0, hint: str = "") -> list[str]:
    """A duration option: a finite number of seconds, at least ``minimum``."""
    if value is None:
        return []
    if not _finite_number(value):
        return ["%s must be a finite number of seconds, got %r" % (name, value)]
    if value < minimum:
        return [
            "%s %s, got %r%s"
            % (name, "must not be negative" if minimum == 0 else "must be at least %s" % minimum, value, hint)
        ]
    return []


def check_tail_lines(value: int | None, maximum: int | None = MAX_LOGS_TAIL_LINES) -> list[str]:
    """``maximum`` None: no upper bound (ray_job_poll is also how the whole log is read to be saved)."""
    if value is not None and value < 0:
        return ["logs_tail_lines must not be negative, got %d (0 does not read the log)" % value]
    if value is not None and maximum is not None and value > maximum:
        return ["logs_tail_lines must be at most %d, got %d (the saved log holds the whole output)" % (maximum, value)]
    return []


def _nul(text: object) -> bool:
    return isinstance(text, str) and "\0" in text


def string_values(
    name: str, mapping: Mapping[Any, Any] | None, what: str = "a string"
) -> tuple[dict[str, str], list[str]]:
    """``(mapping with str values, problems)``: numbers become their text (Ansible turns "1" into
    1), anything else (booleans, null, lists, mappings) is refused rather than guessed at."""
    out, problems = {}, []
    for key, value in (mapping or {}).items():
        if not isinstance(key, str) or not key or _nul(key):
            problems.append("%s: %r is not a valid name" % (name, key))
        elif isinstance(value, str):
            if _nul(value):
                problems.append("%s.%s: the value contains a NUL character (\\0), which Ray cannot carry" % (name, key))
            else:
                out[key] = value
        elif _finite_number(value):
            out[key] = str(value)
        else:
            problems.append("%s.%s: expected %s, got %s; quote it to pass text" % (name, key, what, _describe(value)))
    return out, problems


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean (%s)" % value
    if isinstance(value, float):
        return "a number that is not finite (%s)" % value
    kind = "a mapping" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__
    text = repr(value)
    return "%s (%s)" % (kind, text if len(text) <= 60 else text[:57] + "...")


def check_runtime_env(runtime_env: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, list[str]]:
    """``(runtime_env with env_vars as strings, problems)``. Ray creates a job whatever its env_vars
    hold and fails it when the driver starts; here they are refused before anything is sent."""
    if runtime_env is None:
        return None, []
    env = dict(runtime_env)
    problems = []
    env_vars = env.get("env_vars")
    if env_vars is not None:
        if not isinstance(env_vars, dict):
            problems.append("runtime_env.env_vars must be a mapping of NAME: value, got %s" % type(env_vars).__name__)
        else:
            values, problems = string_values("runtime_env.env_vars", env_vars)
            for key, value in values.items():
                if "=" in key:
                    problems.append(
                        "runtime_env.env_vars: %r is not a valid variable name ('=' ends a name in the "
                        "environment)" % key
                    )
                elif len(key.encode("utf-8")) + 1 + len(value.encode("utf-8", "surrogatepass")) > MAX_ARG_BYTES:
                    problems.append(
                        "runtime_env.env_vars.%s is over the %d bytes Linux allows for one environment "
                        "string; pass a file's path instead" % (key, MAX_ARG_BYTES)
                    )
            env["env_vars"] = values
    working_dir = env.get("working_dir")
    if working_dir is not None and (not isinstance(working_dir, str) or not working_dir.strip()):
        problems.append("runtime_env.working_dir must be a non-empty string (a URI or a path), got %r" % (working_dir,))
    return env, problems


def check_entrypoint(entrypoint: str | None) -> list[str]:
    if entrypoint is None:
        return []
    if not entrypoint.strip():
        return [
            "entrypoint is empty: give the shell command that starts the driver (leave entrypoint out only to "
            "look up, stop or delete an existing job)"
        ]
    if _nul(entrypoint):
        return ["entrypoint contains a NUL character (\\0), which no command line can carry"]
    size = len(entrypoint.encode("utf-8", "surrogatepass"))
    if size > MAX_ARG_BYTES:
        return [
            "entrypoint is %d bytes, over the %d Linux allows for one command line argument (Ray runs it with "
            "/bin/sh -c); move long values into a file" % (size, MAX_ARG_BYTES)
        ]
    return []


def _check_quantity(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if not _finite_number(value):
        return ["%s must be a finite number, got %r" % (name, value)]
    if value < 0:
        return ["%s must not be negative, got %r" % (name, value)]
    if 0 < value < RAY_RESOURCE_PRECISION:
        return [
            "%s: %r is below Ray's resource precision; use 0 or at least %s" % (name, value, RAY_RESOURCE_PRECISION)
        ]
    return []


def check_resources(
    num_cpus: float | None = None,
    num_gpus: float | None = None,
    memory: float | None = None,
    custom: Mapping[Any, Any] | None = None,
) -> list[str]:
    """The entrypoint's resources, as Ray would refuse them only after creating the job."""
    problems = _check_quantity("entrypoint_num_cpus", num_cpus) + _check_quantity("entrypoint_num_gpus", num_gpus)
    problems += _check_quantity("entrypoint_memory", memory)
    for key, value in (custom or {}).items():
        if not isinstance(key, str) or not key.strip():
            problems.append("entrypoint_resources: %r is not a resource name" % (key,))
        elif key.lower() in RAY_BUILTIN_RESOURCES:
            problems.append(
                "entrypoint_resources.%s: Ray takes CPUs, GPUs and memory through their own options, not "
                "as custom resources; use %s" % (key, RAY_BUILTIN_RESOURCES[key.lower()])
            )
        else:
            problems += _check_quantity("entrypoint_resources.%s" % key, value)
    return problems


def resolve_token(explicit: str | None = None, path: str | None = None) -> str | None:
    """Token from the argument, else the file ``path`` (read where the module runs: the token never travels),
    else RAY_AUTH_TOKEN, else the file named by RAY_AUTH_TOKEN_PATH."""
    if explicit:
        return explicit.strip()
    if path:
        try:
            with open(path) as f:
                return f.read().strip() or None
        except OSError as e:
            raise RayError(
                "cannot read the Ray token file %s: %s (site.yml writes it on every node; is this a "
                "node of the cluster, and does the play run with become?)" % (path, e.strerror)
            ) from e
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path and os.path.isfile(path):
        with open(path) as f:
            return f.read().strip() or None
    return None


def local_ray_fact(path: str | None = None) -> dict[str, Any]:
    """This host's rlinfra_ray local fact as a dict; {} when the host has none (not a node of a cluster set up
    by site.yml). A file that is there but cannot be read, or is not a JSON object (half-written, damaged), is
    one line of :class:`RayError` naming the file. ``path`` defaults to :data:`FACT_PATH`."""
    path = path or FACT_PATH
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise RayError(
            "cannot read the rlinfra_ray local fact %s: %s (does the play run with become?)" % (path, e.strerror or e)
        ) from e
    try:
        fact = json.loads(raw.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError is one too
        raise RayError(
            "the rlinfra_ray local fact %s is not valid JSON (%s): it is half-written or damaged; run "
            "site.yml again to rewrite it" % (path, " ".join(str(e).split())[:200])
        ) from e
    if not isinstance(fact, dict):
        raise RayError(
            "the rlinfra_ray local fact %s is not a JSON object but %s: it is damaged; run site.yml again "
            "to rewrite it" % (path, type(fact).__name__)
        )
    return fact


def fact_text(fact: Mapping[str, Any], key: str, path: str | None = None) -> str:
    """``fact[key]`` stripped, '' when missing or empty; a value that is not a string is one line of RayError."""
    value = fact.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise RayError(
            "the rlinfra_ray local fact %s is damaged: %s is %s, not a string; run site.yml again to "
            "rewrite it" % (path or FACT_PATH, key, _describe(value))
        )
    return value.strip()


def fact_container(fact: Mapping[str, Any], path: str | None = None) -> dict[str, str]:
    """``{"engine_path", "name", "image"}`` of the container Ray runs in on this host when its fact says container mode
    (``container`` set by site.yml with ``ray_container_image``), else {}. A ``container`` that is not an object, or
    names no absolute engine path or no container, is one line of RayError: a venv must not be guessed then."""
    value = fact.get("container")
    if not value:
        return {}
    where = "the rlinfra_ray local fact %s is damaged" % (path or FACT_PATH)
    if not isinstance(value, dict):
        raise RayError(
            "%s: container is %s, not an object; run site.yml again to rewrite it" % (where, _describe(value))
        )
    out = {}
    for key in ("engine_path", "name", "image"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise RayError(
                "%s: container.%s is %s, not a string; run site.yml again to rewrite it" % (where, key, _describe(item))
            )
        out[key] = (item or "").strip()
    if not out["engine_path"].startswith("/") or not out["name"]:
        raise RayError(
            "%s: its container names no engine path or no container name; run site.yml again to rewrite it" % where
        )
    return out


def dashboard_target(
    address: str | None = None,
    auth_token: str | None = None,
    auth_token_path: str | None = None,
    fact_path: str | None = None,
) -> dict[str, Any]:
    """Where a module connects and which token file it reads: ``dict(address, auth_token_path, fact, warning)``.

    ``address`` empty (None or ''): this host's rlinfra_ray local fact gives ``dashboard_url``; no fact or no
    dashboard_url in it is one line of :class:`RayError`, and so is a broken fact. Neither ``auth_token`` nor
    ``auth_token_path`` given: the fact's ``token_path`` (resolve_token then falls back to the environment).
    A broken fact that only the token path was looked up in does not stop the module: ``warning`` says why it
    was left out. ``fact`` is the fact read ({} when none), e.g. for its ``venv``."""
    path = fact_path or FACT_PATH
    try:
        fact, problem = local_ray_fact(path), None
    except RayError as e:
        fact, problem = {}, e
    if address is None or address == "":  # only unset: a blank address given on purpose is refused as such
        if problem is not None:
            raise problem
        if not fact:
            raise RayError(
                "no Ray dashboard address on this host: it has no rlinfra_ray local fact (%s, written by "
                "site.yml) and address is not set" % path
            )
        address = fact_text(fact, "dashboard_url", path)
        if not address:
            raise RayError(
                "no Ray dashboard address on this host: its rlinfra_ray local fact (%s) has no "
                "dashboard_url (run site.yml again) and address is not set" % path
            )
        try:
            normalize_address(address)
        except RayError as e:
            raise RayError("the dashboard_url of the rlinfra_ray local fact %s is not usable: %s" % (path, e)) from e
    warning = None
    if not auth_token and not auth_token_path:
        if problem is not None:
            warning = "%s; its token_path was not used" % problem
        else:
            try:
                auth_token_path = fact_text(fact, "token_path", path) or None
            except RayError as e:
                warning = "%s; its token_path was not used" % e
    return dict(address=address, auth_token_path=auth_token_path, fact=fact, warning=warning)


def client_from_module(module: Any, **kwargs: Any) -> RayClient:
    """A :class:`RayClient` for a module's DASHBOARD_ARGUMENT_SPEC parameters, the empty ones filled in from
    this host's rlinfra_ray local fact (:func:`dashboard_target`). The token, wherever it came from (option,
    token file, environment), is kept out of everything the module returns. ``client.fact`` is the fact read."""
    p = module.params
    target = dashboard_target(p.get("address"), p.get("auth_token"), p.get("auth_token_path"))
    if target["warning"]:
        module.warn(target["warning"])
    token = resolve_token(p.get("auth_token"), target["auth_token_path"])
    if token:
        module.no_log_values.add(token)
    client = RayClient(target["address"], token=token, validate_certs=p["validate_certs"], **kwargs)
    client.fact = target["fact"]
    return client


def ms_to_iso(ms: float | None) -> str | None:
    if ms is None:
        return None
    stamp = datetime.datetime.fromtimestamp(ms / 1000.0, datetime.timezone.utc)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


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


# A short job ends within seconds of its start, a long one runs for hours: poll early and often, then back
# off so that each pause is about a tenth of the time waited so far, up to the caller's poll_interval. A
# job is then seen ending at most ~10% (plus 0.1 s) after it did, at a cost of a few dozen reads.
FIRST_POLL_PAUSE = 0.1
POLL_BACKOFF = 1.1


def poll_pauses(poll_interval: float, waited: float = 0.0) -> Iterator[float]:
    """The pauses between polls of a job that has been waited on (or has run) for ``waited`` seconds:
    0.1 s for a new one, then x1.1 per poll (a job that ends is seen within a tenth of its age), never more
    than ``poll_interval``."""
    pause = min(poll_interval, max(FIRST_POLL_PAUSE, waited * (POLL_BACKOFF - 1)))
    while True:
        yield pause
        pause = min(poll_interval, pause * POLL_BACKOFF)


class RayClient:
    """Ray dashboard client. GETs are retried with exponential backoff on connection errors
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

    # Jobs API -------------------------------------------------------------------------------

    def version(self) -> Any:
        return self.request("GET", "/api/version")

    def list_jobs(self) -> list[Any]:
        return self.request("GET", "/api/jobs/") or []

    def job_summaries(self) -> list[dict[str, Any]]:
        """Every job Ray knows (submitted through the Jobs API), oldest first, as
        ``{submission_id, status, job_id, start_time, end_time, metadata, message}`` with ISO times."""
        rows = []
        for job in self.list_jobs():
            if not isinstance(job, dict) or not job.get("submission_id"):
                continue  # drivers started by hand (ray.init) have no submission id
            rows.append(
                dict(
                    submission_id=job["submission_id"],
                    status=job.get("status"),
                    job_id=job.get("job_id"),
                    start_time=ms_to_iso(job.get("start_time")),
                    end_time=ms_to_iso(job.get("end_time")),
                    metadata=job.get("metadata") or {},
                    message=(job.get("message") or "")[:300],
                    _start=job.get("start_time") or 0,
                )
            )
        rows.sort(key=lambda r: r.pop("_start"))
        return rows

    def get_job(self, submission_id: str) -> dict[str, Any] | None:
        """Job details dict, or None when Ray does not know the id."""
        check_submission_id(submission_id)
        try:
            return self.request("GET", "/api/jobs/" + quote(submission_id, safe=""))
        except RayHTTPError as e:
            if e.status == 404:
                return None
            raise

    def submit_job(
        self,
        submission_id: str,
        entrypoint: str,
        runtime_env: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        entrypoint_num_cpus: float | None = None,
        entrypoint_num_gpus: float | None = None,
        entrypoint_memory: float | None = None,
        entrypoint_resources: Mapping[str, Any] | None = None,
    ) -> bool:
        """Create the job; True if created, False if a job with that id already exists."""
        check_submission_id(submission_id)
        payload = dict(
            submission_id=submission_id,
            entrypoint=entrypoint,
            runtime_env=runtime_env,
            metadata=metadata,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_num_gpus=entrypoint_num_gpus,
            entrypoint_memory=entrypoint_memory,
            entrypoint_resources=entrypoint_resources,
        )
        try:
            self.request("POST", "/api/jobs/", {k: v for k, v in payload.items() if v is not None})
        except RayHTTPError as e:
            if EXISTS_MARKER in (e.body or ""):
                return False
            raise
        return True

    def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; True if a stop was sent to a running job."""
        check_submission_id(submission_id)
        try:
            resp = self.request("POST", "/api/jobs/%s/stop" % quote(submission_id, safe=""))
        except RayHTTPError as e:
            if e.status == 404:
                return False
            raise
        return bool(isinstance(resp, dict) and resp.get("stopped"))

    def delete_job(self, submission_id: str, settle: float = 2.0, rounds: int = 4) -> bool:
        """Delete a finished job's record; True if deleted, False if it did not exist.

        Ray's job monitor can write a record back (as FAILED, "Job supervisor actor died") when the
        job is deleted just after it ended, so the deletion is checked after ``settle`` seconds,
        longer than the monitor's 1 s loop, and repeated if the record came back.
        """
        check_submission_id(submission_id)
        deleted = False
        for _dummy in range(rounds):
            try:
                resp = self.request("DELETE", "/api/jobs/" + quote(submission_id, safe=""))
            except RayHTTPError as e:
                if e.status == 404:
                    return deleted
                raise
            if not (isinstance(resp, dict) and resp.get("deleted")):
                return deleted
            deleted = True
            if not settle:
                break
            self._sleep(settle)
            if self.get_job(submission_id) is None:
                break
        return deleted

    # Package API (working_dir uploads) ------------------------------------------------------

    def has_package(self, name: str) -> bool:
        """True when the cluster holds ``gcs://<name>``; the GET also pins the package for a few
        minutes, which the Ray SDK relies on between upload and submission."""
        try:
            self.request("GET", "/api/packages/gcs/" + quote(name, safe=""))
        except RayHTTPError as e:
            if e.status == 404:
                return False
            raise
        return True

    def upload_package(self, name: str, data: bytes) -> None:
        self.request("PUT", "/api/packages/gcs/" + quote(name, safe=""), data)

    def get_logs(self, submission_id: str) -> str:
        """The job's whole driver log ('' before it starts or when the job is unknown)."""
        check_submission_id(submission_id)
        try:
            resp = self.request("GET", "/api/jobs/%s/logs" % quote(submission_id, safe=""))
        except RayHTTPError as e:
            if e.status == 404:
                return ""
            raise
        if isinstance(resp, dict):
            return resp.get("logs") or ""
        return str(resp or "")

    def wait_for_job(
        self,
        submission_id: str,
        timeout: float,
        poll_interval: float = 5.0,
        on_poll: Callable[[dict[str, Any]], Any] | None = None,
        outage_grace: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> tuple[dict[str, Any], bool]:
        """Poll until the job reaches a terminal status or ``timeout`` seconds pass.

        Returns ``(job, timed_out)``. ``on_poll(job)`` is called after every poll. A dashboard
        that goes away for less than ``outage_grace`` seconds (a head restart under systemd)
        does not end the wait.
        """
        deadline = clock() + timeout
        outage_since = None
        job = None
        pauses = poll_pauses(poll_interval)
        while True:
            try:
                job = self.get_job(submission_id)
                outage_since = None
            except (RayUnreachableError, RayHTTPError) as e:
                if isinstance(e, RayHTTPError) and (e.status or 0) < 500:
                    raise
                outage_since = outage_since if outage_since is not None else clock()
                if clock() - outage_since > outage_grace or clock() >= deadline:
                    raise
                self._sleep(poll_interval)
                continue
            if job is None:
                raise self._fail(RayError, "Ray job %s disappeared while waiting for it (deleted?)" % submission_id)
            if on_poll:
                on_poll(job)
            if job.get("status") in TERMINAL_STATUSES:
                return job, False
            remaining = deadline - clock()
            if remaining <= 0:
                return job, True
            self._sleep(min(next(pauses), remaining))

    def job_url(self, submission_id: str) -> str:
        return "%s/#/jobs/%s" % (self.address, quote(submission_id, safe=""))

    # State API ------------------------------------------------------------------------------

    def list_nodes(self) -> list[dict[str, Any]]:
        """Every node the GCS knows, dead ones included, normalized to
        ``{node_id, node_ip, node_name, is_head, state, resources}``."""
        resp = self.request("GET", "/api/v0/nodes?limit=10000")
        if not isinstance(resp, dict) or not resp.get("result", False):
            msg = resp.get("msg") if isinstance(resp, dict) else resp
            raise self._fail(RayError, "Ray State API /api/v0/nodes failed: %s" % (msg or "unexpected answer"))
        rows = ((resp.get("data") or {}).get("result") or {}).get("result") or []
        return [
            dict(
                node_id=r.get("node_id"),
                node_ip=r.get("node_ip"),
                node_name=r.get("node_name"),
                is_head=bool(r.get("is_head_node")),
                state=r.get("state"),
                resources=_clean_numbers(r.get("resources_total") or {}),
            )
            for r in rows
        ]


def _clean_numbers(resources: Mapping[str, Any]) -> dict[str, Any]:
    # Ray reports every resource as a float; 8 GPUs should read 8, not 8.0, e.g. in Hydra overrides.
    return {k: tidy(v) for k, v in resources.items()}


def tail_lines(text: str | None, n: int) -> str:
    if not text or n <= 0:
        return ""
    return "\n".join(text.splitlines()[-n:])


def check_job_record(job: object) -> dict[str, Any]:
    """A job of the cluster's list, as M(rlinfra.verl.ray_cluster_info) returns it."""
    if not isinstance(job, dict):
        raise vocabulary.Bad("be a job (a mapping)")
    for key in ("submission_id", "status"):
        if job.get(key) is not None:
            vocabulary.one_line(job[key], "a job whose %s is one line of text" % key)
    if job.get("metadata") is not None and not isinstance(job["metadata"], dict):
        raise vocabulary.Bad("be a job whose metadata is a mapping")
    return job


JOB_RECORD = vocabulary.Custom(
    "dict",
    check_job_record,
    [{"submission_id": ["x"]}, {"submission_id": "a\nb"}, {"submission_id": "x", "metadata": "m"}],
    {"submission_id": "rlinfra-sample-default", "status": "RUNNING"},
)
