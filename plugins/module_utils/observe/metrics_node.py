# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.ray_metrics on one node: the removal of what the role ray_metrics installed
(``state=absent``: site.yml where ray_metrics is now off, and teardown.yml) and the head's utilisation lines
(``query``: status.yml and the run report). The rules are module_utils/observe/metrics.py and prometheus.py; this
file does the I/O. Standard library only.

It needs AnsibleModule itself (``fail_json``/``exit_json`` end the call): the module passes it in (:func:`run`)."""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import urlencode

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics, prometheus


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


class Node:
    """What module ray_metrics removes from one node (``state=absent``): the units, configs, password and local fact
    the role ray_metrics wrote, each only where it is."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.files: list[str] = []
        self.services: dict[str, list[str]] = {}
        self.systemd = Systemd(module)
        self.dir = os.path.join(self.p["config_dir"], "metrics")

    def fail(self, msg: str) -> None:
        self.module.fail_json(
            msg=msg,
            files=self.files,
            services=self.services,
            changed=bool(self.files or self.services) and not self.check,
        )

    def did(self, unit: str, what: str) -> None:
        self.services.setdefault(unit, []).append(what)

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
        kinds = [kind for kind in ("prometheus", "exporter") if kind in p["services"]]
        units = {"exporter": metrics.EXPORTER_UNIT, "prometheus": metrics.PROMETHEUS_UNIT}
        removed = [(units[kind], self.remove_unit(units[kind])) for kind in kinds]
        if any(gone for dummy, gone in removed):
            self.systemd.run("daemon-reload")
            for unit, gone in removed:
                if gone and not self.check:
                    self.module.run_command([self.systemd.path, "reset-failed", unit])
        for kind in kinds:
            for unit in metrics.DISTRO_UNITS[kind]:
                # Only our mask (a link to /dev/null): the distribution's own unit file is its package's.
                link = os.path.join(p["unit_dir"], unit)
                if os.path.islink(link) and os.readlink(link) == "/dev/null":
                    self.did(unit, "unmask")
                    self.systemd.run("unmask", unit)
        names = {"exporter": [metrics.EXPORTER_WEB], "prometheus": [metrics.PASSWORD, metrics.PROMETHEUS_WEB]}
        names["prometheus"].append(metrics.PROMETHEUS_CONFIG)
        for kind in kinds:
            for name in names[kind]:
                self.remove_file(os.path.join(self.dir, name))
        if os.path.isdir(self.dir) and not os.path.islink(self.dir):
            left = [n for n in os.listdir(self.dir) if os.path.join(self.dir, n) not in self.files]
            if not left:
                self.files.append(self.dir)
                if not self.check:
                    os.rmdir(self.dir)
        if len(kinds) == len(units):  # what is left of the node's metrics, the fact says (the role rewrites it)
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


def run(module: Any) -> None:
    """The whole of module ray_metrics for AnsibleModule ``module`` (its arguments checked): ends the module with
    its result."""
    if module.params["state"] == "query":
        query(module)
    node = Node(module)
    node.absent()
    module.exit_json(changed=bool(node.files or node.services), files=node.files, services=node.services)
