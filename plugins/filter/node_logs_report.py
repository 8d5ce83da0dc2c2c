# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.node_logs_report``: what the per-node log gathering (verl_job node_logs.yml)
got from each node, from the looped results of ``rlinfra.verl.ray_node_logs`` (delegated to each host)
and of the fetch that brought each bundle back.

    {{ collected.results | rlinfra.verl.node_logs_report }}                  the action brought each bundle back
    {{ collected.results | rlinfra.verl.node_logs_report(fetched.results) }}  a separate fetch did
"""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import failure_causes


def _first_line(text, limit=300):
    lines = [ln.strip() for ln in str(text or "").splitlines() if ln.strip()]
    return (lines[0] if lines else "")[:limit]


def node_logs_report(collected, fetched=None, check_mode=False):
    """``{"hosts": {host: {status, files, truncated, redactions, skipped, job_id, driver_log, notes, error}},
    "lines": [one line per host], "ok": [hosts with a bundle], "job_id", "driver_hosts"}``. ``status`` is ``ok``, ``unreachable``,
    ``failed`` or, in check mode, ``planned``."""
    fetch_by_host = {}
    for res in fetched or []:
        if isinstance(res, dict) and res.get("item"):
            fetch_by_host[(res["item"] or {}).get("item") if isinstance(res["item"], dict) else res["item"]] = res
    hosts, lines, ok = {}, [], []
    for res in collected or []:
        if not isinstance(res, dict):
            continue
        host = res.get("item")
        entry = dict(
            status="ok",
            files=0,
            truncated=0,
            redactions=0,
            skipped=0,
            job_id=res.get("job_id"),
            driver_log=res.get("driver_log"),
            notes=list(res.get("notes") or []),
            error="",
        )
        files = res.get("files") or []
        if res.get("unreachable"):
            entry.update(status="unreachable", error=_first_line(res.get("msg")) or "unreachable")
        elif res.get("failed") or (not check_mode and not res.get("bundle")):
            entry.update(status="failed", error=_first_line(res.get("msg")) or "no bundle was made")
        else:
            entry.update(
                files=len(files),
                truncated=sum(1 for f in files if f.get("truncated")),
                redactions=int(res.get("redactions") or 0),
                skipped=len(res.get("skipped") or []),
            )
            if check_mode:
                entry["status"] = "planned"
            else:
                # The ray_node_logs action brings the bundle back itself (fetched / fetch_error in its result).
                fetch = (
                    fetch_by_host.get(host)
                    if fetched is not None
                    else ({} if res.get("fetched") else dict(failed=True, msg=res.get("fetch_error")))
                )
                if fetch is None or fetch.get("unreachable") or fetch.get("failed"):
                    entry.update(
                        status="failed",
                        error="the bundle could not be fetched: %s"
                        % (_first_line((fetch or {}).get("msg")) or "not fetched"),
                    )
        hosts[host] = entry
        if entry["status"] in ("ok", "planned"):
            if entry["status"] == "ok":
                ok.append(host)
            line = "%s: %d file(s)%s%s%s" % (
                host,
                entry["files"],
                " (would be collected)" if check_mode else "",
                ", %d cut to their tail" % entry["truncated"] if entry["truncated"] else "",
                ", %d value(s) masked" % entry["redactions"] if entry["redactions"] else "",
            )
            if entry["skipped"]:
                line += ", %d left out (size budget)" % entry["skipped"]
            if entry["notes"]:
                line += " - " + "; ".join(entry["notes"])
        else:
            line = "%s: %s - %s" % (host, entry["status"], entry["error"])
        lines.append(line)
    drivers = [h for h, e in hosts.items() if e["driver_log"]]
    if hosts and not drivers and any(e["status"] in ("ok", "planned") for e in hosts.values()):
        lines.append("no node had the job's driver log (the driver never started, or its node is not listed)")
    job_ids = sorted({e["job_id"] for e in hosts.values() if e.get("job_id")})
    return {
        "hosts": hosts,
        "lines": lines,
        "ok": ok,
        "job_id": job_ids[0] if len(job_ids) == 1 else None,
        "driver_hosts": drivers,
    }


TAIL_BYTES = 512 * 1024


def run_causes(collected, log_path="", step=None):
    """Why a run died, one line each (module_utils/verl/failure_causes.py): the causes in the driver's log saved at
    ``log_path`` on the controller (its last 512 KiB) - a full checkpoint volume (with the free space the nodes
    reported, ``at step N`` when known), CUDA out of memory, an NCCL timeout or lost connection - then each node's
    kernel events (Xid errors, uncorrectable memory errors, the OOM killer, links down). ``collected``: the looped
    results of rlinfra.verl.ray_node_logs."""
    results = [r for r in collected or [] if isinstance(r, dict) and not r.get("failed") and not r.get("unreachable")]
    volumes = {}
    for res in results:
        for vol in res.get("volumes") or []:
            if isinstance(vol, dict) and vol.get("free_bytes") is not None:
                volumes[vol["path"]] = min(vol["free_bytes"], volumes.get(vol["path"], vol["free_bytes"]))
    text = ""
    if log_path:
        try:
            with open(log_path, "rb") as handle:
                handle.seek(0, 2)
                handle.seek(max(0, handle.tell() - TAIL_BYTES))
                text = handle.read().decode("utf-8", "replace")
        except OSError:
            text = ""
    lines = []
    for cause in failure_causes.driver_log_causes(
        text, [dict(path=p, free_bytes=f) for p, f in sorted(volumes.items())]
    ):
        if step is not None and cause.startswith("the checkpoint volume ") and "): " in cause:
            head, tail = cause.split("): ", 1)
            cause = "%s) at step %s: %s" % (head, step, tail)
        lines.append(cause)
    for res in results:
        lines += failure_causes.kernel_causes(res.get("kernel_events") or [], str(res.get("item") or ""))
    return lines


class FilterModule:
    def filters(self):
        return {"node_logs_report": node_logs_report, "run_causes": run_causes}
