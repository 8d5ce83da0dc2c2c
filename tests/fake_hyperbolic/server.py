"""A faithful fake of the Hyperbolic API endpoints the collection uses, in the shapes the public clients use
(docs/INVENTORY.md, "Where the API shapes come from", names the client and commit of each).

Serves (Bearer key required):

* the current on-demand API: ``GET /v2/on-demand/rental-options`` (bare array of options, as getcomputable/gpu-index
  captured it live), ``POST``/``GET /v2/on-demand/virtual-machine-rentals`` (a Pending rental with a numeric id,
  Running with ``providerData.sshNetworking`` after ``pending_polls`` listings; claude-hyperbolic-guardrails,
  lisa-rtm), ``POST .../terminate`` ``{"rentalId": <number>}``, ``GET /v2/customer/balance``; errors as
  ``{"code", "message", "issues"?}`` (hyperbolic-go's APIError): REGION_DISABLED, INSUFFICIENT_BALANCE,
  RENTAL_NOT_FOUND, ALREADY_TERMINATED, NO_CAPACITY;
* ``GET /v1/marketplace/instances`` -> ``{"instances": [...]}`` (id, sshCommand,
  instance.status, instance.gpu_count, instance.hardware.gpus[].model, ...), and the v1 marketplace's machines,
  create and terminate (agent kit, MCP server), ``GET /billing/get_current_balance``.

Faults it can inject: an on-demand create whose answer is lost after the rental was made (``lose_answer``), one
that gives a new rental the id of the one before (``repeat_id``), a balance too low (``set_balance``), a disabled
region, a long Pending (``pending_polls``), 401/403 (with the API's JSON ``detail`` message), 404 per source, the
next N requests answered 429 (with ``Retry-After``) or 5xx, slow answers, any raw body for a
source (malformed JSON, an HTML page, the wrong shape), and fleets of thousands of instances.
It counts requests so tests can assert a cache hit made none.

Loopback only (127.0.0.1), random port by default. Library use::

    with FakeHyperbolic(api_key="k") as fake:
        fake.set_fleet(100, clusters=["a", "b"])
        fake.fail_next(2, status=500)
        ... fake.url ... fake.request_count ...

CLI (from the repository root)::

    python -m tests.fake_hyperbolic.server --port 8765 --fleet 1000
    python -m tests.fake_hyperbolic.server --from-sandbox .sandbox/state.json \
        --write-inventory .sandbox/sandbox.hyperbolic.yml

Control endpoints for a server run as a separate process (no key needed, loopback only):
``GET /_fake/stats``, ``POST /_fake/reset``, ``POST /_fake/config`` (JSON: ``fail_next``,
``fail_status``, ``retry_after``, ``delay``, ``auth_status``, ``source_status``, ``fleet``,
``raw_body`` = {source: text}).
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ON_DEMAND_PATH = "/v2/on-demand/virtual-machine-rentals"
MARKETPLACE_PATH = "/v1/marketplace/instances"
PATHS = {ON_DEMAND_PATH: "on_demand", MARKETPLACE_PATH: "marketplace"}
# Renting on the current on-demand API (docs/INVENTORY.md names each shape's public source): options, the rental
# itself (create with POST on the list's path), terminate by the numeric rental id, and the account's balance.
OPTIONS_PATH = "/v2/on-demand/rental-options"
OD_TERMINATE_PATH = "/v2/on-demand/virtual-machine-rentals/terminate"
BALANCE_PATH = "/v2/customer/balance"
LEGACY_BALANCE_PATH = "/billing/get_current_balance"
DROP = 0  # a status meaning: close the connection without an answer (the answer to a create is lost)
# Renting (HyperbolicLabs' agent kit and MCP server; userMetadata as SkyPilot's client sends it).
MACHINES_PATH = "/v1/marketplace"
CREATE_PATH = "/v1/marketplace/instances/create"
TERMINATE_PATH = "/v1/marketplace/instances/terminate"
DEFAULT_KEY = "fake-hyperbolic-key"

_REASONS = {
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


# --------------------------------------------------------------------------------------
# Payload builders (the documented shapes)
# --------------------------------------------------------------------------------------
def on_demand_rental(
    ident,
    label,
    host,
    port=22,
    user="ubuntu",
    status="running",
    gpu_type="H100-SXM5-80GB",
    gpu_count=8,
    region="us-east-1",
):
    """One on-demand rental, as ``GET /v2/on-demand/virtual-machine-rentals`` lists it."""
    return {
        "id": ident,
        "status": status,
        "label": label,
        "gpuType": gpu_type,
        "gpuCount": gpu_count,
        "region": region,
        "created": "2025-06-01T12:00:00Z",
        "pricePerHour": 1.99 * (gpu_count or 1),
        "providerData": {
            "sshNetworking": [{"host": host, "port": port, "user": user}],
        },
    }


def rental_option(
    gpu_type="h100",
    gpu_count=8,
    region="us-east-1",
    cents=2552,
    enabled=True,
    machine_type="virtual-machine",
    available=None,
    form="sxm5",
    connection="ethernet",
):
    """One row of ``GET /v2/on-demand/rental-options`` (a bare array), as getcomputable/gpu-index captured it live
    (tests/fixtures/observatory/hyperbolic/rental_options.json): ``costPerHourCents`` prices the whole option."""
    row = {
        "enabled": enabled,
        "costPerHourCents": cents,
        "region": region,
        "gpuCount": gpu_count,
        "gpuType": gpu_type,
        "gpuFormFactor": form,
        "connectionType": connection,
        "machineType": machine_type,
        "nodes": [
            {
                "cpuModel": "Intel Xeon Platinum",
                "gpuCount": gpu_count,
                "ramGb": 240 * gpu_count,
                "storageGb": 720 * gpu_count,
                "vcpuCount": 20 * gpu_count,
            }
        ],
    }
    if connection == "ethernet":
        row["ethernetVariant"] = "normal"
    if available is not None:
        row["totalAvailable"] = available
    return row


def current_rental(
    ident,
    label,
    status="Running",
    host=None,
    port=22,
    user="ubuntu",
    gpu_type="h100",
    gpu_count=8,
    region="us-east-1",
    cents=2552,
):
    """One rental of ``GET /v2/on-demand/virtual-machine-rentals`` in the current API's shape, as the clients that read
    it use it (claude-hyperbolic-guardrails server/index.ts, lisa-rtm fast/hyperbolic.py): a numeric ``id`` (what
    terminate takes), a string ``rentalId``, capitalised statuses, ``currentTerm.costPerHourCents``, and
    ``providerData.sshNetworking`` once Running."""
    record = {
        "id": ident,
        "rentalId": "r%08x" % (ident * 2654435761 % 2**32),
        "status": status,
        "gpuType": gpu_type,
        "gpuCount": gpu_count,
        "region": region,
        "label": label,
        "createdAt": "2026-11-26 12:00:00.000+00",
        "startedAt": None,
        "currentTerm": {"costPerHourCents": cents},
        "providerData": {},
    }
    if host:
        record["startedAt"] = "2026-11-26 12:02:20.000+00"
        record["providerData"] = {
            "sshNetworking": [{"host": host, "port": port, "user": user}],
            "nodeNetworking": [{"publicIp": host}],
        }
    return record


def marketplace_v2_rental(
    ident,
    host,
    port=22,
    user="ubuntu",
    status="Running",
    gpu_model="h100-sxm5-80gb",
    gpu_count=8,
    cents=1592,
    user_metadata=None,
):
    """One rental of the earlier ``/v2/marketplace/virtual-machine-rentals`` API (SkyPilot's provisioner,
    HyperbolicLabs' CLI cmd/instances.go): ``meta.ssh_command`` ("ssh user@host -p port"), ``meta.resources.gpus``,
    ``meta.userMetadata`` and ``costPerHour`` in cents."""
    return {
        "id": ident,
        "createdAt": "2025-07-08 21:53:35.367+00",
        "startedAt": "2025-07-08 21:55:01.000+00",
        "terminatedAt": None,
        "externalId": "ext-%s" % ident,
        "costPerHour": cents,
        "status": status,
        "meta": {
            "name": "vm-%s" % ident,
            "rental_type": "virtual-machine",
            "gpu_count": gpu_count,
            "public_ip": host,
            "ssh_command": "ssh %s@%s -p %d" % (user, host, port),
            "resources": {
                "ram_gb": 180,
                "storage_gb": 850,
                "vcpu_count": 28,
                "gpus": {gpu_model: {"count": gpu_count}},
            },
            "userMetadata": user_metadata or {},
        },
    }


def marketplace_instance(
    ident,
    host,
    port=22,
    user="ubuntu",
    status="online",
    gpu_model="NVIDIA-H100-80GB-HBM3",
    gpu_count=8,
    region="us-central-1",
    port_first=False,
    label=None,
):
    """One marketplace instance, as ``GET /v1/marketplace/instances`` lists it."""
    if port_first:
        command = "ssh -p %d %s@%s" % (port, user, host)
    else:
        command = "ssh %s@%s -p %d" % (user, host, port)
    item = {
        "id": ident,
        "start": "2025-06-01T12:00:00Z",
        "end": None,
        "created": "2025-06-01T11:59:00Z",
        "sshCommand": command,
        "instance": {
            "id": "node-" + ident,
            "status": status,
            "gpu_count": gpu_count,
            "gpus_total": gpu_count,
            "hardware": {
                "gpus": [{"model": gpu_model, "ram": 81559} for _ in range(gpu_count or 0)],
                "cpus": [{"model": "AMD EPYC 9654", "virtual_cores": 16 * (gpu_count or 1)}],
                "ram": [{"capacity": 128 * 1024 * (gpu_count or 1)}],
            },
            "location": {"region": region},
            "pricing": {"price": {"amount": 1.49, "period": "hourly"}},
        },
    }
    if label is not None:
        item["label"] = label
    return item


def machine_item(
    node,
    cluster="us-central-1-a",
    gpus_total=8,
    gpus_reserved=0,
    model="NVIDIA-H100-80GB-HBM3",
    cents=199,
    region="us-central-1",
    status="node_ready",
    reserved=False,
):
    """One machine of ``POST /v1/marketplace`` (the agent kit's and MCP server's shape; price in cents per GPU-hour)."""
    return {
        "id": node,
        "cluster_name": cluster,
        "status": status,
        "reserved": reserved,
        "gpus_total": gpus_total,
        "gpus_reserved": gpus_reserved,
        "hardware": {
            "gpus": [{"model": model, "ram": 81559} for _ in range(gpus_total)],
            "cpus": [{"model": "AMD EPYC 9654", "virtual_cores": 16 * gpus_total}],
            "ram": [{"capacity": 128 * 1024 * gpus_total}],
            "storage": [{"capacity": 2000}],
        },
        "pricing": {"price": {"amount": cents, "period": "hourly"}},
        "location": {"region": region},
    }


def make_fleet(n, clusters=("default",), prefix="verl"):
    """A deterministic fleet of ``n`` running instances, alternating between the two sources.

    Even indexes are on-demand rentals labelled ``<prefix>-<cluster>-<i>``; odd ones are
    marketplace instances (no label, the same text as id) whose ``sshCommand`` alternates
    between ``ssh user@h -p P`` and ``ssh -p P user@h``. Ports vary (non-default ones included).
    """
    clusters = list(clusters) or ["default"]
    on_demand, marketplace = [], []
    for i in range(n):
        cluster = clusters[i % len(clusters)]
        name = "%s-%s-%05d" % (prefix, cluster, i)
        host = "10.%d.%d.%d" % ((i >> 16) & 255, (i >> 8) & 255, i & 255)
        port = 22 if i % 3 == 0 else 20000 + i % 10000
        if i % 2 == 0:
            on_demand.append(on_demand_rental("vm-%06d" % i, name, host, port=port))
        else:
            marketplace.append(marketplace_instance(name, host, port=port, port_first=(i % 4 == 3)))
    return on_demand, marketplace


def fleet_from_sandbox(state):
    """Instances for the sandbox's nodes: half on-demand rentals, half marketplace instances.

    ``state`` is the sandbox's ``state.json`` content:
    ``{"nodes": [{"name", "ip", "ssh_port", "user", "role"}, ...], "ssh_key": "/abs/key"}``.
    Node names become labels (on-demand) or ids (marketplace), so host names match the sandbox.
    """
    on_demand, marketplace = [], []
    for i, node in enumerate(state.get("nodes") or []):
        name = node["name"]
        host = node.get("ip") or node.get("host")
        port = int(node.get("ssh_port") or 22)
        user = node.get("user") or "ubuntu"
        if i % 2 == 0:
            on_demand.append(
                on_demand_rental(
                    "vm-sbx-%03d" % i,
                    name,
                    host,
                    port=port,
                    user=user,
                    gpu_type="CPU-ONLY",
                    gpu_count=0,
                    region="sandbox",
                )
            )
        else:
            marketplace.append(
                marketplace_instance(
                    name,
                    host,
                    port=port,
                    user=user,
                    gpu_model=None,
                    gpu_count=0,
                    region="sandbox",
                    port_first=(i % 4 == 3),
                )
            )
    return on_demand, marketplace


def sandbox_inventory_yaml(state, url):
    """A ready ``*.hyperbolic.yml`` for the sandbox (the key still comes from the environment)."""
    nodes = state.get("nodes") or []
    heads = [n["name"] for n in nodes if n.get("role") == "head"]
    lines = [
        "# Generated by tests/fake_hyperbolic/server.py --from-sandbox; key from HYPERBOLIC_API_KEY",
        "plugin: rlinfra.verl.hyperbolic",
        "api_url: %s" % json.dumps(url),
        "retries: 1",
        "retry_backoff: 0.1",
    ]
    if heads:
        lines.append("head_selector: %s" % json.dumps(heads[0]))
    # What the sandbox's static inventory sets for all hosts: its nodes have no network, so they
    # install from the wheelhouse on /data only.
    lines += [
        "compose:",
        "  ansible_python_interpreter: \"'/usr/bin/python3'\"",
        '  python_env_offline: "true"',
        "  python_env_wheelhouse: \"'/data/wheelhouse'\"",
    ]
    if state.get("ssh_key"):
        lines.append("  ansible_ssh_private_key_file: %s" % json.dumps(repr(str(state["ssh_key"]))))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------
# State and server
# --------------------------------------------------------------------------------------
class FakeHyperbolic:
    """The fake API: state, fault injection, request counting, and the HTTP server."""

    def __init__(self, api_key=DEFAULT_KEY, host="127.0.0.1", port=0):
        if host not in ("127.0.0.1", "localhost", "::1") and not ipaddress.ip_address(host).is_private:
            raise ValueError("the fake Hyperbolic API binds loopback or a private test network's address only")
        self.api_key = api_key
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._server = None
        self._thread = None
        self.auth_message = "Invalid API key"
        self.reset()

    # ---------------------------------------------------------------- state
    def reset(self):
        """Empty fleet, no faults, counters at zero."""
        with self._lock:
            self.on_demand = []
            self.marketplace = []
            self._bodies = {}
            self.source_status = {}  # source -> forced HTTP status (e.g. 404)
            self.raw_bodies = {}  # source -> (status, bytes) answered instead of the fleet
            self.auth_status = None  # 401/403 for every request, whatever the key
            self._fail_queue = []  # [(status, retry_after)] for the next requests
            self.delay = 0.0  # seconds before every answer
            self._delay_count = None  # only the next N answers are slow (None = all)
            self.machines = []  # POST /v1/marketplace
            self.host_pool = []  # [(host, port, user)] handed to rented instances, in order
            self.rented = []  # instances created through the API: {"item", "polls_left", "node", "gpus", "host"}
            self.ready_after = 1  # listings an instance answers "creating" before "online"
            self.create_faults = {}  # create number (1-based) -> (status, detail)
            self.fail_status_after = {}  # create number -> status the instance ends in ("failed") instead of online
            self.creates = 0
            self.terminated = []  # ids, in order
            # The on-demand API.
            self.options = []  # GET /v2/on-demand/rental-options rows
            self.balance = {"balanceCents": 100000, "maxOverdraftCents": 0}
            self.od_rentals = []  # {"record", "polls_left", "host", "option"}: rentals made through the API
            self.od_ids = itertools.count(18001)
            self.od_creates = 0
            self.od_terminated = []  # numeric ids, in order
            self.od_bodies = []  # the create bodies, as sent
            # Called with (host, port, user) of each terminated rental, outside the lock: a test wipes that machine
            # (a released instance is gone; a sandbox container is not).
            self.on_terminate = None
            self._released = []
            self.pending_polls = 1  # listings a new rental answers Pending before Running
            self.lost_answers = set()  # create numbers (1-based) whose answer is lost once the rental exists
            self.repeated_ids = {}  # create number (1-based) -> whether the listing too gives the previous id
            self.disabled_regions = {"us-central-1"}  # the default region, disabled (lisa-rtm's REGION_DISABLED)
            self._ids = itertools.count(1)
            self._reset_counters()

    def _reset_counters(self):
        self.request_count = 0
        self.requests = []  # [(method, path, status, authorization_ok)]

    def reset_stats(self):
        with self._lock:
            self._reset_counters()

    def set_instances(self, on_demand=None, marketplace=None):
        with self._lock:
            if on_demand is not None:
                self.on_demand = list(on_demand)
            if marketplace is not None:
                self.marketplace = list(marketplace)
            self._bodies = {}

    def set_fleet(self, n, clusters=("default",), prefix="verl"):
        self.set_instances(*make_fleet(n, clusters=clusters, prefix=prefix))

    def load_sandbox(self, state):
        self.set_instances(*fleet_from_sandbox(state))

    def fail_next(self, n, status=500, retry_after=None):
        """Answer the next ``n`` API requests with ``status`` (429 gets ``Retry-After``)."""
        with self._lock:
            self._fail_queue.extend([(int(status), retry_after)] * int(n))

    def set_delay(self, seconds, count=None):
        """Delay answers by ``seconds``; only the next ``count`` ones when given."""
        with self._lock:
            self.delay = float(seconds)
            self._delay_count = count

    def set_source_status(self, source, status):
        """Force a status (e.g. 404) for one source; ``None`` restores it."""
        with self._lock:
            if status is None:
                self.source_status.pop(source, None)
            else:
                self.source_status[source] = int(status)

    def set_raw_body(self, source, body, status=200):
        """Answer ``source`` with exactly ``body`` (text or bytes); ``None`` restores the fleet."""
        with self._lock:
            if body is None:
                self.raw_bodies.pop(source, None)
            else:
                self.raw_bodies[source] = (int(status), body.encode() if isinstance(body, str) else bytes(body))

    def set_machines(self, machines, host_pool=None):
        """The marketplace listing, and the SSH addresses rented instances get (sandbox containers in tests)."""
        with self._lock:
            self.machines = [dict(m) for m in machines]
            if host_pool is not None:
                self.host_pool = [tuple(h) for h in host_pool]

    def fail_create(self, number, status=500, detail="upstream error (injected)"):
        """Answer the ``number``-th create (1-based, counted since reset) with ``status``."""
        with self._lock:
            self.create_faults[int(number)] = (int(status), detail)

    def set_options(self, rows, host_pool=None):
        """The on-demand rental options, and the SSH addresses new rentals get (sandbox containers in tests)."""
        with self._lock:
            self.options = [dict(r) for r in rows]
            if host_pool is not None:
                self.host_pool = [tuple(h) for h in host_pool]

    def set_balance(self, cents, overdraft=0):
        with self._lock:
            self.balance = {"balanceCents": cents, "maxOverdraftCents": overdraft}

    def lose_answer(self, number):
        """The ``number``-th on-demand create (1-based) makes the rental, then the connection drops unanswered."""
        with self._lock:
            self.lost_answers.add(int(number))

    def repeat_id(self, number, listed=True):
        """The ``number``-th on-demand create (1-based) answers the id of the rental made before it (a contradictory
        API): with ``listed``, the listing gives the new rental that id too (two rentals, one id); without, the new
        rental is listed under an id of its own."""
        with self._lock:
            self.repeated_ids[int(number)] = bool(listed)

    def active_rentals(self):
        with self._lock:
            return [r["record"] for r in self.od_rentals if r["record"]["status"] != "Terminated"]

    @staticmethod
    def _error(status, code, message, issues=None):
        # hyperbolic-go's APIError carries Code, Message and Issues: the body a client reads them from.
        return status, {}, dict({"code": code, "message": message}, **({"issues": issues} if issues else {}))

    def _od_create(self, body):
        self.od_creates += 1
        self.od_bodies.append(dict(body))
        gpu_type, gpu_count, region = body.get("gpuType"), body.get("gpuCount"), body.get("region") or "us-central-1"
        if not isinstance(gpu_type, str) or not isinstance(gpu_count, int) or isinstance(gpu_count, bool):
            return self._error(
                400, "BAD_REQUEST", "Input validation failed", ["gpuType: expected string", "gpuCount: expected number"]
            )
        if region in self.disabled_regions:
            return self._error(400, "REGION_DISABLED", "Region %s is disabled" % region)
        option = next(
            (
                o
                for o in self.options
                if o.get("enabled")
                and o.get("machineType") == "virtual-machine"
                and o.get("gpuType") == gpu_type
                and o.get("gpuCount") == gpu_count
                and o.get("region") == region
            ),
            None,
        )
        if option is None or option.get("totalAvailable") == 0:
            return self._error(409, "NO_CAPACITY", "No %d x %s available in %s" % (gpu_count, gpu_type, region))
        cost = option["costPerHourCents"]
        if self.balance["balanceCents"] + self.balance["maxOverdraftCents"] < cost:
            return self._error(
                402,
                "INSUFFICIENT_BALANCE",
                "Insufficient balance: %d cents, %d needed for an hour" % (self.balance["balanceCents"], cost),
            )
        if not self.host_pool:
            return self._error(503, "NO_CAPACITY", "no capacity left to start an instance")
        if option.get("totalAvailable") is not None:
            option["totalAvailable"] -= 1
        ident = next(self.od_ids)
        repeated = (
            self.od_rentals[-1]["record"]["id"] if self.od_creates in self.repeated_ids and self.od_rentals else None
        )
        if repeated is not None and self.repeated_ids[self.od_creates]:
            ident = repeated
        label = (
            body.get("label") if isinstance(body.get("label"), str) and body.get("label") else "soft-apricot-%d" % ident
        )
        record = current_rental(
            ident, label, status="Pending", gpu_type=gpu_type, gpu_count=gpu_count, region=region, cents=cost
        )
        self.od_rentals.append(
            {"record": record, "polls_left": self.pending_polls, "host": self.host_pool.pop(0), "option": option}
        )
        if self.od_creates in self.lost_answers:
            return DROP, {}, b""
        return 200, {}, dict(record, id=repeated) if repeated is not None else dict(record)

    def _od_listing(self):
        """The static rentals plus those made here: Pending for ``pending_polls`` listings, then Running with their
        SSH details; Terminated ones leave the list."""
        items = list(self.on_demand)
        for entry in self.od_rentals:
            record = entry["record"]
            if record["status"] == "Pending":
                if entry["polls_left"] > 0:
                    entry["polls_left"] -= 1
                else:
                    host, port, user = entry["host"]
                    running = current_rental(
                        record["id"],
                        record["label"],
                        "Running",
                        host,
                        port,
                        user,
                        record["gpuType"],
                        record["gpuCount"],
                        record["region"],
                        record["currentTerm"]["costPerHourCents"],
                    )
                    record.update(running, rentalId=record["rentalId"])
            if record["status"] != "Terminated":
                items.append(record)
        return items

    def _od_terminate(self, body):
        rid = body.get("rentalId")
        if not isinstance(rid, int) or isinstance(rid, bool):
            return self._error(
                400, "BAD_REQUEST", "Input validation failed", ["rentalId: expected number, received NaN"]
            )
        entry = next((r for r in self.od_rentals if r["record"]["id"] == rid), None)
        if entry is None:
            return self._error(404, "RENTAL_NOT_FOUND", "Rental %d not found" % rid)
        if entry["record"]["status"] == "Terminated":
            return self._error(409, "ALREADY_TERMINATED", "Rental %d is already terminated" % rid)
        entry["record"]["status"] = "Terminated"
        self.host_pool.append(entry["host"])
        self._released.append(entry["host"])
        if entry["option"].get("totalAvailable") is not None:
            entry["option"]["totalAvailable"] += 1
        self.od_terminated.append(rid)
        return 200, {}, {"message": "Rental successfully terminated", "rentalId": rid}

    def add_hosts(self, hosts):
        """More machines the API can hand out (``[(host, port, user)]``), after those left in the pool."""
        with self._lock:
            self.host_pool.extend(tuple(h) for h in hosts)

    def provider_terminates(self, rid):
        """The provider ends on-demand rental ``rid`` on its own (the machine is gone for good): it is listed no more,
        and its host is not handed out again."""
        with self._lock:
            entry = next(r for r in self.od_rentals if r["record"]["id"] == rid)
            entry["record"]["status"] = "Terminated"

    def rented_items(self):
        with self._lock:
            return [r["item"] for r in self.rented]

    def _machine(self, node, cluster):
        return next((m for m in self.machines if m["id"] == node and m.get("cluster_name") == cluster), None)

    def _create(self, body):
        self.creates += 1
        fault = self.create_faults.get(self.creates)
        if fault:
            return fault[0], {}, {"detail": fault[1]}
        cluster, node, gpus = body.get("cluster_name"), body.get("node_name"), body.get("gpu_count")
        if not cluster or not node or not isinstance(gpus, int) or gpus < 1:
            return 400, {}, {"detail": "cluster_name, node_name and a positive gpu_count are required"}
        found = self._machine(node, cluster)
        if found is None:
            return 404, {}, {"detail": "node %s not found in cluster %s" % (node, cluster)}
        if found["gpus_total"] - found["gpus_reserved"] < gpus:
            return 400, {}, {"detail": "Not enough GPUs available on %s" % node}
        if not self.host_pool:
            return 503, {}, {"detail": "no capacity left to start an instance"}
        host, port, user = self.host_pool.pop(0)
        found["gpus_reserved"] += gpus
        ident = "fake-instance-%04d" % next(self._ids)
        item = marketplace_instance(
            ident,
            host,
            port=port,
            user=user,
            status="creating",
            gpu_count=gpus,
            gpu_model=found["hardware"]["gpus"][0]["model"],
            region=found["location"]["region"],
        )
        item["userMetadata"] = body.get("userMetadata") if isinstance(body.get("userMetadata"), dict) else {}
        ending = self.fail_status_after.get(self.creates)
        self.rented.append(
            {
                "item": item,
                "polls_left": self.ready_after,
                "node": found,
                "gpus": gpus,
                "host": (host, port, user),
                "ssh": item.pop("sshCommand"),
                "ending": ending,
            }
        )
        return 200, {}, {"status": "success", "instance_name": ident}

    def _terminate(self, body):
        ident = body.get("id")
        entry = next((r for r in self.rented if r["item"]["id"] == ident), None)
        if entry is None:
            return 404, {}, {"detail": "instance %s not found" % ident}
        self.rented.remove(entry)
        entry["node"]["gpus_reserved"] -= entry["gpus"]
        self.host_pool.append(entry["host"])
        self._released.append(entry["host"])
        self.terminated.append(ident)
        return 200, {}, {"status": "success"}

    def _listing(self):
        """GET /v1/marketplace/instances: the fleet's marketplace instances and those rented here, each rented one
        answering "creating" for ``ready_after`` listings, then "online" with its sshCommand (or its injected end)."""
        items = list(self.marketplace)
        for entry in self.rented:
            if entry["polls_left"] > 0:
                entry["polls_left"] -= 1
            elif entry["item"]["instance"]["status"] == "creating":
                entry["item"]["instance"]["status"] = entry["ending"] or "online"
                if not entry["ending"]:
                    entry["item"]["sshCommand"] = entry["ssh"]
            items.append(entry["item"])
        return {"instances": items}

    def stats(self):
        with self._lock:
            by_path = {}
            for _method, path, _status, _ok in self.requests:
                by_path[path] = by_path.get(path, 0) + 1
            return {
                "requests": self.request_count,
                "by_path": by_path,
                "on_demand": len(self.on_demand),
                "marketplace": len(self.marketplace),
            }

    def _body(self, source):
        body = self._bodies.get(source)
        if body is None:
            payload = self.on_demand if source == "on_demand" else {"instances": self.marketplace}
            body = json.dumps(payload).encode()
            self._bodies[source] = body
        return body

    # ---------------------------------------------------------------- request handling
    def handle(self, method, path, authorization, payload=b""):
        """Decide an answer: ``(status, headers, body_bytes, delay_seconds)``."""
        path = path.split("?", 1)[0]
        if path.startswith("/_fake/"):
            return None
        with self._lock:
            self.request_count += 1
            delay = 0.0
            if self.delay and (self._delay_count is None or self._delay_count > 0):
                delay = self.delay
                if self._delay_count is not None:
                    self._delay_count -= 1
            status, headers, answer = self._decide(method, path, authorization, payload)
            body = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            self.requests.append((method, path, status, authorization == "Bearer " + self.api_key))
            released, self._released = self._released, []
        for host in released:
            if self.on_terminate is not None:
                self.on_terminate(host)
        return status, headers, body, delay

    def _decide(self, method, path, authorization, payload=b""):
        if self._fail_queue:
            status, retry_after = self._fail_queue.pop(0)
            headers = {}
            if status == 429:
                headers["Retry-After"] = str(1 if retry_after is None else retry_after)
                return status, headers, {"detail": "Rate limit exceeded, slow down"}
            return status, headers, {"detail": "upstream error (injected %d)" % status}
        if self.auth_status in (401, 403):
            return self.auth_status, {}, {"detail": self.auth_message}
        if not authorization or not authorization.startswith("Bearer "):
            return 401, {"WWW-Authenticate": "Bearer"}, {"detail": "Not authenticated"}
        if authorization != "Bearer " + self.api_key:
            return 401, {"WWW-Authenticate": "Bearer"}, {"detail": self.auth_message}
        if method == "GET" and path == OPTIONS_PATH:
            return 200, {}, self.options
        if method == "GET" and path == BALANCE_PATH:
            return 200, {}, dict(self.balance)
        if method == "GET" and path == LEGACY_BALANCE_PATH:
            return 200, {}, {"credits": self.balance["balanceCents"]}
        if method == "POST" and path in (ON_DEMAND_PATH, OD_TERMINATE_PATH):
            try:
                body = json.loads(payload or b"{}")
            except ValueError:
                return self._error(400, "BAD_REQUEST", "body is not JSON")
            if not isinstance(body, dict):
                return self._error(400, "BAD_REQUEST", "body is not a JSON object")
            return self._od_create(body) if path == ON_DEMAND_PATH else self._od_terminate(body)
        if (
            method == "GET"
            and path == ON_DEMAND_PATH
            and self.od_rentals
            and "on_demand" not in self.raw_bodies
            and not self.source_status.get("on_demand")
        ):
            return 200, {}, self._od_listing()
        if method == "POST" and path in (MACHINES_PATH, CREATE_PATH, TERMINATE_PATH):
            try:
                body = json.loads(payload or b"{}")
            except ValueError:
                return 422, {}, {"detail": "body is not JSON"}
            if not isinstance(body, dict):
                return 422, {}, {"detail": "body is not a JSON object"}
            if path == MACHINES_PATH:
                return 200, {}, {"instances": self.machines}
            return self._create(body) if path == CREATE_PATH else self._terminate(body)
        if (
            method == "GET"
            and path == MARKETPLACE_PATH
            and self.rented
            and "marketplace" not in self.raw_bodies
            and not self.source_status.get("marketplace")
        ):
            return 200, {}, self._listing()
        source = PATHS.get(path)
        if source is None:
            return 404, {}, {"detail": "Not Found"}
        if method != "GET":
            return 405, {"Allow": "GET"}, {"detail": "Method Not Allowed"}
        forced = self.source_status.get(source)
        if forced:
            return forced, {}, {"detail": "Not Found" if forced == 404 else "forced %d" % forced}
        if source in self.raw_bodies:
            status, body = self.raw_bodies[source]
            return status, {}, body
        return 200, {}, self._body(source)

    def control(self, method, path, body):
        """The ``/_fake/*`` endpoints."""
        if path == "/_fake/stats" and method == "GET":
            return 200, self.stats()
        if path == "/_fake/reset" and method == "POST":
            self.reset_stats()
            return 200, {"ok": True}
        if path == "/_fake/config" and method == "POST":
            try:
                conf = json.loads(body or b"{}")
            except ValueError:
                return 400, {"detail": "bad JSON"}
            if "fleet" in conf:
                self.set_fleet(int(conf["fleet"]), clusters=conf.get("clusters") or ["default"])
            if "fail_next" in conf:
                self.fail_next(conf["fail_next"], conf.get("fail_status", 500), conf.get("retry_after"))
            if "delay" in conf:
                self.set_delay(conf["delay"], conf.get("delay_count"))
            if "auth_status" in conf:
                with self._lock:
                    self.auth_status = conf["auth_status"]
            for source, status in (conf.get("source_status") or {}).items():
                self.set_source_status(source, status)
            for source, body in (conf.get("raw_body") or {}).items():
                self.set_raw_body(source, body)
            return 200, {"ok": True}
        return 404, {"detail": "Not Found"}

    # ---------------------------------------------------------------- server
    @property
    def url(self):
        return "http://%s:%d" % (self.host, self.port)

    def start(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            server_version = "FakeHyperbolic/1.0"

            def log_message(self, fmt, *args):  # quiet; never log headers (the key)
                pass

            def _send(self, status, headers, body):
                try:
                    self.send_response(status, _REASONS.get(status))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _serve(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else b""
                decided = fake.handle(method, self.path, self.headers.get("Authorization"), payload)
                if decided is None:
                    status, data = fake.control(method, self.path.split("?", 1)[0], payload)
                    self._send(status, {}, json.dumps(data).encode())
                    return
                status, headers, body, delay = decided
                if delay:
                    time.sleep(delay)
                if status == DROP:  # the request took effect; its answer never comes
                    self.close_connection = True
                    return
                self._send(status, headers, body)

            def do_GET(self):  # noqa: N802
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False
            allow_reuse_address = True

            def handle_error(self, request, client_address):  # clients that gave up
                pass

        self._server = Server((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hyperbolic", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def serve_forever(self):
        if self._server is None:
            self.start()
        try:
            while self._thread.is_alive():
                self._thread.join(0.5)
        finally:
            self.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m tests.fake_hyperbolic.server", description="Fake Hyperbolic API on 127.0.0.1 for tests."
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a random free one)")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("HYPERBOLIC_API_KEY") or DEFAULT_KEY,
        help="Bearer key to accept (default: $HYPERBOLIC_API_KEY or %s)" % DEFAULT_KEY,
    )
    parser.add_argument("--fleet", type=int, default=0, help="generate N running instances")
    parser.add_argument("--clusters", default="default", help="comma-separated cluster names for --fleet")
    parser.add_argument("--from-sandbox", metavar="STATE_JSON", help="list the sandbox's nodes as instances")
    parser.add_argument(
        "--write-inventory",
        metavar="PATH",
        help="with --from-sandbox: write a ready *.hyperbolic.yml pointing at this server",
    )
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--fail-first", type=int, default=0, help="answer the first N requests with --fail-status")
    parser.add_argument("--fail-status", type=int, default=500)
    parser.add_argument(
        "--source-404",
        action="append",
        default=[],
        choices=sorted(set(PATHS.values())),
        help="answer 404 for this source (repeatable)",
    )
    args = parser.parse_args(argv)

    fake = FakeHyperbolic(api_key=args.api_key, port=args.port)
    state = None
    if args.from_sandbox:
        with open(args.from_sandbox) as handle:
            state = json.load(handle)
        fake.load_sandbox(state)
    if args.fleet:
        fake.set_fleet(args.fleet, clusters=[c for c in args.clusters.split(",") if c])
    if args.delay:
        fake.set_delay(args.delay)
    if args.fail_first:
        fake.fail_next(args.fail_first, args.fail_status)
    for source in args.source_404:
        fake.set_source_status(source, 404)

    fake.start()
    if args.write_inventory:
        if state is None:
            parser.error("--write-inventory needs --from-sandbox")
        with open(args.write_inventory, "w") as handle:
            handle.write(sandbox_inventory_yaml(state, fake.url))
    signal.signal(signal.SIGTERM, lambda *_: fake._server and threading.Thread(target=fake.stop).start())
    sys.stdout.write("FAKE_HYPERBOLIC_URL=%s\n" % fake.url)
    sys.stdout.flush()
    try:
        fake.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
