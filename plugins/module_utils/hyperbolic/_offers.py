# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What can be rented, and whether the account can pay for it.

A marketplace machine (``machine``) or an on-demand rental option (``option``) flattened; the cheapest that fit a
request picked (``choose``, ``choose_options``; when too few fit, one line counting what matched at each step); the
balance and the daily budget checked against the request's cost (``money``, ``dollars``). Pure functions. A private
helper of the ``hyperbolic`` package: callers import these names from ``hyperbolic/rent.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

__all__ = ["dollars", "machine", "choose", "option", "choose_options", "money"]


def _squash(text: object) -> str:
    return re.sub(r"[^A-Z0-9]", "", str(text or "").upper())


def dollars(cents: float) -> str:
    return "$%.2f" % (cents / 100.0)


def machine(item: Any) -> dict[str, Any] | None:
    """One machine of the marketplace listing, flattened; None when it is not an object with a node name."""
    if not isinstance(item, dict) or not item.get("id"):
        return None
    hardware: Any = item.get("hardware") if isinstance(item.get("hardware"), dict) else {}
    gpus = [g for g in hardware.get("gpus") or [] if isinstance(g, dict)]
    price: Any = ((item.get("pricing") or {}).get("price") or {}) if isinstance(item.get("pricing"), dict) else {}
    location: Any = item.get("location") if isinstance(item.get("location"), dict) else {}
    try:
        total = int(cast(Any, item.get("gpus_total")) if item.get("gpus_total") is not None else len(gpus))
        free = total - int(item.get("gpus_reserved") or 0)
        cents = float(price.get("amount")) if price.get("amount") is not None else None
    except (TypeError, ValueError):
        return None
    return dict(
        node=str(item["id"]),
        cluster=str(item.get("cluster_name") or ""),
        status=str(item.get("status") or ""),
        reserved=bool(item.get("reserved")),
        free=max(0, free),
        model=str(gpus[0].get("model") or "") if gpus else "",
        cents=cents,
        region=str(location.get("region") or ""),
    )


