# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What a run cost: GPU-hours and dollars, from each node's hourly price as it was rented (host variables
``hyperbolic_cost_per_hour`` and ``hyperbolic_gpu_count``, set by provision.yml and the inventory plugin) and the
run's wall time (first attempt's start to the last one's end: recoveries included, the machines are paid for all
along). One rule, used by the summary and by the run report."""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

PRICE_VAR, GPUS_VAR = "hyperbolic_cost_per_hour", "hyperbolic_gpu_count"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def node_prices(hosts: Iterable[str] | None, hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{host, cost_per_hour, gpu_count}]`` of ``hosts``; None where a node's price or GPU count is unknown."""
    out = []
    for host in hosts or []:
        hv = hostvars[host] if host in hostvars else {}
        gpus = _number(hv.get(GPUS_VAR))
        out.append(
            dict(host=host, cost_per_hour=_number(hv.get(PRICE_VAR)), gpu_count=None if gpus is None else int(gpus))
        )
    return out


def iso_epoch(text: Any) -> float | None:
    """Epoch seconds of an ISO time (Ray's ``2024-05-01T10:00:00.000Z``; no zone is UTC), else None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.timestamp()


def run_seconds(waited: Mapping[str, Any] | None) -> float | None:
    """The run's wall time: from the first attempt's start to the last one's end when the attempts say both, else
    the wait's own ``duration_s``; None when neither is known."""
    rows = (waited or {}).get("attempts") or []
    starts = [iso_epoch(r.get("start_time")) for r in rows]
    ends = [iso_epoch(r.get("end_time")) for r in rows]
    if rows and all(s is not None for s in starts) and all(e is not None for e in ends):
        return max(0.0, max(cast("list[float]", ends)) - min(cast("list[float]", starts)))
    return _number((waited or {}).get("duration_s"))


def run_cost(nodes: Sequence[Mapping[str, Any]], seconds: float | None) -> dict[str, Any] | None:
    """``{seconds, gpu_hours, cost, cost_per_hour, priced, nodes}``: ``cost`` only when every node is priced (a partial
    sum would understate it), ``gpu_hours`` only when every GPU count is known; None without a duration."""
    if seconds is None or not nodes:
        return None
    hours = seconds / 3600.0
    prices = [n["cost_per_hour"] for n in nodes]
    gpus = [n["gpu_count"] for n in nodes]
    priced = sum(1 for p in prices if p is not None)
    every_price = priced == len(nodes)
    every_count = all(g is not None for g in gpus)
    return dict(
        seconds=round(seconds, 3),
        nodes=len(nodes),
        priced=priced,
        cost_per_hour=round(sum(prices), 4) if every_price else None,
        cost=round(sum(prices) * hours, 2) if every_price else None,
        gpu_hours=round(sum(gpus) * hours, 3) if every_count else None,
    )


def cost_line(cost: Mapping[str, Any] | None) -> str:
    """The summary's line: ``cost:          1.50 GPU-hours, $3.19 (2 nodes at $25.52/h for 0:03:45)``; '' when there
    is nothing to say (no duration, or neither prices nor GPU counts)."""
    if not cost or (cost["cost"] is None and cost["gpu_hours"] is None):
        return ""
    span = str(datetime.timedelta(seconds=int(round(cost["seconds"]))))
    gpu = "-" if cost["gpu_hours"] is None else "%.2f" % cost["gpu_hours"]
    if cost["cost"] is None:
        money = (
            "cost unknown (%d of %d node(s) priced: hosts not rented by provision.yml or listed by the inventory "
            "plugin carry no price)" % (cost["priced"], cost["nodes"])
        )
    else:
        money = "$%.2f (%d node(s) at $%.2f/h for %s)" % (cost["cost"], cost["nodes"], cost["cost_per_hour"], span)
    return "cost:          %s GPU-hours, %s" % (gpu, money)
