# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Which rentals are ours: those named ``<label>-<n>`` (on-demand keeps the label) or tagged ``userMetadata.rlinfra``
(``meta``, ``name_of``), or listed by id in the caller's record, and not gone (``ours``); an id the listing gives two
rentals (``listed_twice``); the next free names (``names``). Pure functions. A private helper of the ``hyperbolic``
package: callers import these names from ``hyperbolic/rent.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

META_KEY = "rlinfra"
GONE = ("terminated", "terminating", "stopped", "deleted")

__all__ = ["META_KEY", "GONE", "meta", "name_of", "status_of", "ours", "listed_twice", "names"]


def meta(item: Any) -> dict[str, Any]:
    """``userMetadata.rlinfra`` of a rental (top level as the v1 marketplace keeps it, or under ``meta`` in the earlier
    v2 shape); {} when there is none."""
    if not isinstance(item, dict):
        return {}
    holder: Any
    holder = (
        item
        if isinstance(item.get("userMetadata"), dict)
        else item.get("meta")
        if isinstance(item.get("meta"), dict)
        else {}
    )
    data: Any = holder.get("userMetadata") if isinstance(holder.get("userMetadata"), dict) else {}
    return data.get(META_KEY) if isinstance(data.get(META_KEY), dict) else {}


def name_of(item: Any, label: str) -> str:
    """The name this collection gave a rental of ``label`` (``<label>-<n>``), '' when it is not one of them."""
    tagged = meta(item)
    if tagged.get("label") == label:
        return str(tagged.get("name") or "")
    text: Any = item.get("label") if isinstance(item, dict) and isinstance(item.get("label"), str) else ""
    return text if re.match(r"^%s-[0-9]+$" % re.escape(label), text) else ""


def status_of(item: Any) -> str:
    inst = item.get("instance") if isinstance(item.get("instance"), dict) else {}
    return str(inst.get("status") or item.get("status") or "").lower()


def ours(items: Iterable[Any] | None, label: str, record_ids: Iterable[object] | None = ()) -> list[dict[str, Any]]:
    """The rentals of ``label`` that are not gone, sorted by name: named ``<label>-<n>`` (or tagged), or listed in the
    record by id. Others are never touched."""
    record_ids = {str(i) for i in record_ids or ()}
    found = [
        i
        for i in items or []
        if isinstance(i, dict) and (name_of(i, label) or str(i.get("id")) in record_ids) and status_of(i) not in GONE
    ]
    return sorted(found, key=lambda i: (name_of(i, label), str(i.get("id") or "")))


def listed_twice(items: Iterable[Mapping[str, Any]] | None, label: str) -> str:
    """The line naming each id ``items`` (one listing) gives more than one rental; '' when every id is one rental's."""
    by_id: dict[str, list[str]] = {}
    for item in items or []:
        by_id.setdefault(str(item.get("id")), []).append(name_of(item, label) or "no name")
    twice = {i: n for i, n in by_id.items() if len(n) > 1}
    if not twice:
        return ""
    return (
        "the API lists %s: the provider's answer is contradictory (one id, several rentals), so which machine %s "
        "cannot be known"
        % (
            "; ".join("rental %s %d times (as %s)" % (i, len(n), ", ".join(n)) for i, n in sorted(twice.items())),
            "is which" if len(twice) > 1 else "%s is" % next(iter(twice)),
        )
    )


def names(existing: Iterable[Any], label: str, count: int) -> list[str]:
    """``count`` new names ``<label>-<n>`` with the smallest numbers no existing instance uses."""
    used = {name_of(i, label) for i in existing}
    out: list[str]
    out, n = [], 0
    while len(out) < count:
        name = "%s-%d" % (label, n)
        if name not in used:
            out.append(name)
        n += 1
    return out
