# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Renting and releasing Hyperbolic marketplace machines, through the collection's one client (hyperbolic.py).

The endpoints and shapes, as HyperbolicLabs' public clients (agent kit, MCP server) and SkyPilot's client use them:

* ``POST /v1/marketplace`` with ``{"filters": {}}`` -> ``{"instances": [machine]}``; a machine has ``id`` (the node
  name), ``cluster_name``, ``status`` (``node_ready``), ``reserved``, ``gpus_total``, ``gpus_reserved``,
  ``hardware.gpus[].model``, ``pricing.price.amount`` (cents per GPU-hour) and ``location.region``.
* ``POST /v1/marketplace/instances/create`` with ``{"cluster_name", "node_name", "gpu_count"}``; the collection
  adds ``userMetadata: {"rlinfra": {"label", "name"}}`` (SkyPilot tags its instances the same way) to recognise
  what it rented. The answer names the instance in one of ``instance_name``, ``instanceName``, ``instance_id``,
  ``id`` or ``instance.id``.
* ``GET /v1/marketplace/instances`` -> ``{"instances": [...]}`` (the inventory plugin's shape, ``userMetadata`` kept).
* ``POST /v1/marketplace/instances/terminate`` with ``{"id"}``.

Decisions (which machines, which names, what is ours, when an instance is ready) are pure functions; ``Rent``
sequences the calls with an injectable clock, sleep and SSH probe, so tests drive it against the fake API.
"""

from __future__ import annotations

import re
import socket
import time

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import (
    HyperbolicError, extract_items, normalize_marketplace, one_line)

MACHINES_PATH = "/v1/marketplace"
CREATE_PATH = "/v1/marketplace/instances/create"
TERMINATE_PATH = "/v1/marketplace/instances/terminate"
INSTANCES_PATH = "/v1/marketplace/instances"
META_KEY = "rlinfra"
LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
GONE = ("terminated", "terminating", "stopped", "deleted")
FAILED = ("failed", "error")
ONLINE = ("online", "running")
POLL_FIRST, POLL_MAX = 2.0, 10.0


class RentError(HyperbolicError):
    """One line saying what failed, what was released, and what to do."""


def check_label(label):
    """'' when ``label`` can tag instances (and name a Ray cluster and hosts), else why not."""
    if not isinstance(label, str) or not LABEL.match(label):
        return ("label must be 1-40 lower-case letters, digits and '-' (not at either end), got %r: it names the "
                "instances (<label>-0, <label>-1, ...), their Ray cluster and its hosts" % (label,))
    return ""


def _squash(text):
    return re.sub(r"[^A-Z0-9]", "", str(text or "").upper())


def machine(item):
    """One machine of the marketplace listing, flattened; None when it is not an object with a node name."""
    if not isinstance(item, dict) or not item.get("id"):
        return None
    hardware = item.get("hardware") if isinstance(item.get("hardware"), dict) else {}
    gpus = [g for g in hardware.get("gpus") or [] if isinstance(g, dict)]
    price = ((item.get("pricing") or {}).get("price") or {}) if isinstance(item.get("pricing"), dict) else {}
    location = item.get("location") if isinstance(item.get("location"), dict) else {}
    try:
        total = int(item.get("gpus_total") if item.get("gpus_total") is not None else len(gpus))
        free = total - int(item.get("gpus_reserved") or 0)
        cents = float(price.get("amount")) if price.get("amount") is not None else None
    except (TypeError, ValueError):
        return None
    return dict(node=str(item["id"]), cluster=str(item.get("cluster_name") or ""), status=str(item.get("status") or ""),
                reserved=bool(item.get("reserved")), free=max(0, free), model=str(gpus[0].get("model") or "") if gpus else "",
                cents=cents, region=str(location.get("region") or ""))


def choose(items, count, gpu_model="", gpu_count=8, max_price=None, region=""):
    """Pick machines for ``count`` instances of ``gpu_count`` GPUs, cheapest first (a machine with room for two
    takes two). Returns ``(picks, why_not)``: picks are machine dicts, one per instance; why_not is '' when
    enough were found, else one line counting what matched at each step."""
    machines = [m for m in (machine(i) for i in items or []) if m]
    ready = [m for m in machines if m["status"] == "node_ready" and not m["reserved"]]
    model = [m for m in ready if not gpu_model or _squash(gpu_model) in _squash(m["model"])]
    roomy = [m for m in model if m["free"] >= gpu_count]
    placed = [m for m in roomy if not region or m["region"] == region]
    cheap = [m for m in placed if max_price is None or (m["cents"] is not None and m["cents"] / 100.0 <= max_price)]
    picks = []
    for m in sorted(cheap, key=lambda x: (x["cents"] if x["cents"] is not None else float("inf"), x["cluster"], x["node"])):
        for dummy in range(m["free"] // gpu_count):
            if len(picks) < count:
                picks.append(m)
    if len(picks) >= count:
        return picks, ""
    what = "%d instance(s) of %d x %s GPU%s" % (count, gpu_count, gpu_model or "any", "" if region == "" else " in " + region)
    steps = ["%d machine(s) ready and not reserved" % len(ready)]
    if gpu_model:
        steps.append("%d with %s GPUs" % (len(model), gpu_model))
    steps.append("%d with %d GPUs free" % (len(roomy), gpu_count))
    if region:
        steps.append("%d in region %s" % (len(placed), region))
    if max_price is not None:
        steps.append("%d at or under $%.2f per GPU-hour" % (len(cheap), max_price))
    return picks, ("no machine matches: %s needed, the marketplace has %s, room for %d; nothing was rented - "
                   "try another gpu_model, region or max_price, fewer nodes, or later" % (what, ", ".join(steps), len(picks)))


def meta(item):
    data = item.get("userMetadata") if isinstance(item, dict) and isinstance(item.get("userMetadata"), dict) else {}
    return data.get(META_KEY) if isinstance(data.get(META_KEY), dict) else {}


def status_of(item):
    inst = item.get("instance") if isinstance(item.get("instance"), dict) else {}
    return str(inst.get("status") or item.get("status") or "").lower()


def ours(items, label):
    """The rented instances tagged with ``label`` that are not gone, sorted by name. Others are never touched."""
    found = [i for i in items or [] if isinstance(i, dict) and meta(i).get("label") == label and status_of(i) not in GONE]
    return sorted(found, key=lambda i: (str(meta(i).get("name") or ""), str(i.get("id") or "")))


def names(existing, label, count):
    """``count`` new names ``<label>-<n>`` with the smallest numbers no existing instance uses."""
    used = {str(meta(i).get("name") or "") for i in existing}
    out, n = [], 0
    while len(out) < count:
        name = "%s-%d" % (label, n)
        if name not in used:
            out.append(name)
        n += 1
    return out


def view(item):
    """What a play needs of one instance: name, id, status, SSH address, GPUs, region."""
    record = normalize_marketplace(item)
    ssh = record.get("ssh") or {}
    return dict(name=str(meta(item).get("name") or record["id"]), id=record["id"], status=status_of(item),
                host=ssh.get("host") or "", port=ssh.get("port") or 22, user=ssh.get("user") or "",
                gpu_model=record.get("gpu_type") or "", gpu_count=record.get("gpu_count"), region=record.get("region") or "")


def created_id(answer):
    """The new instance's id from the create answer, '' when it names none."""
    if not isinstance(answer, dict):
        return ""
    inst = answer.get("instance") if isinstance(answer.get("instance"), dict) else {}
    for value in (answer.get("instance_name"), answer.get("instanceName"), answer.get("instance_id"), answer.get("id"), inst.get("id")):
        if value:
            return str(value)
    return ""


def ssh_banner(host, port, timeout=5.0):
    """'' when ``host:port`` answers with an SSH banner, else why not."""
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as sock:
            sock.settimeout(timeout)
            banner = sock.recv(256)
    except (OSError, ValueError) as exc:
        return "SSH at %s:%s: %s" % (host, port, one_line(exc, 120))
    return "" if banner.startswith(b"SSH-") else "SSH at %s:%s answered %r, not an SSH banner" % (host, port, banner[:40])


class Rent:
    """Rent (present) or release (absent) the instances tagged with one label."""

    def __init__(self, client, sleep=time.sleep, clock=time.monotonic, probe=ssh_banner, log=None):
        self.client, self.sleep, self.clock, self.probe = client, sleep, clock, probe
        self.log = log or (lambda line: None)

    def listing(self):
        data = self.client.request_json("GET", INSTANCES_PATH)
        return extract_items("marketplace", data, self.client.api_url + INSTANCES_PATH)

    def machines(self):
        data = self.client.request_json("POST", MACHINES_PATH, {"filters": {}})
        if not isinstance(data, dict) or not isinstance(data.get("instances"), list):
            raise HyperbolicError("the marketplace listing (POST %s) is not {\"instances\": [...]}" % MACHINES_PATH)
        return data["instances"]

    def release(self, ids):
        """Terminate ``ids``; returns (released, failures)."""
        released, failures = [], []
        for ident in ids:
            try:
                self.client.request_json("POST", TERMINATE_PATH, {"id": ident})
                released.append(ident)
                self.log("released %s" % ident)
            except HyperbolicError as exc:
                failures.append("%s (%s)" % (ident, exc))
        return released, failures

    def present(self, label, count, gpu_model="", gpu_count=8, max_price=None, region="", wait=True, timeout=900,
                keep_partial=False, check_mode=False):
        have = ours(self.listing(), label)
        need = max(0, count - len(have))
        result = dict(changed=need > 0, rented=[], released=[], would_rent=[], extra=max(0, len(have) - count))
        if need:
            picks, why = choose(self.machines(), need, gpu_model, gpu_count, max_price, region)
            if why:
                raise RentError(why)
            plan = [dict(name=n, cluster_name=m["cluster"], node_name=m["node"], price_per_gpu_hour=(m["cents"] or 0) / 100.0)
                    for n, m in zip(names(have, label, need), picks)]
            if check_mode:
                result.update(would_rent=plan, instances=[view(i) for i in have])
                return result
            self._create(label, plan, gpu_count, result, keep_partial)
        if not wait or check_mode:
            result["instances"] = [view(i) for i in ours(self.listing(), label)]
            return result
        result["instances"] = self._wait(label, result, timeout, keep_partial)
        return result

    def _create(self, label, plan, gpu_count, result, keep_partial):
        for item in plan:
            body = {"cluster_name": item["cluster_name"], "node_name": item["node_name"], "gpu_count": gpu_count,
                    "userMetadata": {META_KEY: {"label": label, "name": item["name"]}}}
            try:
                ident = created_id(self.client.request_json("POST", CREATE_PATH, body, retry=False))
            except HyperbolicError as exc:
                # The answer may be lost while the rental took effect: the listing says.
                ident = self._find(label, item["name"])
                if ident:
                    result["rented"].append(ident)
                self._give_up(result, keep_partial, "renting %s on %s/%s failed: %s" % (
                    item["name"], item["cluster_name"], item["node_name"], exc))
            ident = ident or self._find(label, item["name"])
            if not ident:
                why = "the API accepted renting %s but names no instance, and the listing shows none tagged %s" % (item["name"], label)
                self._give_up(result, keep_partial, why)
            result["rented"].append(ident)
            self.log("rented %s as %s on %s/%s" % (ident, item["name"], item["cluster_name"], item["node_name"]))

    def _find(self, label, name):
        try:
            return next((str(i.get("id")) for i in ours(self.listing(), label) if meta(i).get("name") == name), "")
        except HyperbolicError:
            return ""

    def _give_up(self, result, keep_partial, why):
        """Release what this call rented (unless told to keep it), then fail with one line saying so."""
        rented = list(dict.fromkeys(result["rented"]))
        if not rented:
            raise RentError("%s; nothing was rented" % why)
        if keep_partial:
            raise RentError("%s; kept what this call rented (keep_partial): %s - run again to complete, or release "
                            "it with state=absent (teardown.yml -e release=true)" % (why, ", ".join(rented)))
        released, failures = self.release(rented)
        result["released"] = released
        tail = "released what this call rented: %s" % (", ".join(released) or "nothing")
        if failures:
            tail += "; could NOT release %s: release them in Hyperbolic's console, they cost money" % "; ".join(failures)
        raise RentError("%s; %s" % (why, tail))

    def _wait(self, label, result, timeout, keep_partial):
        deadline = self.clock() + timeout
        pause, last = POLL_FIRST, "no answer yet"
        while True:
            current = ours(self.listing(), label)
            views = [view(i) for i in current]
            failed = [v for v in views if v["status"] in FAILED]
            if failed:
                self._give_up(result, keep_partial, "instance(s) %s ended %s" % (
                    ", ".join(v["name"] for v in failed), "/".join(sorted({v["status"] for v in failed}))))
            pending = [v for v in views if v["status"] not in ONLINE or not v["host"]]
            if not pending:
                problems = [p for p in (self.probe(v["host"], v["port"]) for v in views) if p]
                if not problems:
                    return views
                last = "; ".join(problems)
            else:
                last = ", ".join("%s is %s" % (v["name"], v["status"] or "unknown") for v in pending)
            if self.clock() >= deadline:
                self._give_up(result, keep_partial, "not ready after %ss: %s" % (timeout, last))
            self.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)

    def absent(self, label, check_mode=False, timeout=300):
        have = ours(self.listing(), label)
        ids = [str(i.get("id")) for i in have]
        result = dict(changed=bool(ids), released=[], would_release=ids if check_mode else [], rented=[])
        if check_mode or not ids:
            return result
        released, failures = self.release(ids)
        result["released"] = released
        if failures:
            raise RentError("could not release %s (released %s): run again, or release them in Hyperbolic's console - "
                            "they cost money" % ("; ".join(failures), ", ".join(released) or "nothing"))
        deadline = self.clock() + timeout
        pause = POLL_FIRST
        while ours(self.listing(), label):
            if self.clock() >= deadline:
                raise RentError("released %s, but the API still lists instance(s) tagged %s after %ss: check Hyperbolic's "
                                "console" % (", ".join(released), label, timeout))
            self.sleep(pause)
            pause = min(POLL_MAX, pause * 1.5)
        return result
