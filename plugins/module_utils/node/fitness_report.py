# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""fitness.yml's verdict for one cluster: the table it prints, one line per failing node or pair, the unfit hosts,
and the JSON document kept under artifacts/fitness/. Decided from what the nodes (fitness_node), the head's
transfers (fitness_net) and the Ray job (fitness_ray) measured, against the thresholds."""

from __future__ import annotations

import json
import os
from typing import Any, Collection, Iterable, Mapping, Sequence

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.common.room import human
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_ray import table as allreduce_table

DEFAULTS = dict(min_gbit=1.0, ray_min_gbit=0.5, allreduce_min_busbw=1.0)
ARTIFACTS_VAR = "fitness_artifacts_dir"


def save(base: str, name: str, document: Any) -> str:
    """``document`` as JSON in ``<base>/<name>`` (0600; ``base`` made 0700 when missing); its path. A directory or a
    file that cannot be written is ValueError with the one line naming fitness_artifacts_dir."""
    path = os.path.join(base, name)
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
        files.write_atomic(path, json.dumps(document, indent=1, sort_keys=True, default=str) + "\n", 0o600)
    except OSError as e:
        raise ValueError(files.cannot_write(ARTIFACTS_VAR, base, "the fitness report %s" % name, e)) from e
    return path


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else ("%.2f%s" % (value, unit))


def verdict(
    cluster: str,
    head: str,
    nodes: Sequence[Mapping[str, Any]],
    links: Iterable[Any] | None,
    ray: Mapping[str, Any] | None,
    thresholds: Mapping[str, Any] | None = None,
    excluded: Iterable[str] = (),
    exclude_unfit: bool = False,
) -> dict[str, Any]:
    """``nodes``: [{host, ip, ifname, check}] (check: fitness_node's result or {"error"}); ``links``: fitness_net's;
    ``ray``: fitness_ray.parse's result, or {"error"}; ``excluded``: the workers left out by an earlier run (their
    Ray is stopped: not looked for in Ray's checks); ``exclude_unfit``: leave unfit workers out instead of failing.
    Returns {table, lines, unfit, document, exclude, readmit, reasons, failure, record, summary}."""
    excluded = set(excluded or ())
    t = dict(DEFAULTS, **{k: float(v) for k, v in (thresholds or {}).items() if v not in (None, "")})
    by_host = {n["host"]: n for n in nodes}
    by_ip = {n["ip"]: n["host"] for n in nodes}
    unfit: dict[str, list[str]]
    lines, unfit = [], {}

    def bad(host, line):
        lines.append(line)
        unfit.setdefault(host, []).append(line)

    # A node that dropped out of the run (unreachable, frozen) was not measured: one line for it, none for the links
    # and transfers that could not reach it.
    dropped = {n["host"] for n in nodes if (n.get("check") or {}).get("dropped")}
    skipped = excluded | dropped
    for n in nodes:
        check = n.get("check") or {}
        if check.get("error") or check.get("failed"):
            bad(n["host"], "%s: the node check failed: %s" % (n["host"], check.get("error") or check.get("msg")))
            continue
        for line in check.get("lines") or []:
            bad(n["host"], line)
    to_head = {}
    for link in links or []:
        src, dst = link["from"], link["to"]
        if src in dropped or dst in dropped:
            continue
        ifname = (by_host.get(src) or {}).get("ifname") or "?"
        if link.get("error"):
            bad(src, "%s -> %s: no transfer (%s)" % (src, dst, link["error"]))
        elif link["gbit"] < t["min_gbit"]:
            bad(
                src,
                "%s -> %s: %s Gbit/s over %s (threshold %g Gbit/s)"
                % (src, dst, _short(link["gbit"]), ifname, t["min_gbit"]),
            )
        if dst == head:
            to_head[src] = link
    objects = (ray or {}).get("objects") or []
    if (ray or {}).get("error"):
        if ray is None:  # never: (ray or {}) has an error (for the type checker)
            raise AssertionError("ray is set here")
        lines.append("cluster %s: the check through Ray failed: %s" % (cluster, ray["error"]))
        unfit.setdefault(head, []).append(lines[-1])
    for o in objects:
        src, dst = by_ip.get(o["from"], o["from"]), by_ip.get(o["to"], o["to"])
        if src in skipped or dst in skipped:
            continue
        if o.get("error"):
            bad(src, "%s -> %s through Ray's object store: %s" % (src, dst, o["error"]))
        elif o["gbit"] < t["ray_min_gbit"]:
            bad(
                src,
                "%s -> %s through Ray's object store: %s Gbit/s (threshold %g Gbit/s)"
                % (src, dst, _short(o["gbit"]), t["ray_min_gbit"]),
            )
    missing = sorted(set(by_ip) - {o["from"] for o in objects} - {o["to"] for o in objects}) if objects else []
    for ip in missing:
        if by_ip[ip] not in skipped:
            bad(by_ip[ip], "%s is not in the Ray cluster (its Ray node is not alive)" % by_ip[ip])
    allreduce = (ray or {}).get("allreduce") or {}
    if allreduce.get("error"):
        bad(head, "cluster %s: the %s all-reduce failed: %s" % (cluster, allreduce.get("backend"), allreduce["error"]))
    elif allreduce.get("rows") and allreduce.get("backend") == "nccl":
        best = max(r["busbw"] for r in allreduce["rows"])
        if best < t["allreduce_min_busbw"]:
            lines.append(
                "cluster %s: the NCCL all-reduce over %d GPUs reaches %.2f GB/s bus bandwidth (threshold %g GB/s): "
                "a slow or wrong interface between nodes (NCCL_SOCKET_IFNAME, NCCL_IB_HCA)"
                % (cluster, allreduce["world"], best, t["allreduce_min_busbw"])
            )
            unfit.setdefault(head, []).append(lines[-1])
    table = [
        "%-14s %-15s %-8s %10s %10s %5s %12s %12s  %s"
        % ("node", "address", "iface", "to head", "via Ray", "GPUs", "shared free", "scratch free", "verdict")
    ]
    for n in nodes:
        check = n.get("check") or {}
        gpu = check.get("gpu") or {}
        vols = {v.get("what"): v for v in check.get("volumes") or []}
        link = to_head.get(n["host"])
        via = [o["gbit"] for o in objects if o.get("gbit") is not None and by_ip.get(o["from"]) == n["host"]]
        table.append(
            "%-14s %-15s %-8s %10s %10s %5s %12s %12s  %s"
            % (
                n["host"][:14],
                n["ip"],
                (n.get("ifname") or "-")[:8],
                "head"
                if n["host"] == head
                else (_fmt(link.get("gbit")) + " Gb/s" if link and link.get("gbit") is not None else "-"),
                (_fmt(min(via)) + " Gb/s") if via else "-",
                "%s/%s" % (gpu.get("count", 0), gpu.get("expected", 0)) if gpu else "-",
                _free(vols.get("shared volume")),
                _free(vols.get("scratch volume")),
                ("UNFIT" if n["host"] in unfit else "ok") + (" (left out)" if n["host"] in excluded else ""),
            )
        )
    if allreduce.get("rows"):
        table += ["all-reduce (%s, %d ranks):" % (allreduce["backend"], allreduce["world"])] + allreduce_table(
            allreduce["rows"]
        )
    elif allreduce.get("skipped"):
        table.append("all-reduce: skipped (%s)" % allreduce["skipped"])
    document = dict(
        cluster=cluster,
        head=head,
        thresholds=t,
        nodes=nodes,
        links=links or [],
        ray=ray or {},
        unfit={h: unfit[h] for h in sorted(unfit)},
        fit=not unfit,
    )
    out = dict(table=table, lines=lines, unfit=sorted(unfit), document=document, reasons={h: unfit[h] for h in unfit})
    out.update(decide(cluster, head, unfit, excluded, exclude_unfit, [n["host"] for n in nodes]))
    return out


def decide(
    cluster: str,
    head: str,
    unfit: Mapping[str, list[str]],
    excluded: Collection[str],
    exclude_unfit: bool,
    hosts: Iterable[str],
) -> dict[str, Any]:
    """What to do about the unfit nodes: {exclude, readmit, failure, record, summary}. A head is never left out; a
    worker left out earlier comes back once it is fit."""
    exclude = (
        sorted(h for h in unfit if h != head)
        if exclude_unfit
        else sorted(h for h in unfit if h in excluded and h != head)
    )
    readmit = sorted(h for h in excluded if h not in unfit)
    blocking = {h: unfit[h] for h in unfit if h not in exclude}
    failure = ""
    if blocking:
        hint = (
            "fix it"
            if head in blocking
            else "fix them, or leave the unfit workers out with -e fitness_exclude_unfit=true (docs/FITNESS.md)"
        )
        failure = "cluster %s is not fit to train, %d unfit node(s): %s; %s" % (
            cluster,
            len(blocking),
            "; ".join(line for h in sorted(blocking) for line in blocking[h]),
            hint,
        )
    left = sorted(set(exclude))
    summary = [
        "Cluster %s: %s"
        % (
            cluster,
            "fit"
            if not blocking and not left
            else "UNFIT"
            if blocking
            else "fit without %s (left out)" % ", ".join(left),
        )
    ]
    summary += ["%s left out of the cluster: %s" % (h, "; ".join(unfit[h])) for h in left if h not in excluded]
    summary += ["%s stays left out: %s" % (h, "; ".join(unfit[h])) for h in left if h in excluded]
    summary += ["%s is fit again: site.yml starts its Ray" % h for h in readmit]
    record = dict(
        cluster=cluster,
        head=head,
        fit=not blocking,
        members=sorted(hosts),
        unfit={h: unfit[h] for h in sorted(unfit)},
        excluded={h: unfit.get(h, []) for h in left},
    )
    return dict(exclude=left, readmit=readmit, failure=failure, record=record, summary=summary)


def _short(gbit: float) -> str:
    return "%.3g" % gbit if gbit < 10 else "%.1f" % gbit


def _free(row: Mapping[str, Any] | None) -> str:
    if not row or row.get("free_bytes") is None:
        return "-"
    return human(row["free_bytes"])
