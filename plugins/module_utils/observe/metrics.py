# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What ``rlinfra.verl.ray_metrics`` decides (ray_metrics, docs/OBSERVABILITY-metrics.md): the text of the node
exporter's and Prometheus's units, their basic-auth web configs and Prometheus's scrape config, which service to
restart or reload after which change, the bcrypt hash of the metrics password, and the one utilisation line per node
status.yml prints. Pure functions but for the hash (the node's libcrypt); standard library only (it runs on the
nodes).

The password never travels in argv: it reaches the module in its arguments (no_log), is hashed in this process
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
RAY_SD_FILE = "prom_metrics_service_discovery.json"
BCRYPT_COST = 10
HEADER = "# Written by rlinfra.verl (role ray, ray_metrics). Do not edit: re-run site.yml.\n"


class MetricsError(ValueError):
    """A bad input or a node that cannot do it; the message is one line meant for the user."""


def host_port(address: object, port: int | str) -> str:
    """``10.0.0.5:9100``, ``[fd00::5]:9100``."""
    address = str(address)
    return "[%s]:%d" % (address, int(port)) if ":" in address else "%s:%d" % (address, int(port))


def _q(value: object) -> str:
    """A YAML scalar that reads back as exactly ``value`` (JSON is YAML)."""
    return json.dumps(str(value))


# ---- the basic auth -------------------------------------------------------------------------------------------


def authorization(password: str, user: str = USER) -> str:
    """The ``Authorization`` header's value for ``user``/``password``."""
    return "Basic " + base64.b64encode(("%s:%s" % (user, password)).encode("utf-8")).decode("ascii")


def prometheus_headers(password: str, user: str = USER) -> str:
    """RAY_PROMETHEUS_HEADERS (JSON, the form Ray's dashboard parses) carrying the basic auth."""
    return json.dumps({"Authorization": authorization(password, user)}, sort_keys=True)


def web_config(password_hash: str, user: str = USER) -> str:
    """exporter-toolkit's web config file (node_exporter and Prometheus read the same format)."""
    if not str(password_hash).startswith("$2"):
        raise MetricsError("the metrics password's hash is not bcrypt (exporter-toolkit accepts only bcrypt)")
    return HEADER + "basic_auth_users:\n  %s: %s\n" % (_q(user), _q(password_hash))


def hash_in(text: str | None, user: str = USER) -> str | None:
    """The bcrypt hash a web config (as :func:`web_config` writes it) holds for ``user``; None when it holds none."""
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


# ---- the units ------------------------------------------------------------------------------------------------


def _unit(description: str, user: str, exec_start: Iterable[str], extra: Iterable[str] = ()) -> str:
    lines = (
        [
            HEADER.rstrip("\n"),
            "[Unit]",
            "Description=%s" % description,
            "After=network-online.target",
            "Wants=network-online.target",
            "",
            "[Service]",
            "User=%s" % user,
            "ExecStart=%s" % " ".join(exec_start),
        ]
        + list(extra)
        + [
            "Restart=on-failure",
            "RestartSec=5",
            "NoNewPrivileges=true",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )
    return "\n".join(lines)


def exporter_unit(binary: str, address: str, port: int, web_config_path: str, user: str) -> str:
    """node_exporter on the node's private address only, behind basic auth."""
    return _unit(
        "Prometheus node exporter of the Ray cluster (rlinfra.verl)",
        user,
        [binary, "--web.listen-address=%s" % host_port(address, port), "--web.config.file=%s" % web_config_path],
    )


def prometheus_unit(
    binary: str,
    address: str,
    port: int,
    config_path: str,
    web_config_path: str,
    storage_dir: str,
    retention: str,
    user: str,
) -> str:
    """Prometheus on the head's private address, behind basic auth; a config change is a reload (SIGHUP), not a
    restart that would lose the head block being written."""
    return _unit(
        "Prometheus of the Ray cluster (rlinfra.verl)",
        user,
        [
            binary,
            "--config.file=%s" % config_path,
            "--storage.tsdb.path=%s" % storage_dir,
            "--storage.tsdb.retention.time=%s" % retention,
            "--web.listen-address=%s" % host_port(address, port),
            "--web.config.file=%s" % web_config_path,
        ],
        extra=["ExecReload=/bin/kill -HUP $MAINPID", "TimeoutStopSec=120"],
    )


# ---- Prometheus's scrape config -------------------------------------------------------------------------------


def _targets(members, port, only=None):
    out = []
    for member in sorted(members, key=lambda m: str(m["host"])):
        if only is not None and not member.get(only):
            continue
        out += [
            "      - targets: [%s]" % _q(host_port(member["address"], port)),
            "        labels:",
            "          node: %s" % _q(member["host"]),
        ]
    return out


def prometheus_config(
    members: Sequence[Mapping[str, Any]],
    exporter_port: int,
    dcgm_port: int,
    password_file: str,
    ray_sd_file: str,
    scrape_interval: str = "15s",
    user: str = USER,
) -> str:
    """The scrape config: every member's node_exporter (basic auth, the password read from ``password_file`` at each
    scrape, never written here), Ray's own metrics through the service-discovery file Ray writes, and NVIDIA's DCGM
    exporter on the members where it is installed (``dcgm``). ``members``: ``[{host, address, dcgm}]``."""
    if not members:
        raise MetricsError("no cluster member to scrape (the head is one): run site.yml over the whole cluster")
    missing = [str(m.get("host")) for m in members if not str(m.get("address") or "").strip()]
    if missing:
        raise MetricsError(
            "the private address of cluster member(s) %s is unknown: run site.yml over the whole "
            "cluster (no --limit), or set ray_private_ip for them" % ", ".join(missing)
        )
    lines = (
        [
            HEADER.rstrip("\n"),
            "global:",
            "  scrape_interval: %s" % scrape_interval,
            "  evaluation_interval: %s" % scrape_interval,
            "scrape_configs:",
            "  - job_name: node",
            "    basic_auth:",
            "      username: %s" % _q(user),
            "      password_file: %s" % _q(password_file),
            "    static_configs:",
        ]
        + _targets(members, exporter_port)
        + [
            "  - job_name: ray",
            "    file_sd_configs:",
            "      - files: [%s]" % _q(ray_sd_file),
            # Ray rewrites the file as nodes come and go; a link to the session's copy is not watched, so re-read it.
            "        refresh_interval: 30s",
        ]
    )
    dcgm = _targets(members, dcgm_port, only="dcgm")
    if dcgm:
        lines += ["  - job_name: dcgm", "    static_configs:"] + dcgm
    return "\n".join(lines) + "\n"


def members_in(config_text: str | None) -> list[tuple[str, str]]:
    """``[(host, address)]`` of the node exporters a config :func:`prometheus_config` wrote scrapes, in its order: the
    head's own record of the cluster's members, so that a query names each node as the inventory does."""
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


# ---- what a change means --------------------------------------------------------------------------------------


def service_action(
    active: bool,
    enabled: bool,
    unit_changed: bool,
    web_changed: bool,
    config_changed: bool = False,
    reloadable: bool = False,
) -> tuple[bool, str, bool]:
    """``(daemon_reload, action, enable)``: what systemd must do after the files were written. ``action`` is
    ``restart``, ``reload``, ``start`` or ``""``; nothing at all on a re-run that changed nothing."""
    if not active:
        action = "start"
    elif unit_changed or web_changed or (config_changed and not reloadable):
        action = "restart"
    elif config_changed:
        action = "reload"
    else:
        action = ""
    return unit_changed, action, not enabled


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
