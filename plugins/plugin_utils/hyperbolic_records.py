# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""From the Hyperbolic API's raw answers (fresh or cached) to the instances the ``rlinfra.verl.hyperbolic`` inventory
makes hosts of, and the warnings for every instance left out.

* The cache: ``CACHE_FORMAT`` (stored in every entry), ``cache_miss_reason`` (whether an entry may be used, and whether
  a miss deserves a warning), ``from_cache``. The cache stores the raw answers only, so a cached run gives the same
  inventory as the run that filled it.
* ``normalize``: validated records of every requested source, one per machine (an instance listed twice is one
  record when the copies agree, and left out when they do not), plus the warnings they call for.
* ``filter_records`` and ``select_records``: the ``statuses`` and ``name_pattern`` filters, then the instances
  without usable SSH details left out, each with its warning.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    HyperbolicError,
    expand_nodes,
    normalize_instances,
    one_line,
    status_is_wanted,
)
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_hosts import Record, display_name
from ansible_collections.rlinfra.verl.plugins.plugin_utils.hyperbolic_options import PLUGIN, shown

CACHE_FORMAT = 1
_MAX_SSH_WARNINGS = 5


def cache_miss_reason(cached: Any, api_url: str, sources: Iterable[str]) -> tuple[bool, str] | None:
    """None for a usable entry, ``(False, why)`` for a stale one, ``(True, why)`` for a broken one."""
    if not isinstance(cached, dict):
        return True, "it is %s, not a JSON object" % type(cached).__name__
    if "format" not in cached or not isinstance(cached.get("api_url"), str):
        return True, "it lacks format/api_url"
    if cached.get("format") != CACHE_FORMAT:
        return False, "written by another version"
    if cached["api_url"].rstrip("/") != api_url:
        return False, "api_url changed"
    have = cached.get("sources")
    skipped = cached.get("skipped", {})
    if not isinstance(have, dict) or not isinstance(skipped, dict):
        return True, "sources/skipped are not JSON objects"
    if not all(isinstance(v, str) for v in skipped.values()):
        return True, "skipped holds something other than messages"
    if not all(s in have or s in skipped for s in sources):
        return False, "a requested source is not cached"
    return None


def from_cache(
    cached: Any, api_url: str, sources: Sequence[str], default_user: str
) -> tuple[tuple[list[Record], list[str]] | None, str | None]:
    """``(result, problem)`` for a cache entry: ``result`` is ``normalize``'s answer when the entry is usable, else
    None; ``problem`` says why a broken entry is ignored (None for a usable or merely stale one)."""
    miss = cache_miss_reason(cached, api_url, sources)
    if miss is not None:
        return None, miss[1] if miss[0] else None
    try:
        return normalize(cached, sources, default_user), None
    except HyperbolicError as exc:
        return None, str(exc)


def normalize(raw: dict[str, Any], sources: Sequence[str], default_user: str) -> tuple[list[Record], list[str]]:
    """Validated records of every requested source, plus the warnings they call for.

    Raises HyperbolicError for an answer of the wrong shape, and when every source was skipped (HTTP 404).
    """
    skipped = raw.get("skipped") or {}
    records: list[Record] = []
    notes: list[str] = []
    for source in sources:
        note = (raw.get("notes") or {}).get(source)
        if isinstance(note, str):
            notes.append("%s: %s" % (PLUGIN, one_line(note, 300)))
    for source in sources:
        if source in skipped:
            notes.append("%s: source '%s' skipped: %s (retired API?)" % (PLUGIN, source, one_line(skipped[source])))
            continue
        items = raw["sources"][source]
        by_id: dict[Any, list[Record]] = {}
        for record in normalize_instances(source, items, default_user):
            by_id.setdefault(record["id"], []).append(record)
        for ident in sorted(by_id):
            copies = by_id[ident]
            if len(copies) > 1:
                differ = sorted({k for c in copies for k in c if c.get(k) != copies[0].get(k)})
                if differ:
                    # Two machines under one id, or one described two ways: either copy may be the wrong host.
                    notes.append(
                        "%s: %s instance %s is listed %d times with different %s: the provider's answer "
                        "is contradictory, so which machine it is cannot be known; left out - check the "
                        "rental in Hyperbolic's console"
                        % (PLUGIN, source, shown(ident), len(copies), ", ".join(differ))
                    )
                    continue
                # the same machine listed twice must not become two Ray nodes
                notes.append(
                    "%s: %s instance %s is listed %d times; using one" % (PLUGIN, source, shown(ident), len(copies))
                )
            records.extend(expand_nodes(copies[:1]))
    if all(s in skipped for s in sources):
        raise HyperbolicError(
            "every source answered HTTP 404 (%s); check api_url (or HYPERBOLIC_API_URL)"
            % ("; ".join("%s: %s" % (s, one_line(skipped[s], 120)) for s in sources))
        )
    return records, notes


def filter_records(
    records: Iterable[Record], statuses: Iterable[str] | None = None, name_pattern: str | None = None
) -> list[Record]:
    """Keep instances whose status is wanted and whose label (or id) matches ``name_pattern``."""
    wanted = {str(s).strip().lower() for s in (statuses or [])}
    out = []
    for record in records:
        if not status_is_wanted(record.get("status"), wanted):
            continue
        if name_pattern and not fnmatch.fnmatchcase(display_name(record), name_pattern):
            continue
        out.append(record)
    return out


def select_records(
    records: Sequence[Record], statuses: Sequence[str], name_pattern: str | None
) -> tuple[list[Record], list[str]]:
    """``(kept, warnings)``: the instances that pass the filters and have SSH details, and one warning for a filter
    that keeps none of them and for the instances left out for their SSH details (at most a few lines)."""
    warnings = []
    kept = filter_records(records, statuses, name_pattern)
    if records and not kept:
        # a misspelt status or pattern looks exactly like an empty account otherwise
        filters = ["statuses [%s]" % ", ".join(statuses)] if statuses else []
        filters += ["name_pattern %s" % shown(name_pattern)] if name_pattern else []
        seen = sorted({(r.get("status") or "").strip().lower() or "(none)" for r in records})
        warnings.append(
            "%s: none of the %d instance(s) passed %s; statuses seen: %s"
            % (PLUGIN, len(records), " and ".join(filters), one_line(", ".join(seen), 120))
        )
    broken = [r for r in kept if not r.get("ssh") and r.get("ssh_error")]
    for record in sorted(broken, key=lambda r: (r["source"], r["id"]))[:_MAX_SSH_WARNINGS]:
        warnings.append(
            "%s: instance %s (%s) left out: %s"
            % (PLUGIN, shown(record["id"]), record["source"], one_line(record["ssh_error"], 300))
        )
    if len(broken) > _MAX_SSH_WARNINGS:
        warnings.append(
            "%s: %d more instance(s) with unusable SSH details left out" % (PLUGIN, len(broken) - _MAX_SSH_WARNINGS)
        )
    unreachable = [r for r in kept if not r.get("ssh") and not r.get("ssh_error")]
    if unreachable:
        ids = ", ".join(shown(n, 40)[1:-1] for n in sorted(display_name(r) for r in unreachable)[:10])
        warnings.append(
            "%s: %d instance(s) without SSH details left out: %s%s"
            % (PLUGIN, len(unreachable), ids, " ..." if len(unreachable) > 10 else "")
        )
    return [r for r in kept if r.get("ssh")], warnings
