# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""recovery.replace when the whole cluster is gone (its head included, where the run's supervisor lived): the
controller's ``submit.yml`` rents it again with ``provision.yml`` and resumes the run from the shared volume's
checkpoints (docs/ARCHITECTURE.md 3.8b, point 3).

Gone means the provider ended the head's rental: the API no longer lists the record's head (its first rental by
name, as provision.yml picks the head), whatever the inventory now makes of the rest. A head whose rental is still
listed (rebooting, its network down) is not rented again from here: the submit's reach says what is known and what
to do. The spec comes from the label's record on the controller
(what ``provision.yml`` rented: count, GPU model and count, region, API)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

# The submit's own switches: never passed to provision.yml, whose command line is read strictly.
SUBMIT_ONLY = ("exp", "run", "cluster", "dry_run", "wait", "checkpoint_cluster", "on_end")


def spec(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{nodes, gpu, gpu_count, region, api}`` of the label's record (its newest rental's model, count and region);
    None when the record names no rental."""
    rentals = [r for r in (record or {}).get("rentals", {}).values() if isinstance(r, dict)]
    if not rentals:
        return None
    first = sorted(rentals, key=lambda r: str(r.get("name") or ""))[0]
    return dict(
        nodes=len(set(str(r.get("name")) for r in rentals)),
        gpu=str(first.get("gpu_type") or "any"),
        gpu_count=int(first.get("gpu_count") or 8),
        region=str(first.get("region") or ""),
        api=str(first.get("api") or "on_demand"),
    )


def ceiling(record: Mapping[str, Any] | None) -> float | None:
    """Dollars a GPU-hour no new machine may pass: the dearest of the record's (as they were rented); None when the
    record names no price."""
    prices = [
        (r.get("cost_per_hour") or 0) / float(r.get("gpu_count") or 1)
        for r in ((record or {}).get("rentals") or {}).values()
        if isinstance(r, dict)
    ]
    return max(prices) + 1e-9 if prices and max(prices) > 0 else None  # a price equal to the record's is not dearer


def head_of(record: Mapping[str, Any] | None) -> str:
    """The name of the record's head: its first rental by name, as provision.yml (and the inventory plugin) pick it."""
    names = sorted(
        str(r.get("name") or "") for r in ((record or {}).get("rentals") or {}).values() if isinstance(r, dict)
    )
    return names[0] if names else ""


def gone(record: Mapping[str, Any] | None, listed_names: Collection[str]) -> str:
    """Why the cluster counts as gone ('' when it does not): the API no longer lists its head's rental. A worker missing
    alone is the run's supervisor's to replace (never rented twice from here)."""
    head = head_of(record)
    if head and head not in listed_names:
        return "the API no longer lists the rental of its head %s (terminated)" % head
    return ""


def provision_switches(label: str, wanted: Mapping[str, Any]) -> list[str]:
    """``-e`` switches of provision.yml that rent ``label`` again as ``wanted`` (:func:`spec`)."""
    out = [
        "label=%s" % label,
        "nodes=%d" % wanted["nodes"],
        "gpu=%s" % wanted["gpu"],
        "gpu_count=%d" % wanted["gpu_count"],
        "api=%s" % wanted["api"],
    ]
    if wanted["region"]:
        out.append("region=%s" % wanted["region"])
    return out


def without_submit_switches(pairs: Mapping[str, Any]) -> dict[str, Any]:
    """``{name: value}`` of a ``-e`` without the submit's own switches."""
    return dict((k, v) for k, v in pairs.items() if k not in SUBMIT_ONLY)


def summary_line(cluster: str, why: str, seconds: float, instances: Iterable[Mapping[str, Any]]) -> str:
    return (
        "cluster %s was gone (%s): rented again and converged with provision.yml in %ds (%s); the run resumes "
        "from the checkpoints on the shared volume"
        % (
            cluster,
            why,
            seconds,
            ", ".join("%s = rental %s" % (i.get("name"), i.get("id")) for i in instances) or "no machine listed",
        )
    )
