# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The alive nodes and resources of a Ray cluster, optionally waiting for N nodes: module
``rlinfra.verl.ray_cluster_info`` (the documentation and the options) and the same code as a plain script on the
head (its action, through plugin_utils/node_script.py)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import tidy
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    ACTIVE_STATUSES,
    RayAuthError,
    RayError,
    RayHTTPError,
    RayUnreachableError,
    check_seconds,
    client_from_module,
    poll_pauses,
)

POLL_INTERVAL = 1.0  # the dashboard answers a node list in milliseconds; a node that joined is seen within a second


def _addresses(host):
    try:
        return {entry[4][0] for entry in socket.getaddrinfo(host, None)}
    except (socket.gaierror, UnicodeError, OSError):
        return set()


def missing_hosts(
    expected: Iterable[str], nodes: Iterable[Mapping[str, Any]], resolved: Mapping[str, set[str]]
) -> list[str]:
    present: set[str] = set()
    for node in nodes:
        present.update(x for x in (node.get("node_ip"), node.get("node_name")) if x)
    return [h for h in expected if h not in present and not (resolved.get(h, set()) & present)]


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def container_of(fact: Mapping[str, Any]) -> dict[str, str]:
    """The fact's container (container mode: engine_path, name, image_id, ...) when it names one, else {} (a venv)."""
    value = fact.get("container")
    if not isinstance(value, dict) or not all(_text(value.get(k)) for k in ("engine_path", "name", "image_id")):
        return {}
    return dict((k, v) for k, v in value.items() if isinstance(v, str))


def summarize(
    nodes: Iterable[Mapping[str, Any]], expected: Iterable[str] | None, resolved: Mapping[str, set[str]]
) -> dict[str, Any]:
    alive = [n for n in nodes if n.get("state") == "ALIVE"]
    out = dict(
        alive_nodes=len(alive),
        nodes=alive,
        total_gpus=tidy(sum(n["resources"].get("GPU", 0) for n in alive)),
        total_cpus=tidy(sum(n["resources"].get("CPU", 0) for n in alive)),
    )
    if expected is not None:
        out["missing_hosts"] = missing_hosts(expected, alive, resolved)
    return out


def _failed(msg: str, **result: Any) -> dict[str, Any]:
    return dict(result, failed=True, msg=msg)


def info(p: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's result for parameters ``p``; ``module`` is an AnsibleModule or a plain_module.PlainModule."""
    problems = check_seconds("timeout", p["timeout"], 0)
    if p["wait_for_nodes"] is not None and p["wait_for_nodes"] < 0:
        problems.append("wait_for_nodes must not be negative, got %d" % p["wait_for_nodes"])
    if any(not (h or "").strip() for h in p["expected_hosts"] or []):
        problems.append("expected_hosts: an entry is empty (an inventory variable that is not set?)")
    if problems:
        return _failed(msg="\n".join(problems), changed=False)
    expected = p["expected_hosts"]
    want = p["wait_for_nodes"] or 0
    waiting = bool(want) or bool(expected)
    # Names are resolved once; a name that does not resolve can still match a node name.
    resolved = {h: _addresses(h) for h in expected or []}
    try:
        client = client_from_module(module, retries=0 if waiting else 3)
    except RayError as e:
        return _failed(msg=str(e))
    used = dict(address=client.address, venv=_text(client.fact.get("venv")), container=container_of(client.fact))
    deadline = time.monotonic() + p["timeout"]
    all_nodes: Any  # Ray's node records: every one has a node_id
    all_nodes, last_error = [], None
    pauses = poll_pauses(POLL_INTERVAL)
    while True:
        try:
            all_nodes, last_error = client.list_nodes(), None
        except RayAuthError as e:
            return _failed(msg=str(e), **dict(used, **e.details()))
        except (RayUnreachableError, RayHTTPError) as e:
            # A head that is still starting refuses connections or answers 5xx for a while.
            if not waiting or isinstance(e, RayHTTPError) and (e.status or 0) < 500:
                return _failed(msg=str(e), **dict(used, **e.details()))
            last_error = e
        except RayError as e:
            return _failed(msg=str(e), **dict(used, **e.details()))
        result = dict(summarize(all_nodes, expected, resolved), **used)
        done = last_error is None and result["alive_nodes"] >= want and not result.get("missing_hosts")
        if not waiting or done:
            if p["jobs"]:
                try:
                    result["jobs"] = client.job_summaries()
                except RayError as e:
                    return _failed(msg=str(e), **dict(used, **e.details()))
                result["running_jobs"] = [j for j in result["jobs"] if j["status"] in ACTIVE_STATUSES]
            return dict(changed=False, **result)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(next(pauses), remaining))

    if last_error is not None:
        return _failed(
            msg="gave up after %ss waiting for the Ray cluster: %s" % (p["timeout"], last_error),
            changed=False,
            **result,
        )
    msg = "Ray cluster at %s has %d alive node(s) after %ss, expected %s" % (
        client.address,
        result["alive_nodes"],
        p["timeout"],
        max(want, len(expected or [])),
    )
    if result.get("missing_hosts"):
        msg += "; missing: " + ", ".join(result["missing_hosts"])
    else:
        alive_ips = {n.get("node_ip") for n in result["nodes"]}
        dead = sorted(
            {n.get("node_ip") or n.get("node_id") for n in all_nodes if n.get("state") != "ALIVE"} - alive_ips
        )
        msg += (
            "; nodes Ray knows as dead: " + ", ".join(dead)
            if dead
            else "; pass expected_hosts to have the missing hosts named"
        )
    return _failed(msg=msg, changed=False, **result)
