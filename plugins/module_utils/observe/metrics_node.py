# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.ray_metrics on one node: node_exporter everywhere, Prometheus on the head
(``state=present``), their removal (``absent``), and the head's utilisation lines (``query``). The rules - units,
web and scrape configs, the kept bcrypt hash, what a change means for a service - are module_utils/observe/metrics.py
and prometheus.py; this file does the I/O. Standard library only.

It needs AnsibleModule itself (``fail_json``/``exit_json`` end the call, ``_diff`` asks for the files' changes): the
module passes it in (:func:`run`)."""

from __future__ import annotations

import json
import os
import pwd
import time
from typing import Any
from urllib.parse import urlencode

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics, prometheus
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import ensure_dir, fact_text, put


class Systemd:
    """The systemctl calls this module makes; none in check mode."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.path = module.get_bin_path("systemctl", required=True)

    def run(self, *args: str) -> None:
        if self.module.check_mode:
            return
        rc, out, err = self.module.run_command([self.path] + list(args))
        if rc != 0:
            self.module.fail_json(
                msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | "))
            )

    def state(self, verb: str, unit: str) -> str:
        dummy, out, dummy2 = self.module.run_command([self.path, verb, unit])
        return out.strip()


class Node:
    """One node's metrics files and services. ``prometheus_options``: the module's vocabulary.Options of its
    ``prometheus`` option, whose fields' defaults fill what the call left out."""

    def __init__(self, module: Any, prometheus_options: Any) -> None:
        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.files: list[str] = []
        self.installed: list[str] = []
        self.services: dict[str, list[str]] = {}
        # --diff: each file's change, secrets' content hidden (mode 0600: ray/node.file_diff)
        self.diff: list[dict[str, str]] | None = [] if module._diff else None
        self.systemd = Systemd(module)
        self.dir = os.path.join(self.p["config_dir"], "metrics")
        self.prometheus_options = prometheus_options
        self.bcrypt: Any = None  # metrics.Bcrypt, set by run() before any web config is written

    def fail(self, msg: str) -> None:
        self.module.fail_json(
            msg=msg,
            files=self.files,
            installed=self.installed,
            services=self.services,
            changed=bool(self.files or self.installed or self.services) and not self.check,
        )

    def put(self, path: str, text: str, mode: int, uid: int | None = None) -> bool:
        try:
            changed = put(path, text, mode, uid, self.check, self.diff)
        except OSError as e:
            self.fail("%s cannot be written: %s" % (path, e.strerror or e))
        if changed:
            self.files.append(path)
        return changed

    def read(self, path: str) -> str:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return ""

    def did(self, unit: str, what: str) -> None:
        self.services.setdefault(unit, []).append(what)

    def uid(self, user: str, fallback: str = "root") -> tuple[str, int]:
        """(name, uid) of ``user``, else of ``fallback``."""
        for name in (user, fallback):
            try:
                return name, pwd.getpwnam(name).pw_uid
            except KeyError:
                continue
        self.fail("user %s does not exist on this node" % user)
        return None  # type: ignore[return-value]  # not reached: fail_json ends the module

    # -- packages and the distribution's services --------------------------------------------------------------
    def mask_distro(self, kind: str) -> None:
        for unit in metrics.DISTRO_UNITS[kind]:
            if self.systemd.state("is-enabled", unit) == "masked":
                continue
            self.did(unit, "mask")
            self.systemd.run("mask", unit)
            if self.systemd.state("is-active", unit) == "active":
                self.did(unit, "stop")
                self.systemd.run("stop", unit)

    def binary(self, kind: str) -> str:
        found = self.module.get_bin_path(metrics.BINARIES[kind])
        if found:
            return found
        package = metrics.PACKAGES[kind]
        apt = self.module.get_bin_path("apt-get")
        if not self.p["install"] or not apt:
            self.fail(
                "%s is not installed on this node%s: install the %s package, or set ray_metrics: false"
                % (metrics.BINARIES[kind], "" if apt else " and it has no apt-get to install it with", package)
            )
        self.installed.append(package)
        if self.check:
            return "/usr/bin/" + metrics.BINARIES[kind]
        argv = [apt, "install", "-y", "-q", "--no-install-recommends", package]
        env = {"DEBIAN_FRONTEND": "noninteractive"}
        rc, out, err = self.module.run_command(argv, environ_update=env)
        if rc != 0:  # a fresh cloud image's empty package lists
            self.module.run_command([apt, "update", "-q"], environ_update=env)
            rc, out, err = self.module.run_command(argv, environ_update=env)
        found = self.module.get_bin_path(metrics.BINARIES[kind])
        if rc != 0 or not found:
            self.fail(
                "%s could not be installed with apt-get: %s; install it and run again, or set ray_metrics: false"
                % (package, ((err or out).strip().splitlines() or ["no output"])[-1][:300])
            )
        return found

    # -- a service whose files were written ------------------------------------------------------------------
    def apply(
        self, unit: str, unit_changed: bool, web_changed: bool, config_changed: bool = False, reloadable: bool = False
    ) -> None:
        active = self.systemd.state("is-active", unit) == "active"
        enabled = self.systemd.state("is-enabled", unit) == "enabled"
        reload_daemon, action, enable = metrics.service_action(
            active, enabled, unit_changed, web_changed, config_changed, reloadable
        )
        if reload_daemon:
            self.systemd.run("daemon-reload")
        if enable:
            self.did(unit, "enable")
            self.systemd.run("enable", unit)
        if action:
            self.did(unit, action)
            self.systemd.run(action, unit)

    def mkdir(self) -> None:
        try:
            if ensure_dir(self.p["config_dir"], 0o755, check_mode=self.check, keep_mode=True):
                self.files.append(self.p["config_dir"])
            if ensure_dir(self.dir, 0o755, check_mode=self.check):
                self.files.append(self.dir)
        except OSError as e:
            self.fail("%s cannot be used: %s" % (self.dir, e.strerror or e))

    def web(self, name: str, user_uid: int) -> tuple[str, bool]:
        """The web config ``name`` for the password, owned by the service's user, 0600."""
        path = os.path.join(self.dir, name)
        try:
            hashed = metrics.kept_hash(self.read(path), self.p["password"], self.bcrypt)
            text = metrics.web_config(hashed)
        except metrics.MetricsError as e:
            self.fail("the metrics password cannot be hashed here: %s" % e)
        return path, self.put(path, text, 0o600, user_uid)

    # -- the two services ------------------------------------------------------------------------------------
    def exporter(self) -> None:
        p = self.p
        self.mask_distro("exporter")
        binary = self.binary("exporter")
        user, uid = self.uid(p["exporter_user"])
        web_path, web_changed = self.web(metrics.EXPORTER_WEB, uid)
        unit = metrics.exporter_unit(binary, p["address"], p["port"], web_path, user)
        unit_changed = self.put(os.path.join(p["unit_dir"], metrics.EXPORTER_UNIT), unit, 0o644)
        self.apply(metrics.EXPORTER_UNIT, unit_changed, web_changed)

    def prometheus(self, dcgm_here: bool) -> None:
        p, q = self.p, dict(self.p["prometheus"])
        for key, t in self.prometheus_options.fields.items():
            if q.get(key) is None and t.default is not vocabulary.NOTSET:
                q[key] = t.default
        self.mask_distro("prometheus")
        binary = self.binary("prometheus")
        user, uid = self.uid(q["user"], q["user"])
        password_file = os.path.join(self.dir, metrics.PASSWORD)
        self.put(password_file, p["password"], 0o600, uid)
        web_path, web_changed = self.web(metrics.PROMETHEUS_WEB, uid)
        members = [
            dict(
                m,
                dcgm=bool(m.get("dcgm"))
                or m.get("host") in q["dcgm_hosts"]
                or (dcgm_here and m.get("address") == p["address"]),
            )
            for m in q["members"]
        ]
        try:
            config = metrics.prometheus_config(
                members, q["exporter_port"], q["dcgm_port"], password_file, q["ray_sd_file"], q["scrape_interval"]
            )
        except metrics.MetricsError as e:
            self.fail(str(e))
        config_changed = self.put(os.path.join(self.dir, metrics.PROMETHEUS_CONFIG), config, 0o644)
        self.storage(q["storage_dir"], uid)
        unit = metrics.prometheus_unit(
            binary,
            p["address"],
            q["port"],
            os.path.join(self.dir, metrics.PROMETHEUS_CONFIG),
            web_path,
            q["storage_dir"],
            q["retention"],
            user,
        )
        unit_changed = self.put(os.path.join(p["unit_dir"], metrics.PROMETHEUS_UNIT), unit, 0o644)
        self.apply(metrics.PROMETHEUS_UNIT, unit_changed, web_changed, config_changed, reloadable=True)

    def storage(self, path: str, uid: int) -> None:
        """Prometheus's data: made (and marked ours, so that a purge may remove it) when missing or empty."""
        exists = os.path.isdir(path)
        try:
            made = owned.claim(path, 0o700, self.check) and not exists
            if made:
                self.files.append(path)
                if not self.check:
                    os.chown(path, uid, -1)
            elif exists and os.stat(path).st_uid != uid and not os.path.islink(path):
                self.files.append(path)
                if not self.check:
                    os.chown(path, uid, -1)
        except OSError as e:
            self.fail("%s cannot be used for Prometheus's data: %s" % (path, e.strerror or e))

    # -- absent --------------------------------------------------------------------------------------------------
    def remove_unit(self, unit: str) -> bool:
        path = os.path.join(self.p["unit_dir"], unit)
        if not os.path.lexists(path):
            return False
        self.did(unit, "stop")
        self.systemd.run("disable", "--now", unit)
        self.files.append(path)
        if not self.check:
            os.unlink(path)
        return True

    def remove_file(self, path: str) -> None:
        if os.path.lexists(path) and not os.path.isdir(path):
            self.files.append(path)
            if not self.check:
                os.unlink(path)

    def absent(self) -> None:
        p = self.p
        removed = [self.remove_unit(unit) for unit in (metrics.PROMETHEUS_UNIT, metrics.EXPORTER_UNIT)]
        if any(removed):
            self.systemd.run("daemon-reload")
            for unit, gone in zip((metrics.PROMETHEUS_UNIT, metrics.EXPORTER_UNIT), removed):
                if gone and not self.check:
                    self.module.run_command([self.systemd.path, "reset-failed", unit])
        for kind in ("exporter", "prometheus"):
            for unit in metrics.DISTRO_UNITS[kind]:
                # Only our mask (a link to /dev/null): the distribution's own unit file is its package's.
                link = os.path.join(p["unit_dir"], unit)
                if os.path.islink(link) and os.readlink(link) == "/dev/null":
                    self.did(unit, "unmask")
                    self.systemd.run("unmask", unit)
        for name in (metrics.PASSWORD, metrics.EXPORTER_WEB, metrics.PROMETHEUS_WEB, metrics.PROMETHEUS_CONFIG):
            self.remove_file(os.path.join(self.dir, name))
        if os.path.isdir(self.dir) and not os.path.islink(self.dir):
            left = [n for n in os.listdir(self.dir) if os.path.join(self.dir, n) not in self.files]
            if not left:
                self.files.append(self.dir)
                if not self.check:
                    os.rmdir(self.dir)
        self.remove_file(p["fact_path"])
        if p["purge"] and p["storage_dir"]:
            try:
                if owned.check(p["storage_dir"], [owned.CLAIM], what="Prometheus's data", verb="remove"):
                    self.files.append(p["storage_dir"])
                    if not self.check:
                        owned.remove(p["storage_dir"], [owned.CLAIM], what="Prometheus's data")
            except owned.NotOurs as e:
                self.fail(str(e))


def query(module: Any) -> None:
    """The latest utilisation of every node from the head's Prometheus, one line per node: the members its scrape
    config names (by their inventory names), then any O(names) adds."""
    p = module.params
    try:
        with open(os.path.join(p["config_dir"], "metrics", metrics.PROMETHEUS_CONFIG), encoding="utf-8") as handle:
            members = metrics.members_in(handle.read())
    except OSError:
        module.fail_json(
            msg="no Prometheus on this node (%s/metrics/%s is missing): run site.yml with ray_metrics on"
            % (p["config_dir"], metrics.PROMETHEUS_CONFIG)
        )
    names = dict((address, host) for host, address in members)
    names.update(p["names"])
    address = (p["address"] or "").strip()
    if not address:
        try:
            with open(p["ray_fact_path"], encoding="utf-8") as handle:
                address = str(json.load(handle).get("node_ip") or "")
        except (OSError, ValueError, AttributeError):
            address = ""
    if not address:
        module.fail_json(
            msg="the head's private address is unknown (no address given, none in %s)" % p["ray_fact_path"]
        )
    try:
        with open(os.path.join(p["config_dir"], "metrics", metrics.PASSWORD), encoding="utf-8") as handle:
            password = handle.read().strip()
    except OSError as e:
        module.fail_json(
            msg="the metrics password cannot be read on this head (%s): run site.yml with ray_metrics on"
            % (e.strerror or e)
        )
    module.no_log_values.add(password)
    base = "http://%s" % metrics.host_port(address, p["prometheus_port"])
    headers = {"Authorization": metrics.authorization(password)}
    module.no_log_values.add(headers["Authorization"])
    end = time.time()
    start = p["start"] if 0 < p["start"] < end - 1 else end - p["window"]
    answers: dict[str, list[Any]] = {}
    problems: list[str] = []
    for kind, requests in prometheus.range_requests(base, start, end, timeout=10).items():
        for url, params in requests:
            try:
                answer = open_url("%s?%s" % (url, urlencode(sorted(params.items()))), headers=headers, timeout=15)
                answers.setdefault(kind, []).append(answer.read())
            except Exception as e:  # pylint: disable=broad-except
                problems.append("%s: Prometheus at %s did not answer: %s" % (kind, base, e))
                answers.setdefault(kind, []).append(None)
    structure, unread = prometheus.utilisation(answers, names)
    hosts = list(dict.fromkeys([host for host, dummy in members] + list(p["names"].values())))
    module.exit_json(
        changed=False, lines=metrics.utilisation_lines(structure, hosts), problems=problems + unread, series=structure
    )


def run(module: Any, prometheus_options: Any) -> None:
    """The whole of module ray_metrics for AnsibleModule ``module`` (its arguments checked): ends the module with
    its result. ``prometheus_options``: the module's vocabulary.Options of its ``prometheus`` option."""
    p = module.params
    if p["state"] == "query":
        query(module)
    node = Node(module, prometheus_options)
    if p["state"] == "absent":
        node.absent()
        module.exit_json(
            changed=bool(node.files or node.services),
            files=node.files,
            installed=[],
            services=node.services,
            **(dict(diff=node.diff) if node.diff else {}),
        )
    for key in ("address", "password"):
        if not (p[key] or "").strip():
            module.fail_json(msg="%s must be given with state=present" % key, changed=False)
    node.bcrypt = metrics.Bcrypt()
    dcgm = bool(module.get_bin_path(metrics.BINARIES["dcgm"]))
    node.mkdir()
    node.exporter()
    if p["prometheus"] is not None:
        node.prometheus(dcgm)
    else:
        if node.remove_unit(metrics.PROMETHEUS_UNIT):
            node.systemd.run("daemon-reload")
        for name in (metrics.PASSWORD, metrics.PROMETHEUS_WEB, metrics.PROMETHEUS_CONFIG):
            node.remove_file(os.path.join(node.dir, name))
    fact = dict(
        exporter=True,
        prometheus=p["prometheus"] is not None,
        dcgm=dcgm,
        storage_dir=(p["prometheus"] or {}).get("storage_dir") or "",
    )
    try:
        if ensure_dir(os.path.dirname(p["fact_path"]), 0o755, check_mode=module.check_mode, keep_mode=True):
            node.files.append(os.path.dirname(p["fact_path"]))
    except OSError as e:
        node.fail("%s cannot be used: %s" % (os.path.dirname(p["fact_path"]), e.strerror or e))
    node.put(p["fact_path"], fact_text(fact), 0o644)
    changed = bool(node.files or node.installed or node.services)
    module.exit_json(
        changed=changed,
        files=node.files,
        installed=node.installed,
        services=node.services,
        dcgm=dcgm,
        **(dict(diff=node.diff) if node.diff else {}),
    )