def choose(
    items: Iterable[Any] | None,
    count: int,
    gpu_model: str = "",
    gpu_count: int = 8,
    max_price: float | None = None,
    region: str = "",
) -> tuple[list[dict[str, Any]], str]:
    """Pick marketplace machines for ``count`` instances of ``gpu_count`` GPUs, cheapest first (a machine with room for
    two takes two). Returns ``(picks, why_not)``: picks are machine dicts, one per instance; why_not is '' when enough
    were found, else one line counting what matched at each step."""
    machines = [m for m in (machine(i) for i in items or []) if m]
    ready = [m for m in machines if m["status"] == "node_ready" and not m["reserved"]]
    model = [m for m in ready if not gpu_model or _squash(gpu_model) in _squash(m["model"])]
    roomy = [m for m in model if m["free"] >= gpu_count]
    placed = [m for m in roomy if not region or m["region"] == region]
    cheap = [m for m in placed if max_price is None or (m["cents"] is not None and m["cents"] / 100.0 <= max_price)]
    picks: list[dict[str, Any]] = []
    for m in sorted(
        cheap, key=lambda x: (x["cents"] if x["cents"] is not None else float("inf"), x["cluster"], x["node"])
    ):
        for _dummy in range(m["free"] // gpu_count):
            if len(picks) < count:
                picks.append(m)
    first = "%d machine(s) ready and not reserved" % len(ready)
    left = (len(model), len(roomy), len(placed), len(cheap))
    return picks, _why_not(
        "the marketplace has", first, left, " free", len(picks), count, gpu_count, gpu_model, region, max_price
    )


def _why_not(
    where: str,
    first: str,
    left: tuple[int, int, int, int],
    free: str,
    found: int,
    count: int,
    gpu_count: int,
    gpu_model: str,
    region: str,
    max_price: float | None,
) -> str:
    """'' when ``found`` covers ``count`` rentals; else one line counting what matched at each step: what ``where``
    lists (``first`` counts it), then how many were ``left`` after each filter asked for - the GPU model, the GPU count
    (``free``: how the listing counts them), the region and the price."""
    if found >= count:
        return ""
    model, sized, placed, cheap = left
    steps = [first]
    if gpu_model:
        steps.append("%d with %s GPUs" % (model, gpu_model))
    steps.append("%d with %d GPUs%s" % (sized, gpu_count, free))
    if region:
        steps.append("%d in region %s" % (placed, region))
    if max_price is not None:
        steps.append("%d at or under $%.2f per GPU-hour" % (cheap, max_price))
    what = "%d instance(s) of %d x %s GPU%s" % (
        count,
        gpu_count,
        gpu_model or "any",
        "" if region == "" else " in " + region,
    )
    return (
        "no machine matches: %s needed, %s %s, room for %d; nothing was rented - try another gpu_model, region or "
        "max_price, fewer nodes, or later" % (what, where, ", ".join(steps), found)
    )


def option(row: Any) -> dict[str, Any] | None:
    """One on-demand rental option, flattened; None when it is not an object with a GPU type, count and price."""
    if not isinstance(row, dict) or not isinstance(row.get("gpuType"), str):
        return None
    try:
        count, cents = int(cast(Any, row.get("gpuCount"))), float(cast(Any, row.get("costPerHourCents")))
        available = row.get("totalAvailable")
        available = None if available is None else int(available)  # absent means unknown, never zero
    except (TypeError, ValueError):
        return None
    return dict(
        gpu_type=row["gpuType"],
        gpu_count=count,
        region=str(row.get("region") or ""),
        cents=cents,
        enabled=row.get("enabled") is True,
        machine_type=str(row.get("machineType") or ""),
        available=available,
    )


def choose_options(
    rows: Iterable[Any] | None,
    count: int,
    gpu_model: str = "",
    gpu_count: int = 8,
    max_price: float | None = None,
    region: str = "",
    machine_type: str = "virtual-machine",
) -> tuple[list[dict[str, Any]], str]:
    """Pick on-demand options for ``count`` rentals of ``gpu_count`` GPUs, cheapest per GPU-hour first (an option with
    ``totalAvailable`` N takes at most N). Returns ``(picks, why_not)`` as :func:`choose` does."""
    options = [o for o in (option(r) for r in rows or []) if o]
    enabled = [o for o in options if o["enabled"] and o["machine_type"] == machine_type]
    model = [
        o
        for o in enabled
        if not gpu_model or _squash(gpu_model) in _squash(o["gpu_type"]) or _squash(o["gpu_type"]) in _squash(gpu_model)
    ]
    sized = [o for o in model if o["gpu_count"] == gpu_count]
    placed = [o for o in sized if not region or o["region"] == region]
    cheap = [o for o in placed if max_price is None or o["cents"] / 100.0 / o["gpu_count"] <= max_price]
    picks: list[dict[str, Any]] = []
    for o in sorted(cheap, key=lambda x: (x["cents"], x["region"], x["gpu_type"])):
        room = count if o["available"] is None else o["available"]
        while room > 0 and len(picks) < count:
            picks.append(o)
            room -= 1
    first = "%d enabled %s option(s)" % (len(enabled), machine_type)
    left = (len(model), len(sized), len(placed), len(cheap))
    return picks, _why_not(
        "the on-demand API offers", first, left, "", len(picks), count, gpu_count, gpu_model, region, max_price
    )


def money(
    balance: Mapping[str, Any],
    new_cents: float,
    min_hours: float = 1.0,
    existing_cents: float = 0.0,
    daily_budget: float | None = None,
    what: str = "",
) -> str:
    """'' when the account can pay for the request, else the one line that says why not. ``balance``: the balance
    endpoint's answer; ``new_cents``: the request's cost per hour (cents), ``existing_cents`` the rest of the
    cluster's; ``daily_budget``: dollars a day the whole cluster may cost."""
    have = float(balance.get("balanceCents") or 0) + float(balance.get("maxOverdraftCents") or 0)
    need = new_cents * float(min_hours)
    if have < need:
        return (
            "the balance, %s%s, does not cover %g hour(s) of this request (%s at %s/h = %s): add credit, rent "
            "fewer or cheaper machines, or lower hyperbolic_min_hours; nothing was rented"
            % (
                dollars(float(balance.get("balanceCents") or 0)),
                " with %s overdraft" % dollars(float(balance["maxOverdraftCents"]))
                if balance.get("maxOverdraftCents")
                else " and no overdraft",
                float(min_hours),
                what,
                dollars(new_cents),
                dollars(need),
            )
        )
    if daily_budget is not None and (new_cents + existing_cents) * 24 / 100.0 > daily_budget:
        return (
            "the cluster would cost %s a day (%s/h new%s), over daily_budget $%.2f: rent fewer or cheaper machines, "
            "or raise the budget; nothing was rented"
            % (
                dollars((new_cents + existing_cents) * 24),
                dollars(new_cents),
                " + %s/h already rented" % dollars(existing_cents) if existing_cents else "",
                daily_budget,
            )
        )
    return ""
