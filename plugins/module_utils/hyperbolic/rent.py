# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Renting and releasing Hyperbolic machines, through the collection's one client (hyperbolic.py), on either API.

``api="on_demand"`` (the default of the module): the current on-demand rental API, as the clients written for it use
it (claude-hyperbolic-guardrails ``server/index.ts``, lisa-rtm ``fast/hyperbolic.py``; docs/INVENTORY.md quotes them):

* ``GET /v2/on-demand/rental-options`` -> a bare array of options ``{enabled, machineType, gpuType, gpuCount, region,
  costPerHourCents (the whole option), totalAvailable?}``; an option is chosen by (gpuType, gpuCount, region).
* ``POST /v2/on-demand/virtual-machine-rentals`` with ``{gpuType, gpuCount, region, label, sshPublicKey?}`` -> the
  rental, ``Pending``; ``GET`` on the same path lists the account's rentals (a bare array: numeric ``id``, ``status``
  ``Pending``/``Running``/``Terminating``/``Terminated``, ``label``, ``currentTerm.costPerHourCents``,
  ``providerData.sshNetworking``). Rentals of the earlier ``/v2/marketplace`` shape (``meta.ssh_command``,
  ``meta.userMetadata``, ``costPerHour``) are read too (hyperbolic.normalize_on_demand).
* ``POST /v2/on-demand/virtual-machine-rentals/terminate`` with ``{"rentalId": <the numeric id>}``.

``api="marketplace"``: the v1 marketplace of HyperbolicLabs' agent kit and MCP server (``POST /v1/marketplace``,
``/v1/marketplace/instances/create`` with ``cluster_name``/``node_name`` and ``userMetadata``, ``GET
/v1/marketplace/instances``, ``/v1/marketplace/instances/terminate`` with ``{"id"}``).

What is ours: a rental labelled ``<label>-<n>`` (on-demand: the API keeps the label) or tagged ``userMetadata.rlinfra``
(marketplace, and the earlier v2 shape), or one whose id the caller's record lists. Money first: ``GET
/v2/customer/balance`` (``balanceCents``, ``maxOverdraftCents``; the v1 ``/billing/get_current_balance`` where that is
all there is) must cover ``min_hours`` of the whole request, and an optional daily budget the cluster's cost. A create
whose answer is lost is never retried: the rentals are listed again and one that appeared with its name is adopted.

Decisions are pure functions; ``Rent`` sequences the calls with an injectable clock, sleep and SSH probe.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    HyperbolicError,
    HyperbolicNotFound,
    extract_items,
    normalize_marketplace,
    normalize_on_demand,
    one_line,
)

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient

MACHINES_PATH = "/v1/marketplace"
CREATE_PATH = "/v1/marketplace/instances/create"
TERMINATE_PATH = "/v1/marketplace/instances/terminate"
INSTANCES_PATH = "/v1/marketplace/instances"
OPTIONS_PATH = "/v2/on-demand/rental-options"
RENTALS_PATH = "/v2/on-demand/virtual-machine-rentals"
OD_TERMINATE_PATH = "/v2/on-demand/virtual-machine-rentals/terminate"
BALANCE_PATH = "/v2/customer/balance"
LEGACY_BALANCE_PATH = "/billing/get_current_balance"
APIS = ("on_demand", "marketplace")
META_KEY = "rlinfra"
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
# A rental's bounds, for provision.yml's switches (module_utils/common/cli.py) and hyperbolic_instance's arguments alike.
MAX_INSTANCES = 256
MAX_GPUS = 64
# The highest max_price that still reads as a price (US dollars per GPU-hour): above it, a slip (2500 for 2.50).
MAX_PRICE = 1000
GONE = ("terminated", "terminating", "stopped", "deleted")
FAILED = ("failed", "error")
ONLINE = ("online", "running")
POLL_FIRST, POLL_MAX = 2.0, 10.0


class RentError(HyperbolicError):
    """One line saying what failed, what was released, and what to do."""


class Contradiction(RentError):
    """The API's answer contradicts itself (one id for two rentals): what is rented cannot be read from it."""


