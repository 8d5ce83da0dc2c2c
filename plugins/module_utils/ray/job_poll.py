# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One look at a Ray job and the cluster's nodes, watching for a while: module ``rlinfra.verl.ray_job_poll`` (the
documentation and the options) and the same code as a plain script on the head (its action, and ray_job_wait's
watchdog, through plugin_utils/node_script.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import env_secret_values
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import _log_follow as log_follow
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.attempts import with_lines
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import (
    MIN_POLL_INTERVAL,
    TERMINAL_STATUSES,
    RayAuthError,
    RayError,
    check_seconds,
    check_submission_id,
    check_tail_lines,
    client_from_module,
    ms_to_iso,
    normalize_address,
    poll_pauses,
    tail_lines,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.recovery import summary_lines
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.log import last_progress

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import RayClient


def read(client: RayClient, sid: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """(job or None, nodes, error): one look at the job and the nodes; error is set when the
    dashboard did not answer (the others are then empty)."""
    try:
        job = client.get_job(sid)
        nodes = client.list_nodes()
    except RayAuthError:
        raise
    except RayError as e:
        return None, [], str(e)
    return job, nodes, None


def alive_ids(nodes: Iterable[Mapping[str, Any]]) -> set[str]:
    return {n["node_id"] for n in nodes if n.get("state") == "ALIVE"}


def watch(
    client: RayClient,
    sid: str,
    timeout: float,
    poll_interval: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Any] = time.sleep,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str | None]:
    """Read until something a watcher must react to happens, or ``timeout`` passes."""
    deadline = clock() + max(0, timeout)
    job, nodes, error = read(client, sid)
    first_alive = alive_ids(nodes)
    # Each chunk of a long wait is a new module run: pick up the backoff where the job's age puts it.
    started = (job or {}).get("start_time")
    waited = time.time() - started / 1000.0 if isinstance(started, (int, float)) and started > 0 else 0.0
    pauses = poll_pauses(poll_interval, waited=waited)
    while error is None and job is not None and job.get("status") not in TERMINAL_STATUSES:
        if first_alive - alive_ids(nodes):
            break
        remaining = deadline - clock()
        if remaining <= 0:
            break
        sleep(min(next(pauses), remaining))
        job, nodes, error = read(client, sid)
    return job, nodes, error


def local_log(client: RayClient, sid: str) -> str | None:
    """The job's driver log file on this host, when this host is the head of the cluster ``client`` talks to (its
    rlinfra_ray fact names the same dashboard, and Ray's temp dir); None otherwise."""
    fact = getattr(client, "fact", None) or {}
    temp_dir, url = fact.get("temp_dir"), fact.get("dashboard_url")
    if not isinstance(temp_dir, str) or not temp_dir.startswith("/") or not isinstance(url, str):
        return None
    try:
        if normalize_address(url) != client.address:
            return None
    except RayError:
        return None
    return log_follow.driver_log_path(temp_dir, sid)


def log_since(
    client: RayClient, sid: str, offset: int, file_id: str, tail: int, final: bool, cap: int = log_follow.CHUNK_BYTES
) -> tuple[dict[str, Any], str]:
    """(new whole lines after ``offset`` as :func:`log_follow.read_new` answers, the log's last ``tail`` lines): from
    the file on this host, seeking, when it is here; else from Ray's API, which reads the whole log on the head (only
    the new part is returned)."""
    path = local_log(client, sid)
    got = log_follow.read_new(path, offset, file_id, cap=cap, final=final) if path else None
    if got is not None:
        if path is None:  # never: got is read from it (for the type checker)
            raise AssertionError("path is set here")
        return got, log_follow.read_tail(path, tail)
    try:
        logs = client.get_logs(sid)
    except RayError:
        logs = ""
    return log_follow.slice_new(logs, offset, file_id, cap=cap, final=final, name=sid), tail_lines(logs, tail)


def result(
    client: RayClient,
    sid: str,
    job: dict[str, Any] | None,
    nodes: list[dict[str, Any]],
    error: str | None,
    tail: int,
    full_at_end: bool = False,
    offset: int | None = None,
    file_id: str = "",
) -> dict[str, Any]:
    job = job or {}
    logs, new = "", None
    full = full_at_end and job.get("status") in TERMINAL_STATUSES and offset is None
    if job and offset is not None:  # only what is new since the caller's offset, and the tail from the file's end
        new, logs_tail = log_since(client, sid, offset, file_id, tail, job.get("status") in TERMINAL_STATUSES)
        step, metrics = last_progress(new["text"])
    else:
        # A look without an offset (status.yml) on the head reads the file's end: its newest step is in it.
        path = local_log(client, sid) if job and not full else None
        end = log_follow.read_end(path) if path else None
        if end is None and job and (tail > 0 or full):
            try:
                logs = client.get_logs(sid)
            except RayError:
                logs = ""
        step, metrics = last_progress(logs if end is None else end)
        logs_tail = tail_lines(logs if end is None else end, tail)
    start, end = job.get("start_time"), job.get("end_time")
    duration = round(((end or time.time() * 1000) - start) / 1000.0, 3) if start else None
    out: dict[str, Any]
    out = dict(
        changed=False,
        submission_id=sid,
        found=bool(job),
        reachable=error is None,
        error=error or "",
        status=job.get("status"),
        message=job.get("message"),
        job_id=job.get("job_id"),
        metadata=job.get("metadata") or {},
        start_time=ms_to_iso(start),
        end_time=ms_to_iso(end),
        duration_s=duration,
        driver_exit_code=job.get("driver_exit_code"),
        logs_tail=logs_tail,
        last_step=step,
        last_metrics=metrics,
        nodes=nodes,
        dashboard_url=client.job_url(sid),
        address=client.address,
    )
    out["summary"] = summary_lines(
        dict(
            out,
            reason_line=(job.get("message") or "").strip().splitlines()[0][:300]
            if job.get("message") and job.get("status") != "SUCCEEDED"
            else "",
        )
    )
    out["summary"].append("dashboard:     %s" % out["dashboard_url"])
    if full:
        out["full_log"] = logs
    if offset is not None:
        new = new or dict(text="", offset=0, size=0, file_id="", reset=False, source="none")
        out.update(
            log_chunk=new["text"],
            log_offset=new["offset"],
            log_size=new["size"],
            log_file_id=new["file_id"],
            log_reset=new["reset"],
            log_source=new["source"],
        )
    return out


def poll(p: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's result for parameters ``p``; ``module`` is an AnsibleModule or a plain_module.PlainModule (its
    no_log_values get the token and the secret values)."""
    env_vars = (p["runtime_env"] or {}).get("env_vars") or {}
    if isinstance(env_vars, dict):
        module.no_log_values.update(env_secret_values(env_vars, p["secret_names"]))
    problems = check_seconds("timeout", p["timeout"], 0)
    problems += check_seconds("poll_interval", p["poll_interval"], MIN_POLL_INTERVAL)
    problems += check_tail_lines(p["logs_tail_lines"], maximum=None)
    try:
        check_submission_id(p["submission_id"])
    except RayError as e:
        problems.insert(0, str(e))
    if problems:
        return dict(failed=True, msg="\n".join(problems), submission_id=p["submission_id"], changed=False)
    try:
        client = client_from_module(module, retries=1)
        sid, extra = p["submission_id"], {}
        if p["run"]:
            # The run's newest attempt (recoveries submit <id>-aN); a run never submitted has none.
            attempts = with_lines(client.list_jobs(), sid)
            if not attempts:
                return dict(
                    changed=False,
                    submission_id=sid,
                    found=False,
                    attempts=[],
                    summary=[],
                    logs_tail="",
                    address=client.address,
                )
            sid, extra = attempts[-1]["submission_id"], dict(attempts=attempts)
        job, nodes, error = watch(client, sid, p["timeout"], p["poll_interval"])
        return dict(
            result(
                client,
                sid,
                job,
                nodes,
                error,
                p["logs_tail_lines"],
                p["full_log_at_end"],
                offset=p.get("log_offset"),
                file_id=p.get("log_file_id") or "",
            ),
            **extra,
        )
    except RayError as e:
        return dict(failed=True, msg=str(e), submission_id=p["submission_id"], **e.details())


def concealed(params: Mapping[str, Any]) -> list[str]:
    """A refusal's invocation shows the runtime_env: its secret values, masked before the fields are checked (the
    module's ``concealed``, vocabulary.Args.new_module)."""
    return env_secret_values((params["runtime_env"] or {}).get("env_vars"), params["secret_names"] or ())
