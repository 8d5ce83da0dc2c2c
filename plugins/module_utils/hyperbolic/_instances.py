# Copyright: (c) 2025, rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The Hyperbolic API's instance lists, read into records.

The top-level shape of a source's answer (``extract_items``; ``null_list_note`` for a null list), then one flat,
normalised record per instance (``normalize_instances``, from ``normalize_on_demand`` or ``normalize_marketplace``:
id, label, status, GPUs, region, price, SSH details through ``_ssh.py``), a bare-metal rental's nodes one record each
(``expand_nodes``), and the status filter (``status_is_wanted``). Pure functions. A private helper of the
``hyperbolic`` package: callers import these names from ``hyperbolic/client.py``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import loose_count
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._errors import (
    HyperbolicResponseError,
    _describe,
    _json_type,
    _one_line,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._ssh import (
    DEFAULT_SSH_PORT,
    DEFAULT_SSH_USER,
    _ssh_details,
    no_machine,
    valid_ssh_host,
    valid_ssh_user,
)

__all__ = [
    "null_list_note",
    "extract_items",
    "expand_nodes",
    "normalize_on_demand",
    "rented_name",
    "normalize_marketplace",
    "normalize_instances",
    "status_is_wanted",
]


def null_list_note(source: str, data: Any, where: str) -> str | None:
    """One warning when the instance list in an answer is null rather than a list: read as an account without
    instances, but said, since it is just as likely an API fault."""
    if (
        isinstance(data, dict)
        and any(k in data and data[k] is None for k in ("instances", "rentals", "data", "items"))
        and not any(isinstance(data.get(k), list) for k in ("instances", "rentals", "data", "items"))
    ):
        key = next(k for k in ("instances", "rentals", "data", "items") if k in data and data[k] is None)
        return "%s answer from %s holds %s: null, read as no instances" % (source, where, key)
    return None


def extract_items(source: str, data: Any, where: str = "answer") -> list[dict[str, Any]]:
    """Validate the top-level shape of a source's answer and return its list of items."""
    if source == "marketplace":
        expected = 'a JSON object {"instances": [...]}'
        if isinstance(data, dict):
            # {"instances": null} is an account without instances; an object without the key at
            # all (an error envelope answered with 200) is not
            items = data.get("instances", False)
            if items is None:
                items = []
        elif isinstance(data, list):  # tolerate a bare list
            items = data
        else:
            items = None
    else:
        expected = "a JSON array of rentals"
        if isinstance(data, dict):  # tolerate an envelope such as {"rentals": [...]} / {"data": [...]}
            items = None
            for key in ("rentals", "instances", "data", "items"):
                if isinstance(data.get(key), list):
                    items = data[key]
                    break
        else:
            items = data
    if not isinstance(items, list):
        raise HyperbolicResponseError(
            "unexpected %s answer from %s: expected %s, got %s" % (source, where, expected, _describe(data))
        )
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise HyperbolicResponseError(
                "unexpected %s answer from %s: item #%d is %s, not a JSON object"
                % (source, where, index, _json_type(item))
            )
    return items


# --------------------------------------------------------------------------------------


def _str(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return None


def _record(source, ident, label, status, gpu_type, gpu_count, region, ssh, cost_per_hour=None, **more):
    details, problem = ssh
    record = {
        "source": source,
        "id": ident,
        "label": label,
        "status": status,
        "gpu_type": gpu_type,
        "gpu_count": gpu_count,
        "region": region,
        "ssh": details,
        "cost_per_hour": cost_per_hour,
        "kind": more.get("kind") or "virtual-machine",
        "private_ip": more.get("private_ip"),
        "user_metadata": more.get("user_metadata"),
    }
    if problem:
        record["ssh_error"] = problem
    if more.get("nodes"):
        record["nodes"] = more["nodes"]
    return record


def _bare_metal_nodes(meta, default_user):
    """The nodes of an earlier-shape bare-metal rental (HyperbolicLabs' CLI ``OnDemandInstanceMeta``:
    ``node_networking`` [{public_ip, private_ip}], ``username``): one SSH address each, port 22. Entries without a
    usable public address are left out; ``[]`` when there is no such list. ValueError for a public address that names
    no machine or this one (no_machine): the rental is then left out whole, never a node short or on the controller."""
    networking = meta.get("node_networking")
    if not isinstance(networking, list):
        return []
    user = meta.get("username") if valid_ssh_user(meta.get("username") or "") else default_user
    nodes = []
    for index, entry in enumerate(networking):
        public = entry.get("public_ip") if isinstance(entry, dict) else None
        refused = no_machine(public) if isinstance(public, str) else ""
        if refused:
            raise ValueError("node_networking[%d] public_ip %s %s" % (index, _one_line(repr(public), 60), refused))
        if isinstance(public, str) and valid_ssh_host(public):
            private = entry.get("private_ip")
            nodes.append(
                {
                    "host": entry["public_ip"],
                    "port": DEFAULT_SSH_PORT,
                    "user": user,
                    "private_ip": private if isinstance(private, str) and valid_ssh_host(private) else None,
                }
            )
    return nodes


def expand_nodes(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per node: a bare-metal rental of several nodes becomes ``<label>-node<i>`` records (``node`` = i,
    the rental id unchanged, so releasing any of them releases the rental); every other record is kept as it is."""
    out = []
    for record in records:
        nodes = record.get("nodes") or []
        if len(nodes) < 2:
            out.append(record)
            continue
        base = record.get("label") or record.get("id")
        for index, node in enumerate(nodes):
            copy = dict(
                record,
                label="%s-node%d" % (base, index),
                node=index,
                private_ip=node.get("private_ip"),
                ssh={k: node[k] for k in ("host", "port", "user")},
            )
            copy.pop("ssh_error", None)
            out.append(copy)
    return out


def _cents_to_dollars(*values):
    for value in values:
        if isinstance(value, bool):
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and number >= 0:
            return round(number / 100.0, 4)
    return None


def normalize_on_demand(item: Any, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """One on-demand rental -> normalised record (see ``normalize_instances``), from either shape the public clients
    read (docs/INVENTORY.md): the current one (``label``, ``gpuType``, ``gpuCount``, ``providerData.sshNetworking``,
    ``currentTerm.costPerHourCents``, as claude-hyperbolic-guardrails and lisa-rtm read it) or the earlier
    ``/v2/marketplace`` one (``meta.ssh_command`` "ssh user@host -p port", ``meta.resources.gpus`` {model: {count}},
    ``meta.gpu_count``, ``meta.userMetadata``, ``costPerHour`` in cents, as SkyPilot's provisioner and HyperbolicLabs'
    CLI read it)."""
    provider = item.get("providerData") if isinstance(item.get("providerData"), dict) else {}
    meta = item.get("meta") if isinstance(item.get("meta"), dict) else {}
    resources: Any = meta.get("resources") if isinstance(meta.get("resources"), dict) else {}
    gpus = resources.get("gpus") if isinstance(resources.get("gpus"), dict) else {}
    model = next(iter(gpus), None)
    term = item.get("currentTerm") if isinstance(item.get("currentTerm"), dict) else {}
    kind = _str(meta.get("rental_type") or item.get("machineType") or provider.get("machineType")) or "virtual-machine"
    try:
        nodes, refused = (_bare_metal_nodes(meta, default_user) if kind == "bare-metal" else []), None
    except ValueError as exc:
        nodes, refused = [], str(exc)
    user_metadata = meta.get("userMetadata") if isinstance(meta.get("userMetadata"), dict) else None
    private_ip = meta.get("internal_ip") if isinstance(meta.get("internal_ip"), str) else None
    count = loose_count(item.get("gpuCount", provider.get("gpuCount")))
    if count is None:
        count = loose_count(meta.get("gpu_count"))
    if count is None and model is not None and isinstance(gpus.get(model), dict):
        count = loose_count(gpus[model].get("count"))
    return _record(
        "on_demand",
        _str(item.get("id")),
        _str(item.get("label") or item.get("name") or rented_name(meta) or meta.get("name")) or None,
        _str(item.get("status")) or ("terminated" if item.get("terminatedAt") else ""),
        _str(item.get("gpuType") or provider.get("gpuType") or model),
        count,
        _str(item.get("region") or provider.get("region")),
        (None, refused)
        if refused
        else _ssh_details(item, default_user, meta)
        if not nodes
        else ({k: nodes[0][k] for k in ("host", "port", "user")}, None),
        _cents_to_dollars(term.get("costPerHourCents"), item.get("costPerHour")),
        kind=kind,
        nodes=nodes,
        user_metadata=user_metadata,
        private_ip=private_ip
        if private_ip and valid_ssh_host(private_ip)
        else (nodes[0]["private_ip"] if nodes else None),
    )


def rented_name(item: Any) -> str | None:
    """The name this collection gave a marketplace instance it rented (``userMetadata.rlinfra.name``), else ''."""
    meta: Any = item.get("userMetadata") if isinstance(item.get("userMetadata"), dict) else {}
    ours = meta.get("rlinfra") if isinstance(meta.get("rlinfra"), dict) else {}
    return _str(ours.get("name"))


def normalize_marketplace(item: Any, default_user: str = DEFAULT_SSH_USER) -> dict[str, Any]:
    """One marketplace instance -> normalised record (see ``normalize_instances``)."""
    inst = item.get("instance") if isinstance(item.get("instance"), dict) else {}
    hardware: Any = inst.get("hardware") if isinstance(inst.get("hardware"), dict) else {}
    gpus = hardware.get("gpus") if isinstance(hardware.get("gpus"), list) else []
    models = [g.get("model") for g in gpus if isinstance(g, dict) and g.get("model")]
    gpu_count = loose_count(inst.get("gpu_count"))
    if gpu_count is None:
        gpu_count = loose_count(item.get("gpu_count"))
    if gpu_count is None and gpus:
        gpu_count = len(gpus)
    location: Any = inst.get("location") if isinstance(inst.get("location"), dict) else {}
    # No price: the instance listing's pricing is not documented in a known unit (the machines' listing, in cents per
    # GPU-hour, is where a rental's price is read: hyperbolic_rent records it when it rents).
    return _record(
        "marketplace",
        _str(item.get("id") or inst.get("id")),
        _str(item.get("label") or item.get("name") or inst.get("label") or rented_name(item)) or None,
        _str(inst.get("status") or item.get("status")) or "",
        _str(models[0]) if models else None,
        gpu_count,
        _str(location.get("region") or inst.get("region") or item.get("region")),
        _ssh_details(item, default_user, inst),
        user_metadata=item.get("userMetadata") if isinstance(item.get("userMetadata"), dict) else None,
    )


_NORMALIZERS = {"on_demand": normalize_on_demand, "marketplace": normalize_marketplace}


def normalize_instances(source: str, items: Any, default_user: str = DEFAULT_SSH_USER) -> list[dict[str, Any]]:
    """Normalise the raw items of one source.

    Each record: ``source``, ``id``, ``label`` (or None), ``status`` (as the API spells it),
    ``gpu_type``, ``gpu_count``, ``region``, ``ssh`` (``{"host","port","user"}`` or None), and
    ``ssh_error`` (why SSH details that were given are unusable) only when there is one.
    Raises HyperbolicResponseError on an answer that is not a list of objects, or an item
    without a usable id (nothing is half-parsed).
    """
    normalize = _NORMALIZERS[source]
    if not isinstance(items, list):
        raise HyperbolicResponseError("%s answer is %s, not a list of instances" % (source, _json_type(items)))
    records = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise HyperbolicResponseError("%s item #%d is %s, not a JSON object" % (source, index, _json_type(item)))
        record = normalize(item, default_user)
        if not record["id"]:
            raise HyperbolicResponseError(
                "%s item #%d has no usable id (got %s)" % (source, index, _describe(item.get("id")))
            )
        records.append(record)
    return records


def status_is_wanted(status: str | None, wanted: Collection[str]) -> bool:
    """Case-insensitive status filter.

    ``wanted`` is a collection of lower-case statuses; an empty one, or one holding ``*`` or
    ``all``, keeps every instance.
    """
    if not wanted or "*" in wanted or "all" in wanted:
        return True
    return (status or "").strip().lower() in wanted