# What to do about a contradictory answer: only the provider's own view can tell the rentals apart.
CONSOLE = "check the label's rentals in Hyperbolic's console (the rentals list) and run again once each has its own id"


def check_label(label: object) -> str:
    """'' when ``label`` can tag instances (and name a Ray cluster and hosts), else why not."""
    if not isinstance(label, str) or not LABEL.match(label):
        return (
            "label must be 1-40 lower-case letters, digits and '-' (not at either end), got %r: it names the "
            "instances (<label>-0, <label>-1, ...), their Ray cluster and its hosts" % (label,)
        )
    return ""


def _squash(text: object) -> str:
    return re.sub(r"[^A-Z0-9]", "", str(text or "").upper())


def dollars(cents: float) -> str:
    return "$%.2f" % (cents / 100.0)


# ----------------------------------------------------------------------------------------------------------------
# What can be rented


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
    if len(picks) >= count:
        return picks, ""
    steps = ["%d machine(s) ready and not reserved" % len(ready)]
    if gpu_model:
        steps.append("%d with %s GPUs" % (len(model), gpu_model))
    steps.append("%d with %d GPUs free" % (len(roomy), gpu_count))
    if region:
        steps.append("%d in region %s" % (len(placed), region))
    if max_price is not None:
        steps.append("%d at or under $%.2f per GPU-hour" % (len(cheap), max_price))
    return picks, _no_match("the marketplace has", count, gpu_count, gpu_model, region, steps, len(picks))


def _no_match(
    where: str, count: int, gpu_count: int, gpu_model: str, region: str, steps: Iterable[str], found: int
) -> str:
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
    if len(picks) >= count:
        return picks, ""
    steps = ["%d enabled %s option(s)" % (len(enabled), machine_type)]
    if gpu_model:
        steps.append("%d with %s GPUs" % (len(model), gpu_model))
    steps.append("%d with %d GPUs" % (len(sized), gpu_count))
    if region:
        steps.append("%d in region %s" % (len(placed), region))
    if max_price is not None:
        steps.append("%d at or under $%.2f per GPU-hour" % (len(cheap), max_price))
    return picks, _no_match("the on-demand API offers", count, gpu_count, gpu_model, region, steps, len(picks))


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


# ----------------------------------------------------------------------------------------------------------------
# What is ours


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


def created_id(answer: Any) -> str:
    """The new rental's id from the create answer, '' when it names none."""
    if not isinstance(answer, dict):
        return ""
    inst: Any = answer.get("instance") if isinstance(answer.get("instance"), dict) else {}
    for value in (
        answer.get("instance_name"),
        answer.get("instanceName"),
        answer.get("instance_id"),
        answer.get("id"),
        inst.get("id"),
    ):
        if value not in (None, ""):
            return str(value)
    return ""


