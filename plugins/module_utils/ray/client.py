# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The one client for the Ray dashboard: Jobs REST API and State API (nodes), and where a module's client comes from.

Plain HTTP on the standard library (module_utils/common/plain_http.py) so that it runs on any host with only
Python (no ``requests``, no ``import ray``, no Ansible module runtime: a plain node script uses it too). Checked against Ray 2.60.

This file holds the dashboard options every module takes, the token and this host's rlinfra_ray local fact
(:func:`resolve_token`, :func:`local_ray_fact`, :func:`dashboard_target`, :func:`client_from_module`) and
:class:`RayClient` with the State API. Its parts, imported back here (import them from here):

- ``_client_http.py``: the errors, the address and token rules, one request (:class:`DashboardTransport`);
- ``_client_jobs.py``: the Jobs API (:class:`JobsAPI`), poll pauses, job statuses;
- ``_client_checks.py``: the checks of module options and the job record type (``JOB_RECORD``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import secret_names, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import tidy
from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_checks import (
    JOB_RECORD,
    MAX_ARG_BYTES,
    MAX_LOGS_TAIL_LINES,
    MIN_POLL_INTERVAL,
    RAY_BUILTIN_RESOURCES,
    RAY_RESOURCE_PRECISION,
    SUBMISSION_ID,
    SUBMISSION_ID_RE,
    check_entrypoint,
    check_job_record,
    check_resources,
    check_runtime_env,
    check_seconds,
    check_submission_id,
    check_tail_lines,
    describe,
    string_values,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_http import (
    ADDRESS_EXAMPLE,
    DASHBOARD_URL,
    TOKEN_HINT,
    DashboardTransport,
    RayAuthError,
    RayError,
    RayHTTPError,
    RayUnreachableError,
    check_token,
    normalize_address,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray._client_jobs import (
    ACTIVE_STATUSES,
    EXISTS_MARKER,
    FIRST_POLL_PAUSE,
    POLL_BACKOFF,
    TERMINAL_STATUSES,
    JobsAPI,
    ms_to_iso,
    poll_pauses,
    tail_lines,
)

__all__ = [
    "ACTIVE_STATUSES",
    "ADDRESS_EXAMPLE",
    "DASHBOARD_ARGS",
    "DASHBOARD_ARGUMENT_SPEC",
    "DASHBOARD_URL",
    "EXISTS_MARKER",
    "FACT_PATH",
    "FIRST_POLL_PAUSE",
    "JOB_RECORD",
    "MAX_ARG_BYTES",
    "MAX_LOGS_TAIL_LINES",
    "MIN_POLL_INTERVAL",
    "POLL_BACKOFF",
    "RAY_BUILTIN_RESOURCES",
    "RAY_RESOURCE_PRECISION",
    "SECRET_NAME",
    "SUBMISSION_ID",
    "SUBMISSION_ID_RE",
    "TERMINAL_STATUSES",
    "TOKEN_HINT",
    "DashboardTransport",
    "JobsAPI",
    "RayAuthError",
    "RayClient",
    "RayError",
    "RayHTTPError",
    "RayUnreachableError",
    "check_entrypoint",
    "check_job_record",
    "check_resources",
    "check_runtime_env",
    "check_seconds",
    "check_submission_id",
    "check_tail_lines",
    "check_token",
    "client_from_module",
    "dashboard_target",
    "fact_container",
    "fact_text",
    "local_ray_fact",
    "ms_to_iso",
    "normalize_address",
    "poll_pauses",
    "resolve_token",
    "string_values",
    "tail_lines",
]

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
            "rewrite it" % (path or FACT_PATH, key, describe(value))
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
            "%s: container is %s, not an object; run site.yml again to rewrite it" % (where, describe(value))
        )
    out = {}
    for key in ("engine_path", "name", "image"):
        item = value.get(key)
        if item is not None and not isinstance(item, str):
            raise RayError(
                "%s: container.%s is %s, not a string; run site.yml again to rewrite it" % (where, key, describe(item))
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


class RayClient(JobsAPI):
    """Ray dashboard client: the Jobs API (``_client_jobs.py``) and the State API, on the transport
    (``_client_http.py``). GETs are retried with exponential backoff on connection errors
    and 5xx; POST and DELETE are sent once because they change state."""

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
