# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Renting and releasing Hyperbolic machines, through the collection's one client (client.py), on either API.

``api="on_demand"`` (the default of the module): the current on-demand rental API, as the clients written for it use
it (claude-hyperbolic-guardrails ``server/index.ts``, lisa-rtm ``fast/hyperbolic.py``; docs/INVENTORY.md quotes them):

* ``GET /v2/on-demand/rental-options`` -> a bare array of options ``{enabled, machineType, gpuType, gpuCount, region,
  costPerHourCents (the whole option), totalAvailable?}``; an option is chosen by (gpuType, gpuCount, region).
* ``POST /v2/on-demand/virtual-machine-rentals`` with ``{gpuType, gpuCount, region, label, sshPublicKey?}`` -> the
  rental, ``Pending``; ``GET`` on the same path lists the account's rentals (a bare array: numeric ``id``, ``status``
  ``Pending``/``Running``/``Terminating``/``Terminated``, ``label``, ``currentTerm.costPerHourCents``,
  ``providerData.sshNetworking``). Rentals of the earlier ``/v2/marketplace`` shape (``meta.ssh_command``,
  ``meta.userMetadata``, ``costPerHour``) are read too (client.normalize_on_demand).
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

The parts live in private helpers of the package, and callers import their names from this file: ``_offers.py``
(what can be rented, ``money``), ``_ours.py`` (which rentals are ours), ``_apis.py`` (``OnDemand``, ``Marketplace``).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._apis import (
    BACKENDS,
    BALANCE_PATH,
    LEGACY_BALANCE_PATH,
    Marketplace,
    OnDemand,
    created_id,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._offers import (
    choose,
    choose_options,
    dollars,
    machine,
    money,
    option,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._ours import (
    GONE,
    META_KEY,
    listed_twice,
    meta,
    name_of,
    names,
    ours,
    status_of,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import (
    HyperbolicError,
    HyperbolicNotFound,
    one_line,
)

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient

APIS = ("on_demand", "marketplace")
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
# A GPU model as a caller names it (H100, "RTX 4090"), for provision.yml's switch and hyperbolic_instance's argument.
GPU_MODEL = r"^[A-Za-z0-9][A-Za-z0-9 _.-]*$"
# A rental's bounds, for provision.yml's switches (module_utils/common/cli.py) and hyperbolic_instance's arguments alike.
MAX_INSTANCES = 256
MAX_GPUS = 64
# The highest max_price that still reads as a price (US dollars per GPU-hour): above it, a slip (2500 for 2.50).
MAX_PRICE = 1000
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
        with self._given_up_on_contradiction(result, keep_partial):
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

    @contextmanager
    def _given_up_on_contradiction(self, result: dict[str, Any], keep_partial: bool) -> Iterator[None]:
        """Counted from an answer that contradicts itself, one rental would pass for two (or two for one): what this
        call rented is released, and what it cannot tell apart is said."""
        try:
            yield
        except Contradiction as exc:
            why = str(exc) + (
                "; released %s to replace them" % ", ".join(result["replaced"]) if result["replaced"] else ""
            )
            self._give_up(result, keep_partial, why, advice=CONSOLE)

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


__all__ = [
    "APIS",
    "LABEL",
    "GPU_MODEL",
    "MAX_INSTANCES",
    "MAX_GPUS",
    "MAX_PRICE",
    "FAILED",
    "ONLINE",
    "POLL_FIRST",
    "POLL_MAX",
    "RentError",
    "Contradiction",
    "CONSOLE",
    "check_label",
    "ssh_banner",
    "Rent",
    # from _apis.py, _offers.py and _ours.py (the API paths stay _apis.py's own)
    "META_KEY",
    "GONE",
    "BACKENDS",
    "Marketplace",
    "OnDemand",
    "created_id",
    "dollars",
    "machine",
    "choose",
    "option",
    "choose_options",
    "money",
    "meta",
    "name_of",
    "status_of",
    "ours",
    "listed_twice",
    "names",
]
