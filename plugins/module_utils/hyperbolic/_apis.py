# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The two Hyperbolic rental APIs behind ``Rent``'s one sequence: their paths, and one class each with the same methods
(``listing``, ``plan``, ``create``, ``terminate``, ``view``): ``OnDemand`` (``/v2/on-demand``: options, rentals
labelled with their names, terminate by the numeric id) and ``Marketplace`` (``/v1/marketplace``: machines, instances
tagged ``userMetadata.rlinfra``, terminate by instance id); ``BACKENDS`` maps ``api`` to the class. A private helper of
the ``hyperbolic`` package: callers import its classes from ``hyperbolic/rent.py``; the paths are this file's own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._errors import HyperbolicError
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._instances import (
    extract_items,
    normalize_marketplace,
    normalize_on_demand,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._offers import choose, choose_options
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic._ours import META_KEY, name_of, status_of

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

__all__ = [
    "MACHINES_PATH",
    "CREATE_PATH",
    "TERMINATE_PATH",
    "INSTANCES_PATH",
    "OPTIONS_PATH",
    "RENTALS_PATH",
    "OD_TERMINATE_PATH",
    "BALANCE_PATH",
    "LEGACY_BALANCE_PATH",
    "created_id",
    "Marketplace",
    "OnDemand",
    "BACKENDS",
]


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


# ----------------------------------------------------------------------------------------------------------------
# The two APIs behind one sequence


class _Api:
    """What the two APIs do alike: list the account's rentals (GET ``listing_path``) and view one of them (through
    ``normalize``, the API's shape of a rental)."""

    name = ""
    listing_path = ""
    normalize: Callable[[Any], dict[str, Any]]

    def __init__(self, client: HyperbolicClient):
        self.client = client

    def listing(self) -> list[dict[str, Any]]:
        data = self.client.request_json("GET", self.listing_path)
        return extract_items(self.name, data, self.client.api_url + self.listing_path)

    def view(self, item: Mapping[str, Any], label: str) -> dict[str, Any]:
        return _view(self.normalize(item), item, label)


class Marketplace(_Api):
    """The v1 marketplace: machines, instances on them, terminate by instance id."""

    name = "marketplace"
    listing_path = INSTANCES_PATH
    normalize = staticmethod(normalize_marketplace)

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


class OnDemand(_Api):
    """The on-demand rental API: options, rentals labelled with their names, terminate by the numeric id."""

    name = "on_demand"
    listing_path = RENTALS_PATH
    normalize = staticmethod(normalize_on_demand)

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
