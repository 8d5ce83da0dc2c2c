# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The label record: which rentals a label owns, and what each costs an hour, kept where the rentals were made.

``{"label": "exp-a", "rentals": {"<id>": {"api", "name", "cost_per_hour", "gpu_type", "gpu_count", "region",
"rented_at"}}}``, 0600 in a 0700 directory (it holds no secret, only what the account rents). A rental the record lists
counts as the label's even where the API keeps no name; its price, taken when it was rented, is what a run's summary
multiplies by its hours. provision.yml keeps it on the controller and copies it to the cluster's head.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic


def read(path: str, label: str) -> dict[str, Any]:
    """The record at ``path`` for ``label`` ({} when there is none); ValueError, one line, when the file is damaged."""
    if not path:
        return {}
    try:
        with open(path) as handle:
            text = handle.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError("the record %s cannot be read (%s)" % (path, exc.strerror or exc)) from exc
    return parse(text, label, "the record %s" % path)


def parse(text: str, label: str, what: str) -> dict[str, Any]:
    """The record in ``text`` (``what`` names it in the error: a file, the head's copy); ValueError, one line."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(
            "%s cannot be read (%s): it is half-written or damaged; remove it (the API's names still say "
            "which rentals are ours)" % (what, exc)
        ) from exc
    if not isinstance(data, dict) or not isinstance(data.get("rentals"), dict):
        raise ValueError("%s is not a rentals record; remove it or name another file" % what)
    if data.get("label") != label:
        raise ValueError("%s is the record of label %r, not %r; name another file" % (what, data.get("label"), label))
    return data


def of_api(record: Mapping[str, Any] | None, api: str) -> dict[str, Any]:
    """The record with only its rentals on ``api``."""
    rentals = {
        i: r for i, r in ((record or {}).get("rentals") or {}).items() if isinstance(r, dict) and r.get("api") == api
    }
    return dict(record or {}, rentals=rentals) if record else {}


def merged(record: dict[str, Any], other: Mapping[str, Any] | None) -> dict[str, Any]:
    """One record from two copies (the controller's and the head's): every rental either lists, the first's entry
    where both do."""
    if not other:
        return record
    label = record.get("label") or other.get("label")
    return {"label": label, "rentals": dict(other.get("rentals") or {}, **(record.get("rentals") or {}))}


def write(path: str, record: Mapping[str, Any]) -> None:
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700)
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", 0o600)


def ids(record: Mapping[str, Any], api: str) -> list[str]:
    """The ids of the record's rentals on ``api``."""
    return [i for i, r in (record.get("rentals") or {}).items() if isinstance(r, dict) and r.get("api") == api]


def update(path: str, label: str, api: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The record after a call of hyperbolic_instance: the label's rentals as ``result`` found or made them (their
    prices: the plan's for new ones, the API's, else the record's), those it released gone; removed when empty."""
    record = read(path, label) or {"label": label, "rentals": {}}
    rentals = record["rentals"]
    for ident in result.get("released") or []:
        rentals.pop(str(ident), None)
    prices = result.get("prices") or {}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for view in result.get("instances") or []:
        # A name is one machine: an entry of the same name under another id is a rental the provider ended.
        for ident in [
            i
            for i, r in rentals.items()
            if i != str(view["id"]) and isinstance(r, dict) and r.get("name") == view["name"] and r.get("api") == api
        ]:
            rentals.pop(ident)
        old = rentals.get(str(view["id"])) or {}
        cost = view.get("cost_per_hour")
        if cost is None:
            cost = prices.get(view["name"], old.get("cost_per_hour"))
        rentals[str(view["id"])] = dict(
            api=api,
            name=view["name"],
            cost_per_hour=cost,
            gpu_type=view.get("gpu_model"),
            gpu_count=view.get("gpu_count"),
            region=view.get("region"),
            rented_at=old.get("rented_at") or now,
        )
    if not rentals:
        if os.path.exists(path):
            os.unlink(path)
        return record
    write(path, record)
    return record


def priced(instances: Iterable[dict[str, Any]], record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """``instances`` with the record's price where the API gave none."""
    rentals = (record or {}).get("rentals") or {}
    out = []
    for view in instances:
        if view.get("cost_per_hour") is None and isinstance(rentals.get(str(view["id"])), dict):
            view = dict(view, cost_per_hour=rentals[str(view["id"])].get("cost_per_hour"))
        out.append(view)
    return out