def ssh_banner(host: str, port: int | str, timeout: float = 5.0) -> str:
    """'' when ``host:port`` answers with an SSH banner, else why not."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256)
    except (OSError, ValueError) as exc:
        return "SSH at %s:%s: %s" % (host, port, one_line(exc, 120))
    return (
        "" if banner.startswith(b"SSH-") else "SSH at %s:%s answered %r, not an SSH banner" % (host, port, banner[:40])
    )


# ----------------------------------------------------------------------------------------------------------------
# The two APIs behind one sequence


class Marketplace:
    """The v1 marketplace: machines, instances on them, terminate by instance id."""

    name = "marketplace"

    def __init__(self, client: HyperbolicClient):
        self.client = client

    def listing(self) -> list[dict[str, Any]]:
        data = self.client.request_json("GET", INSTANCES_PATH)
        return extract_items("marketplace", data, self.client.api_url + INSTANCES_PATH)

    def plan(
        self, need: int, gpu_model: str, gpu_count: int, max_price: float | None, region: str, machine_type: str
    ) -> tuple[list[dict[str, Any]], str]:
        data = self.client.request_json("POST", MACHINES_PATH, {"filters": {}})
        if not isinstance(data, dict) or not isinstance(data.get("instances"), list):
            raise HyperbolicError('the marketplace listing (POST %s) is not {"instances": [...]}' % MACHINES_PATH)
        picks, why = choose(data["instances"], need, gpu_model, gpu_count, max_price, region)
        return [
            dict(
                where="%s/%s" % (m["cluster"], m["node"]),
                cluster_name=m["cluster"],
                node_name=m["node"],
                gpu_type=m["model"],
                gpu_count=gpu_count,
                region=m["region"],
                cents_per_hour=(m["cents"] or 0) * gpu_count,
                price_per_gpu_hour=(m["cents"] or 0) / 100.0,
            )
            for m in picks
        ], why

    def create(self, offer: Mapping[str, Any], label: str, name: str, ssh_public_key: str) -> str:
        body = {
            "cluster_name": offer["cluster_name"],
            "node_name": offer["node_name"],
            "gpu_count": offer["gpu_count"],
            "userMetadata": {META_KEY: {"label": label, "name": name}},
        }
        return created_id(self.client.request_json("POST", CREATE_PATH, body, retry=False))

    def terminate(self, ident: str) -> None:
        self.client.request_json("POST", TERMINATE_PATH, {"id": ident})

    def view(self, item: Mapping[str, Any], label: str) -> dict[str, Any]:
        return _view(normalize_marketplace(item), item, label)


class OnDemand:
    """The on-demand rental API: options, rentals labelled with their names, terminate by the numeric id."""

    name = "on_demand"

    def __init__(self, client: HyperbolicClient):
        self.client = client

    def listing(self) -> list[dict[str, Any]]:
        data = self.client.request_json("GET", RENTALS_PATH)
        return extract_items("on_demand", data, self.client.api_url + RENTALS_PATH)

    def plan(
        self, need: int, gpu_model: str, gpu_count: int, max_price: float | None, region: str, machine_type: str
    ) -> tuple[list[dict[str, Any]], str]:
        rows = self.client.request_json("GET", OPTIONS_PATH)
        if not isinstance(rows, list):
            raise HyperbolicError("the on-demand options (GET %s) are not a JSON array" % OPTIONS_PATH)
        picks, why = choose_options(rows, need, gpu_model, gpu_count, max_price, region, machine_type)
        if machine_type == "bare-metal" and not why:
            # The options list bare-metal rows, but no public client rents them through this API (docs/INVENTORY.md):
            # a guessed route could rent something unintended, so say what exists and how to use it instead.
            return [], (
                "the on-demand API lists %d matching bare-metal option(s) (cheapest %s at $%.2f/h) but no "
                "public client documents a route to rent them: rent bare metal in Hyperbolic's console, then "
                "list it with the inventory plugin (one host per node)"
                % (
                    len(picks),
                    "%s x %s in %s" % (picks[0]["gpu_count"], picks[0]["gpu_type"], picks[0]["region"]),
                    picks[0]["cents"] / 100.0,
                )
            )
        return [
            dict(
                where="%s x %s in %s" % (o["gpu_count"], o["gpu_type"], o["region"]),
                gpu_type=o["gpu_type"],
                gpu_count=o["gpu_count"],
                region=o["region"],
                cents_per_hour=o["cents"],
                price_per_gpu_hour=round(o["cents"] / 100.0 / o["gpu_count"], 4),
            )
            for o in picks
        ], why

    def create(self, offer: Mapping[str, Any], label: str, name: str, ssh_public_key: str) -> str:
        # region always: left out, it defaults to a disabled one (lisa-rtm's REGION_DISABLED note).
        body = {"gpuType": offer["gpu_type"], "gpuCount": offer["gpu_count"], "region": offer["region"], "label": name}
        if ssh_public_key:
            body["sshPublicKey"] = ssh_public_key.strip()
        return created_id(self.client.request_json("POST", RENTALS_PATH, body, retry=False))

    def terminate(self, ident: str) -> None:
        # The numeric id, not the string rentalId field: the API refuses anything else ("expected number").
        number = int(ident) if str(ident).isdigit() else ident
        self.client.request_json("POST", OD_TERMINATE_PATH, {"rentalId": number})

    def view(self, item: Mapping[str, Any], label: str) -> dict[str, Any]:
        return _view(normalize_on_demand(item), item, label)


def _view(record: Mapping[str, Any], item: Mapping[str, Any], label: str) -> dict[str, Any]:
    """What a play needs of one rental: name, id, status, SSH address, GPUs, region, price (dollars an hour, when the
    API says)."""
    ssh = record.get("ssh") or {}
    view = dict(
        name=name_of(item, label) or record["id"],
        id=record["id"],
        status=status_of(item),
        host=ssh.get("host") or "",
        port=ssh.get("port") or 22,
        user=ssh.get("user") or "",
        gpu_model=record.get("gpu_type") or "",
        gpu_count=record.get("gpu_count"),
        region=record.get("region") or "",
        cost_per_hour=record.get("cost_per_hour"),
    )
    if record.get("ssh_error"):  # SSH details given but refused (a loopback host): the wait's line says why
        view["ssh_error"] = record["ssh_error"]
    return view


BACKENDS: dict[str, type[OnDemand] | type[Marketplace]] = {"on_demand": OnDemand, "marketplace": Marketplace}


# ----------------------------------------------------------------------------------------------------------------
# The sequence


class Rent:
    """Rent (present) or release (absent) the rentals of one label, on ``api`` (on_demand or marketplace)."""

    def __init__(
        self,
        client: HyperbolicClient,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        probe: Callable[[str, int | str], str] = ssh_banner,
        log: Callable[[str], None] | None = None,
        api: str = "marketplace",
        record_ids: Iterable[object] = (),
    ):
        if api not in BACKENDS:
            raise HyperbolicError("api must be one of %s, got %r" % (", ".join(APIS), api))
        self.client, self.sleep, self.clock, self.probe = client, sleep, clock, probe
        self.api = BACKENDS[api](client)
        self.record_ids = list(record_ids or ())
        self.log = log or (lambda line: None)
        self._made: list[str]
        self._label, self._made = "", []

    def ours(self, label: str, check: bool = True) -> list[dict[str, Any]]:
        """The label's rentals (module-level :func:`ours`); :class:`Contradiction` when the listing gives two of them
        one id, unless ``check`` is false (looking one up by name, or waiting for released ids to go)."""
        found = ours(self.api.listing(), label, self.record_ids)
        twice = listed_twice(found, label) if check else ""
        if twice:
            raise Contradiction(twice)
        return found

    def views(self, items: Iterable[Mapping[str, Any]], label: str) -> list[dict[str, Any]]:
        return [self.api.view(i, label) for i in items]

    def balance(self) -> dict[str, Any]:
        """The account's balance: the current endpoint, else the v1 one (credits, in cents, no overdraft)."""
        try:
            data = self.client.request_json("GET", BALANCE_PATH)
        except HyperbolicNotFound:
            data = self.client.request_json("GET", LEGACY_BALANCE_PATH)
            data = (
                {"balanceCents": (data or {}).get("credits"), "maxOverdraftCents": 0}
                if isinstance(data, dict)
                else None
            )
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("balanceCents"), (int, float))
            or isinstance(data.get("balanceCents"), bool)
        ):
            raise HyperbolicError(
                'the balance (GET %s) is not {"balanceCents": N, ...}: not renting without knowing it' % BALANCE_PATH
            )
        return data

    def present(
        self,
        label: str,
        count: int,
        gpu_model: str = "",
        gpu_count: int = 8,
        max_price: float | None = None,
        region: str = "",
        wait: bool = True,
        timeout: float = 900,
        keep_partial: bool = False,
        check_mode: bool = False,
        min_hours: float = 1.0,
        daily_budget: float | None = None,
        machine_type: str = "virtual-machine",
        ssh_public_key: str = "",
        replace: Iterable[object] = (),
    ) -> dict[str, Any]:
        result: dict[str, Any]
        result = dict(changed=False, rented=[], released=[], would_rent=[], extra=0, api=self.api.name, replaced=[])
        self._label, self._made = label, []  # the names this call asks the API to rent, whatever ids it answers
        try:
            return self._present(
                result,
                label,
                count,
                gpu_model,
                gpu_count,
                max_price,
                region,
                wait,
                timeout,
                keep_partial,
                check_mode,
                min_hours,
                daily_budget,
                machine_type,
                ssh_public_key,
                replace,
            )
        except Contradiction as exc:
            # Counted from such an answer, one rental would pass for two (or two for one): what this call rented is
            # released, and what it cannot tell apart is said.
            why = str(exc) + (
                "; released %s to replace them" % ", ".join(result["replaced"]) if result["replaced"] else ""
            )
            self._give_up(result, keep_partial, why, advice=CONSOLE)

    def _present(
        self,
        result,
        label,
        count,
        gpu_model,
        gpu_count,
        max_price,
        region,
        wait,
        timeout,
        keep_partial,
        check_mode,
        min_hours,
        daily_budget,
        machine_type,
        ssh_public_key,
        replace,
    ):
        have = self.ours(label)
        replaced = []
        if replace:
            # Unfit machines given back first; what is rented then takes their names again (<label>-<n>, the lowest
            # free number), so the inventory's hosts keep their names on new machines.
            replaced = self._replace(label, have, [str(r) for r in replace], check_mode, timeout)
            result["replaced"] = replaced
            have = [i for i in have if str(i.get("id")) not in replaced] if check_mode else self.ours(label)
        need = max(0, count - len(have))
        result.update(changed=need > 0 or bool(replaced), released=list(replaced), extra=max(0, len(have) - count))
        if need:
            plan, why = self.api.plan(need, gpu_model, gpu_count, max_price, region, machine_type)
            if why:
                raise RentError(why)
            for name, item in zip(names(have, label, need), plan):
                item["name"] = name
            new_cents = sum(p["cents_per_hour"] for p in plan)
            existing = sum(v["cost_per_hour"] or 0 for v in self.views(have, label)) * 100
            why = money(
                self.balance(),
                new_cents,
                min_hours,
                existing,
                daily_budget,
                "%d x %s" % (need, plan[0]["where"] if len(set(p["where"] for p in plan)) == 1 else "machines"),
            )
            if why:
                raise RentError(why)
            result["cost_per_hour"] = round((new_cents + existing) / 100.0, 4)
            if check_mode:
                result.update(would_rent=plan, instances=self.views(have, label))
                return result
            self._create(label, plan, result, keep_partial, ssh_public_key, have)
        if not wait or check_mode:
            result["instances"] = self.views(self.ours(label), label)
            return result
        result["instances"] = self._wait(label, result, timeout, keep_partial)
        return result

    def _replace(self, label, have, ids, check_mode, timeout):
        """Release ``ids`` (rentals of ``label``) and wait until the API no longer lists them; the ids released."""
        mine = {str(i.get("id")): name_of(i, label) for i in have}
        foreign = [i for i in ids if i not in mine]
        if foreign:
            raise RentError(
                "replace names %s, which %s not a rental of label %s (its rentals: %s); nothing was released "
                "or rented"
                % (
                    ", ".join(foreign),
                    "is" if len(foreign) == 1 else "are",
                    label,
                    ", ".join("%s (%s)" % (k, v) for k, v in sorted(mine.items())) or "none",
                )
            )
        if check_mode:
            return list(ids)
        released, failures, dummy = self.release(ids)
        if failures:
            raise RentError(
                "could not release %s to replace them (released %s): run again, or release them in "
                "Hyperbolic's console - they cost money; nothing was rented"
                % ("; ".join(failures), ", ".join(released) or "nothing")
            )
        self.log("released %s to replace them" % ", ".join("%s (%s)" % (i, mine[i]) for i in released))
        deadline = self.clock() + timeout
        pause = POLL_FIRST
        while any(str(i.get("id")) in released for i in self.ours(label, check=False)):
            if self.clock() >= deadline:
                raise RentError(
                    "released %s to replace them, but the API still lists them after %ss: nothing was "
                    "rented; run again" % (", ".join(released), timeout)
                )
            self.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)
        return released

    def _create(self, label, plan, result, keep_partial, ssh_public_key, have=()):
        prices = result.setdefault("prices", {})  # dollars an hour, by name, as rented (the record keeps them)
        named = {str(i.get("id")): name_of(i, label) or "another rental" for i in have}  # id -> the rental it names
        for item in plan:
            prices[item["name"]] = round(item["cents_per_hour"] / 100.0, 4)
            self._made.append(item["name"])
            try:
                ident = self.api.create(item, label, item["name"], ssh_public_key)
            except HyperbolicError as exc:
                # The answer may be lost while the rental took effect (a timeout, a dropped connection, a 5xx after
                # the request went out): never asked again; the listing says whether it exists, and then it is ours.
                ident = self._find(label, item["name"])
                if ident and ident not in named:
                    result["rented"].append(ident)
                    named[ident] = item["name"]
                    self.log(
                        "the answer to renting %s was lost (%s); the listing shows it as %s: adopted"
                        % (item["name"], one_line(exc, 200), ident)
                    )
                    continue
                if not ident:
                    self._give_up(
                        result, keep_partial, "renting %s (%s) failed: %s" % (item["name"], item["where"], exc)
                    )
            ident = ident or self._find(label, item["name"])
            if not ident:
                why = (
                    "the API accepted renting %s but names no rental, and the listing shows none called so"
                    % item["name"]
                )
                self._give_up(result, keep_partial, why)
            if ident in named:
                self._twice(label, item["name"], ident, named, result, keep_partial)
            result["rented"].append(ident)
            named[ident] = item["name"]
            self.log("rented %s as %s (%s)" % (ident, item["name"], item["where"]))

    def _twice(self, label, name, ident, named, result, keep_partial):
        """Fail for a rental the API gave an id it had given another: the one it made under ``name`` is released
        with the rest when the listing shows it under an id of its own, and said when it does not."""
        found = self._find(label, name)
        if found and found not in named:
            result["rented"].append(found)  # this call's: released with the rest, counted once
        self._give_up(
            result,
            keep_partial,
            "the API named rental %s for %s, the id it had given %s: the provider's "
            "answer is contradictory (one id, two rentals)" % (ident, name, named[ident]),
            advice=CONSOLE,
        )

    def _find(self, label, name):
        try:
            return next((str(i.get("id")) for i in self.ours(label, check=False) if name_of(i, label) == name), "")
        except HyperbolicError:
            return ""

    def _give_up(self, result: dict[str, Any], keep_partial: bool, why: str, advice: str = "") -> NoReturn:
        """Release what this call rented (unless told to keep it), then fail with one line saying so. With
        ``advice`` (the API contradicted itself, so the ids this call holds may not be all it made), the listing is
        read once more and says which of this call's rentals are still there."""
        rented = list(dict.fromkeys(result["rented"]))
        advice = " - %s" % advice if advice else ""
        if not rented:
            tail = "nothing was rented"
            if advice and self._made:  # the API may have made a rental it named by another's id
                tail = self._left("no rental of this call has an id of its own to release")
            raise RentError("%s; %s%s" % (why, tail, advice))
        if keep_partial:
            raise RentError(
                "%s; kept what this call rented (keep_partial): %s - run again to complete, or release "
                "it with state=absent (teardown.yml -e release=true)%s" % (why, ", ".join(rented), advice)
            )
        released, failures, dummy = self.release(rented)
        result["released"] = released
        tail = "released what this call rented: %s" % (", ".join(released) or "nothing")
        if failures:
            tail += "; could NOT release %s: release them in Hyperbolic's console, they cost money" % "; ".join(
                failures
            )
        if advice:
            tail = self._left(tail)
        raise RentError("%s; %s%s" % (why, tail, advice))

    def _left(self, tail):
        """``tail``, and which rentals this call made the listing still shows (by name): after a contradictory
        answer, the ids released may not have been all of them."""
        try:
            listed = self.ours(self._label, check=False)
        except HyperbolicError as exc:
            return "%s; the listing could not be read again (%s): look for %s in Hyperbolic's console" % (
                tail,
                one_line(exc, 120),
                ", ".join(self._made),
            )
        left = [
            "%s (%s)" % (name_of(i, self._label), i.get("id")) for i in listed if name_of(i, self._label) in self._made
        ]
        if not left:
            return "%s; the listing shows none of %s now" % (tail, ", ".join(self._made))
        one = len(left) == 1
        return "%s; the API still lists %s: release %s in Hyperbolic's console, %s money" % (
            tail,
            ", ".join(left),
            "it" if one else "them",
            "it costs" if one else "they cost",
        )

    def _wait(self, label, result, timeout, keep_partial):
        deadline = self.clock() + timeout
        pause, last = POLL_FIRST, "no answer yet"
        while True:
            views = self.views(self.ours(label), label)
            failed = [v for v in views if v["status"] in FAILED]
            if failed:
                self._give_up(
                    result,
                    keep_partial,
                    "instance(s) %s ended %s"
                    % (", ".join(v["name"] for v in failed), "/".join(sorted({v["status"] for v in failed}))),
                )
            # Running is not ready until SSH details come with it (SkyPilot's lesson): then a banner must answer.
            pending = [v for v in views if v["status"] not in ONLINE or not v["host"]]
            if not pending:
                problems = [p for p in (self.probe(v["host"], v["port"]) for v in views) if p]
                if not problems:
                    return views
                last = "; ".join(problems)
            else:
                last = ", ".join(
                    "%s is %s%s"
                    % (
                        v["name"],
                        v["status"] or "unknown",
                        ", its SSH details refused (%s)" % v["ssh_error"]
                        if v.get("ssh_error") and not v["host"]
                        else "",
                    )
                    for v in pending
                )
            if self.clock() >= deadline:
                self._give_up(result, keep_partial, "not ready after %ss: %s" % (timeout, last))
            self.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)

    def release(self, ids: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
        """Terminate ``ids``; returns (released, failures, notes). A rental the API no longer knows, or knows as
        terminated already, counts as released, with a note."""
        released, failures, notes = [], [], []
        for ident in ids:
            try:
                self.api.terminate(ident)
                released.append(ident)
                self.log("released %s" % ident)
            except HyperbolicNotFound:
                released.append(ident)
                notes.append("%s was not found (already gone)" % ident)
            except HyperbolicError as exc:
                text = str(exc)
                if re.search(r"ALREADY_TERMINATED|already terminated|RENTAL_NOT_FOUND|not found", text, re.I):
                    released.append(ident)
                    notes.append("%s was already terminated" % ident)
                else:
                    failures.append("%s (%s)" % (ident, exc))
        return released, failures, notes

    def absent(self, label: str, check_mode: bool = False, timeout: float = 300) -> dict[str, Any]:
        try:
            # Not refused when one id is listed for two rentals: releasing is the safe way, and the wait below holds
            # the call until the listing shows none of the label's, under any id.
            have = self.ours(label, check=False)
        except HyperbolicNotFound as exc:  # a retired API rents nothing any more, so nothing of ours is there
            return dict(
                changed=False,
                released=[],
                would_release=[],
                rented=[],
                api=self.api.name,
                notes=["the %s API answered 404 (%s): nothing to release there" % (self.api.name, one_line(exc, 200))],
            )
        ids = list(dict.fromkeys(str(i.get("id")) for i in have))
        twice = listed_twice(have, label)
        result: dict[str, Any]
        result = dict(
            changed=bool(ids),
            released=[],
            would_release=ids if check_mode else [],
            rented=[],
            notes=[twice + "; each id is released once"] if twice else [],
            api=self.api.name,
        )
        if check_mode or not ids:
            return result
        released, failures, notes = self.release(ids)
        result.update(released=released, notes=result["notes"] + notes)
        if failures:
            raise RentError(
                "could not release %s (released %s): run again, or release them in Hyperbolic's console - "
                "they cost money" % ("; ".join(failures), ", ".join(released) or "nothing")
            )
        deadline = self.clock() + timeout
        pause = POLL_FIRST
        while self.ours(label, check=False):
            if self.clock() >= deadline:
                raise RentError(
                    "released %s, but the API still lists instance(s) of %s after %ss: check Hyperbolic's "
                    "console" % (", ".join(released), label, timeout)
                )
            self.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)
        return result
