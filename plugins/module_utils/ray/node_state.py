# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Whether a running Ray node must restart, and whether site.yml may restart it (modules ray_node_state, ray_node_guard).

A node records, after each successful converge, the digests of what decides a restart (its ray_env, its token,
its unit's inputs) and the fingerprint of the Python environment Ray was started from. Comparing what a run
would apply with that record tells, before anything changes, where Ray would restart.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from typing import Any, Iterable, Mapping

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_if_changed
from ansible_collections.rlinfra.verl.plugins.module_utils.common.switches import switch_value
from ansible_collections.rlinfra.verl.plugins.module_utils.node.python_env import (
    inputs_digest,
    python_version,
    read_json,
)

RECORD_VERSION = 1
FLAG = "ray_restart_running_jobs"


def digest(value: Any) -> str:
    """sha256 of a JSON value, independent of key order."""
    return hashlib.sha256(
        json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode("utf-8")
    ).hexdigest()


def part_digests(inputs: Mapping[Any, Any] | None) -> dict[str, str]:
    return {str(key): digest(value) for key, value in (inputs or {}).items()}


def record_content(parts: Mapping[str, str], fingerprint: Any) -> str:
    return (
        json.dumps({"version": RECORD_VERSION, "parts": parts, "fingerprint": fingerprint}, indent=2, sort_keys=True)
        + "\n"
    )


def restart_reasons(
    record: Mapping[str, Any] | None, parts: Mapping[str, str], fingerprint: Any, python_env_changed: bool = False
) -> list[str]:
    """Why a running Ray would restart, as short names; [] when it runs what it should.

    ``no_record``: nothing says what the running Ray was started with (first converge by this collection);
    ``python_env``: the package lists or the interpreter differ from what the environment was installed from;
    ``environment``: the installed environment is not the one Ray was started from; any other name: that
    part of the inputs (``ray_env``, ``token``, ``unit``) changed.
    """
    if record is None:
        return ["no_record"]
    reasons = ["python_env"] if python_env_changed else []
    if record.get("fingerprint") != fingerprint:
        reasons.append("environment")
    old = record.get("parts") or {}
    reasons += [key for key in sorted(set(old) | set(parts)) if old.get(key) != parts.get(key)]
    return reasons


def parse_flag(value: Any) -> bool:
    """A strict boolean (module_utils/common/switches.py). Raises ValueError otherwise (a typo must never read as
    false, nor as true)."""
    result, error = switch_value(value, FLAG)
    if error:
        raise ValueError(error + ": nothing was changed")
    if result is None:  # never: no error: a boolean (for the type checker)
        raise AssertionError("result is set here")
    return result


def stop_hint(job: Mapping[str, Any]) -> str:
    """The command that stops one job: stop.yml for the jobs submit.yml made, the Ray CLI for the others."""
    meta = job.get("metadata") or {}
    exp = meta.get("rlinfra_experiment")
    if not exp:
        return "ray job stop %s" % job.get("submission_id")
    cmd = "ansible-playbook stop.yml -e exp=%s" % exp
    if meta.get("rlinfra_run"):
        cmd += " -e run=%s" % meta["rlinfra_run"]
    if meta.get("rlinfra_cluster") not in (None, "", "default"):
        cmd += " -e cluster=%s" % meta["rlinfra_cluster"]
    return cmd


def _where(nodes: Iterable[Mapping[str, Any]]) -> str:
    groups: OrderedDict[tuple[Any, ...], list[str]] = OrderedDict()
    for node in nodes:
        groups.setdefault(tuple(node.get("reasons") or ["?"]), []).append(node["host"])
    return "; ".join("%s (%s)" % (", ".join(hosts), ", ".join(reasons)) for reasons, hosts in groups.items())


def guard(nodes: Iterable[Mapping[str, Any]], allow: bool) -> tuple[list[str], list[str], dict[str, list[Any]]]:
    """(errors, warnings, running) for the per-node reports of a site.yml run.

    ``nodes``: ``{host, cluster, reports_jobs, restart, reasons, running_jobs, jobs_error}``; the job fields are
    on the report of the one node per cluster that listed its jobs (``reports_jobs``, the head as a rule). An
    error per cluster where Ray would restart while a job runs (or while its jobs could not be listed), unless
    ``allow``; then a warning instead. ``running``: cluster -> running submission ids.
    """
    clusters: OrderedDict[str, list[Mapping[str, Any]]] = OrderedDict()
    for node in nodes:
        clusters.setdefault(node.get("cluster") or "default", []).append(node)
    errors, warnings, running = [], [], OrderedDict()
    for name, members in clusters.items():
        reporter: Mapping[str, Any] = next((n for n in members if n.get("reports_jobs")), {})
        jobs = reporter.get("running_jobs") or []
        running[name] = [j.get("submission_id") for j in jobs]
        restarting = [n for n in members if n.get("restart")]
        if not restarting:
            continue
        where = "Ray would restart on %s of cluster '%s'" % (_where(restarting), name)
        if jobs:
            listed = ", ".join("%s (%s)" % (j.get("submission_id"), j.get("status")) for j in jobs)
            if allow:
                warnings.append("%s under running job(s) %s: %s=true, so they will fail" % (where, listed, FLAG))
            else:
                hints = "; ".join(OrderedDict((stop_hint(j), None) for j in jobs))
                errors.append(
                    "%s, where job(s) %s run: stop them first (%s) or re-run with -e %s=true to restart "
                    "anyway (they fail)" % (where, listed, hints, FLAG)
                )
        elif reporter.get("jobs_error") and not allow:
            errors.append(
                "%s, but its running jobs could not be listed (%s): if none runs, re-run with -e %s=true"
                % (where, reporter["jobs_error"], FLAG)
            )
    return errors, warnings, running


def refusal(errors: Iterable[str]) -> str:
    return "Refusing to restart Ray under a running job, nothing was changed: " + " | ".join(errors)


def service_active(module: Any, service: str) -> bool:
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return False
    rc, out, dummy = module.run_command([systemctl, "is-active", service])
    return rc == 0 and out.strip() == "active"


def node_state(p: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """rlinfra.verl.ray_node_state's result for validated parameters ``p``: ``module`` is the AnsibleModule, or a
    plain_module.PlainModule when the action runs this as a plain script on the node."""
    record = read_json(p["path"]) if os.path.exists(p["path"]) else None
    env_record = read_json(p["python_env_state"]) if p["python_env_state"] else None
    fingerprint = (env_record or {}).get("fingerprint")
    parts = part_digests(p["inputs"])
    result = dict(
        changed=False, active=service_active(module, p["service"]), recorded=record is not None, fingerprint=fingerprint
    )

    if p["state"] == "recorded":
        directory = os.path.dirname(p["path"]) or "."
        if not os.path.isdir(directory):
            return dict(result, failed=True, msg="cannot record the Ray node's state: %s does not exist" % directory)
        result["changed"] = write_if_changed(p["path"], record_content(parts, fingerprint), 0o600, module.check_mode)
        return result

    env_changed = False
    want = p["python_env"]
    if want is not None:
        version = python_version(module.run_command, want["python"])
        wanted = inputs_digest(want["packages"], want["no_build_isolation_packages"], want["no_deps_packages"], version)
        env_changed = (env_record or {}).get("inputs") != wanted
    reasons = restart_reasons(record, parts, fingerprint, env_changed)
    result.update(reasons=reasons, restart=result["active"] and bool(reasons))
    return result


# rlinfra.verl.ray_node_guard (a module for its documentation, an action plugin that runs it on the controller).
GUARD_ARGUMENT_SPEC = dict(
    nodes=dict(
        type="list",
        elements="dict",
        required=True,
        options=dict(
            host=dict(type="str", required=True),
            cluster=dict(type="str", default="default"),
            reports_jobs=dict(type="bool", default=False),
            restart=dict(type="bool", default=False),
            reasons=dict(type="list", elements="str", default=[]),
            running_jobs=dict(type="list", elements="dict"),
            jobs_error=dict(type="str", default=""),
        ),
    ),
    restart_running_jobs=dict(type="raw", default=False),
)


def guard_result(params: Mapping[str, Any]) -> dict[str, Any]:
    """The result for validated arguments (the module and its controller-side action plugin share it)."""
    try:
        allow = parse_flag(params["restart_running_jobs"])
    except ValueError as e:
        return dict(failed=True, msg=str(e))
    nodes = params["nodes"]
    errors, warnings, running = guard(nodes, allow)
    restarting: dict[str, list[str]] = {}
    for node in nodes:
        if node["restart"]:
            restarting.setdefault(node["cluster"], []).append(node["host"])
    if errors:
        return dict(failed=True, msg=refusal(errors), running_jobs=running, restarting=restarting)
    return dict(changed=False, allow=allow, running_jobs=running, restarting=restarting, warnings=warnings)


def guard_module(params: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The ``ray_node_guard`` module's result (:func:`guard_result`, its warnings through ``module.warn``), for
    plain_module.finish: ``failed`` only when it failed."""
    result = guard_result(params)
    for warning in result.pop("warnings", []):
        module.warn(warning)
    if result.pop("failed", False):
        return dict(result, failed=True)
    return result
