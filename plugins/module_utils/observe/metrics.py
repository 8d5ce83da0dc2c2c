# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the metrics on the cluster (role ray_metrics, docs/OBSERVABILITY.md) decide in Python: the names of their units,
packages and files, the bcrypt hash of the metrics password (kept while it still verifies, so a re-run rewrites no web
config), who Prometheus scrapes (:func:`scrape_targets`, which the role's prometheus.yml template lays out), the members
a scrape config names (:func:`members_in`, for the head's queries) and the one utilisation line per node status.yml
prints. The files themselves are the role's templates. Pure functions but for the hash (the node's libcrypt); standard
library only (it runs on the nodes).

The password never travels in argv: it reaches the node in a module's arguments (no_log), is hashed in that process
through libcrypt (``crypt(3)``, libxcrypt on Debian and Ubuntu, which has bcrypt), and lands only in root-only files.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.observe import prometheus

USER = "rlinfra"
EXPORTER_UNIT = "rlinfra-node-exporter.service"
PROMETHEUS_UNIT = "rlinfra-prometheus.service"
# The distribution's own services of the same programs: masked so that they never take the ports (or run unfenced on
# every address, as Debian's defaults do) beside ours, not even for the moment between a package's install and our
# first call.
DISTRO_UNITS = {"exporter": ("prometheus-node-exporter.service",), "prometheus": ("prometheus.service",)}
PACKAGES = {"exporter": "prometheus-node-exporter", "prometheus": "prometheus"}
BINARIES = {"exporter": "prometheus-node-exporter", "prometheus": "prometheus", "dcgm": "dcgm-exporter"}
# The files of <config_dir>/metrics: each web config is its service's own (they may run as different users).
PASSWORD = "password"
EXPORTER_WEB = "exporter-web.yml"
PROMETHEUS_WEB = "prometheus-web.yml"
PROMETHEUS_CONFIG = "prometheus.yml"
WEB_CONFIGS = {"exporter": EXPORTER_WEB, "prometheus": PROMETHEUS_WEB}
RAY_SD_FILE = "prom_metrics_service_discovery.json"
BCRYPT_COST = 10


class MetricsError(ValueError):
    """A bad input or a node that cannot do it; the message is one line meant for the user."""


def host_port(address: object, port: int | str) -> str:
    """``10.0.0.5:9100``, ``[fd00::5]:9100``."""
    address = str(address)
    return "[%s]:%d" % (address, int(port)) if ":" in address else "%s:%d" % (address, int(port))


# ---- the basic auth -------------------------------------------------------------------------------------------


def authorization(password: str, user: str = USER) -> str:
    """The ``Authorization`` header's value for ``user``/``password``."""
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode("utf-8")).decode("ascii")


def prometheus_headers(password: str, user: str = USER) -> str:
    """RAY_PROMETHEUS_HEADERS (JSON, the form Ray's dashboard parses) carrying the basic auth."""
    return json.dumps({"Authorization": authorization(password, user)}, sort_keys=True)


def hash_in(text: str | None, user: str = USER) -> str | None:
    """The bcrypt hash a web config (exporter-toolkit's ``basic_auth_users``, as the role's template writes it: one
    ``"user": "hash"`` line) holds for ``user``; None when it holds none."""
    for line in (text or "").splitlines():
        name, sep, value = line.strip().partition(":")
        if not sep:
            continue
        try:
            if json.loads(name) == user:
                found = json.loads(value.strip())
                return found if isinstance(found, str) else None
        except ValueError:
            continue
    return None


class Bcrypt:
    """bcrypt through the node's libcrypt (``crypt_gensalt``/``crypt``): the password stays in this process (never in
    argv, as ``htpasswd -nbB`` would put it), without python3-bcrypt or the ``crypt`` module Python 3.13 dropped."""

    def __init__(
        self, find: Callable[[str], str | None] = ctypes.util.find_library, load: Callable[[str], Any] = ctypes.CDLL
    ):
        name = find("crypt")
        self.lib = None
        self.why = "no libcrypt on this node"
        if not name:
            return
        try:
            lib = load(name)
            lib.crypt.restype = ctypes.c_char_p
            lib.crypt.argtypes = (ctypes.c_char_p, ctypes.c_char_p)
            lib.crypt_gensalt.restype = ctypes.c_char_p
            lib.crypt_gensalt.argtypes = (ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int)
        except (OSError, AttributeError) as e:
            self.why = "libcrypt (%s) cannot be used: %s" % (name, e)
            return
        self.lib = lib
        self.why = ""

    def _crypt(self, password: str, setting: str) -> str:
        if self.lib is None:
            raise MetricsError(self.why)
        out = self.lib.crypt(password.encode("utf-8"), setting.encode("ascii"))
        if not out or out.startswith(b"*"):
            raise MetricsError("this node's libcrypt has no bcrypt (libxcrypt has it; Debian and Ubuntu ship it)")
        return out.decode("ascii")

    def hash(self, password: str, cost: int = BCRYPT_COST, random: Callable[[int], bytes] = os.urandom) -> str:
        if self.lib is None:
            raise MetricsError(self.why)
        rbytes = random(16)
        salt = self.lib.crypt_gensalt(b"$2b$", cost, rbytes, len(rbytes))
        if not salt:
            raise MetricsError("this node's libcrypt has no bcrypt (libxcrypt has it; Debian and Ubuntu ship it)")
        return self._crypt(password, salt.decode("ascii"))

    def verify(self, password: str, hashed: str | None) -> bool:
        """Whether ``hashed`` is ``password``'s bcrypt hash (a hash that cannot be read is not)."""
        if not hashed or not str(hashed).startswith("$2"):
            return False
        try:
            return self._crypt(password, hashed) == hashed
        except (MetricsError, UnicodeError):
            return False


def kept_hash(old_web: str | None, password: str, bcrypt: Bcrypt) -> str:
    """The hash of ``old_web`` when it is ``password``'s (a re-run rewrites nothing: bcrypt salts differ), else a new
    one."""
    old = hash_in(old_web)
    return old if old and bcrypt.verify(password, old) else bcrypt.hash(password)


# ---- Prometheus's scrape config -------------------------------------------------------------------------------


def scrape_targets(members: Sequence[Mapping[str, Any]], exporter_port: int, dcgm_port: int) -> dict[str, Any]:
    """Who the head's Prometheus scrapes, for the role's prometheus.yml template: ``{"node": [{"target", "node"}],
    "dcgm": [...]}`` - every member's node_exporter, and NVIDIA's DCGM exporter on the members where it is installed
    (``dcgm``), each sorted by inventory name (the label ``node``). ``members``: ``[{host, address, dcgm}]``, the head
    included. Raises MetricsError when there is none, or one whose private address is unknown (a run limited to part
    of the cluster)."""
    if not members:
        raise MetricsError("no cluster member to scrape (the head is one): run site.yml over the whole cluster")
    missing = [str(m.get("host")) for m in members if not str(m.get("address") or "").strip()]
    if missing:
        raise MetricsError(
            "the private address of cluster member(s) %s is unknown: run site.yml over the whole "
            "cluster (no --limit), or set ray_private_ip for them" % ", ".join(missing)
        )
    ordered = sorted(members, key=lambda m: str(m["host"]))
    return {
        "node": [{"target": host_port(m["address"], exporter_port), "node": str(m["host"])} for m in ordered],
        "dcgm": [
            {"target": host_port(m["address"], dcgm_port), "node": str(m["host"])} for m in ordered if m.get("dcgm")
        ],
    }


def members_in(config_text: str | None) -> list[tuple[str, str]]:
    """``[(host, address)]`` of the node exporters a scrape config (the role's prometheus.yml template) scrapes, in
    its order: the head's own record of the cluster's members, so that a query names each node as the inventory
    does."""
    out, job, target = [], None, None
    for line in (config_text or "").splitlines():
        text = line.strip()
        if text.startswith("- job_name:"):
            job = text.split(":", 1)[1].strip()
        elif job == "node" and text.startswith("- targets:"):
            try:
                target = (json.loads(text.split(":", 1)[1]) or [None])[0]
            except ValueError:
                target = None
        elif job == "node" and text.startswith("node:") and target:
            try:
                out.append((json.loads(text.split(":", 1)[1]), prometheus.node_address(target)))
            except ValueError:
                pass
            target = None
    return out


# ---- status.yml's line per node -------------------------------------------------------------------------------


def _latest(points):
    for _dummy, value in reversed(points or []):
        if value is not None:
            return value
    return None


def utilisation_lines(structure: Mapping[str, Any] | None, hosts: Iterable[str]) -> list[str]:
    """One line per host of ``hosts`` (in order): ``host: CPU 12%, memory 40%, GPU 55%`` from
    ``observe.prometheus.utilisation``'s structure, each the newest sample; what Prometheus does not know is said."""
    lines = []
    for host in hosts:
        parts = []
        for kind, label in (("cpu", "CPU"), ("memory", "memory"), ("gpu", "GPU")):
            value = _latest(((structure or {}).get(kind) or {}).get(host))
            if value is None:
                if kind != "gpu":
                    parts.append("%s unknown" % label)
            else:
                parts.append("%s %.0f%%" % (label, value))
        lines.append("%s: %s" % (host, ", ".join(parts) if parts else "no metrics yet"))
    return lines
