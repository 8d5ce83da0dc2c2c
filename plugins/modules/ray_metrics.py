#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_metrics
short_description: Metrics of a Ray node in one call - node_exporter everywhere, Prometheus on the head
version_added: 0.9.0
description:
  - V(present) - the node's C(rlinfra-node-exporter.service) (Debian's C(prometheus-node-exporter), installed with apt
    when its binary is missing) on the node's private address behind basic auth; with O(prometheus), also the head's
    C(rlinfra-prometheus.service) (Debian's C(prometheus)) scraping every member's node exporter, Ray's own metrics
    (the service-discovery file Ray writes in its temp dir) and NVIDIA's DCGM exporter where it is installed.
  - The distribution's own services of those packages are stopped and masked (before an install, so that they never
    start) - they would listen on every address, unfenced and without auth, on the same ports.
  - The password reaches the module only in its arguments; it is hashed with bcrypt in the module's process
    (libcrypt) into root-only web configs, and kept in C(<config_dir>/metrics/password) (mode 0600) on the head only,
    for Prometheus's scrapes. A re-run keeps a hash that still matches the password, so nothing changes.
  - Every file is written whole and only when its content, mode or owner differ; a service restarts only when its
    unit or web config changed, and Prometheus reloads (SIGHUP) when only its scrape config did.
  - V(query) reads the nodes' latest CPU, memory and GPU utilisation from the head's Prometheus (the password read
    from the node's file, never passed) - one line per node.
  - V(absent) stops and removes the units, the web and scrape configs, the password and the local fact, and unmasks
    the distribution's services; the packages and Prometheus's data stay unless O(purge) (the data directory only when
    this module made it, module_utils/common/owned.py).
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: What to do.
    type: str
    choices: [present, query, absent]
    default: present
  address:
    description:
      - The node's private address (the exporter's and, on the head, Prometheus's listen address); required with
        O(state=present). O(state=query) reads it from O(ray_fact_path) when not given.
    type: str
  port:
    description: The node exporter's port.
    type: int
    default: 9100
  password:
    description: The metrics password (user C(rlinfra)); required with O(state=present).
    type: str
  config_dir:
    description: Ray's configuration directory; the metrics files go to its C(metrics) subdirectory.
    type: path
    default: /etc/ray
  unit_dir:
    description: Where the systemd units go.
    type: path
    default: /etc/systemd/system
  fact_path:
    description: The C(rlinfra_metrics) local fact (what this node runs), removed by O(state=absent).
    type: path
    default: /etc/ansible/facts.d/rlinfra_metrics.fact
  install:
    description: Install the missing packages with apt (C(apt-get update) once when the first try fails).
    type: bool
    default: true
  exporter_user:
    description: The user node_exporter runs as (Debian's package makes it); root when the node has no such user.
    type: str
    default: prometheus
  prometheus:
    description:
      - The head's Prometheus (O(state=present)); not set - none here, and one found from an earlier run is removed.
      - C(port), C(user) (who Prometheus runs as - Ray's user, since it reads Ray's private temp dir),
        C(storage_dir), C(retention) (a Prometheus duration such as C(15d)), C(scrape_interval), C(members)
        (C([{host, address, dcgm}]), every member of the cluster, the head included), C(dcgm_hosts) (the members where
        the DCGM exporter is installed, as their own calls found; this node itself is looked at here),
        C(exporter_port), C(dcgm_port), C(ray_sd_file).
    type: dict
  names:
    description:
      - O(state=query) - inventory names by private address, besides the members the head's scrape config names
        (which are read from it).
    type: dict
    default: {}
  ray_fact_path:
    description: O(state=query) without O(address) - the head's C(rlinfra_ray) local fact, whose C(node_ip) is used.
    type: path
    default: /etc/ansible/facts.d/rlinfra_ray.fact
  prometheus_port:
    description: O(state=query) - the port of the head's Prometheus.
    type: int
    default: 9090
  window:
    description: O(state=query) - seconds of samples read; the newest of each is shown.
    type: int
    default: 300
  start:
    description:
      - O(state=query) - the start of the samples read (epoch seconds, e.g. a run's start) instead of O(window)
        seconds before now; each series holds at most 1000 points whatever the span (the step grows). The run report
        of M(rlinfra.verl.ray_job_wait) reads the run's window this way. V(0) - O(window).
    type: float
    default: 0
  storage_dir:
    description: O(state=absent) with O(purge) - Prometheus's data, removed only when this module made it.
    type: path
  purge:
    description: O(state=absent) - also remove Prometheus's data (see O(storage_dir)).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Says what would be installed, written, restarted or removed; changes nothing.
  diff_mode:
    support: full
    description: Each file written, with its change; the web configs and the password show only that they change.
seealso:
  - module: rlinfra.verl.ray_node
"""

EXAMPLES = r"""
- name: Run the node exporter (and, on the head, Prometheus)
  rlinfra.verl.ray_metrics:
    address: "{{ ray_node_ip }}"
    password: "{{ metrics_password }}"
    prometheus:
      port: 9090
      storage_dir: /workspace/prometheus
      retention: 15d
      members: [{host: head-1, address: 10.0.0.5, dcgm: false}, {host: worker-1, address: 10.0.0.6, dcgm: true}]
      ray_sd_file: /workspace/ray/prom_metrics_service_discovery.json
  no_log: true

- name: One utilisation line per node
  rlinfra.verl.ray_metrics:
    state: query
  become: true
  register: usage
"""

RETURN = r"""
files:
  description: The files and directories written or removed (or that would be).
  returned: always
  type: list
  elements: str
installed:
  description: The packages installed (or that would be).
  returned: always
  type: list
  elements: str
services:
  description: What was done to each service (C(start), C(restart), C(reload), C(stop), C(enable), C(mask)...).
  returned: always
  type: dict
dcgm:
  description: Whether NVIDIA's DCGM exporter is installed on this node.
  returned: when state is present
  type: bool
lines:
  description: O(state=query) - one utilisation line per node.
  returned: when state is query
  type: list
  elements: str
  sample: ["worker-1: CPU 12%, memory 40%, GPU 55%"]
series:
  description:
    - "O(state=query) - every node's samples over the window, C({kind: {node: [[epoch_s, value or null], ...]}}) for
      the kinds C(cpu), C(memory), C(gpu), C(gpu_memory) (percentages); a kind no exporter reports is left out."
  returned: when state is query
  type: dict
problems:
  description: O(state=query) - the answers that could not be read.
  returned: when state is query
  type: list
  elements: str
"""

import json
import os
import pwd
import time

from urllib.parse import urlencode

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_http import open_url
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import metrics, prometheus
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node import ensure_dir, fact_text, put

DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
PROMETHEUS = vocabulary.Options(dict(
    port=vocabulary.Port(default=9090),
    user=vocabulary.Text(empty=False, max_len=33, pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
                         what="a user name (lowercase letters, digits, _ and -)", default="root"),
    storage_dir=vocabulary.AbsPath("owns", spaces=False, required=True),
    retention=vocabulary.Text(empty=False, max_len=32, pattern=DURATION,
                              what="a Prometheus duration such as 15d or 12h", default="15d"),
    scrape_interval=vocabulary.Text(empty=False, max_len=32, pattern=DURATION,
                                    what="a Prometheus duration such as 15s", default="15s"),
    members=vocabulary.ListOf(vocabulary.Options(dict(
        host=vocabulary.Text(empty=False, max_len=255, required=True),
        address=vocabulary.Address(empty=True),
        dcgm=vocabulary.Switch(default=False),
    ), suboptions=False), required=True),
    dcgm_hosts=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=255), default=[]),
    exporter_port=vocabulary.Port(default=9100),
    dcgm_port=vocabulary.Port(default=9400),
    ray_sd_file=vocabulary.AbsPath("reads", spaces=False, required=True),
), suboptions=False)

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("present", "query", "absent"), default="present"),
    address=vocabulary.Address(empty=True),
    port=vocabulary.Port(default=9100),
    password=vocabulary.Secret(),
    config_dir=vocabulary.AbsPath("config", spaces=False, default="/etc/ray"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    fact_path=vocabulary.AbsPath("config", default="/etc/ansible/facts.d/rlinfra_metrics.fact"),
    install=vocabulary.Switch(default=True),
    exporter_user=vocabulary.Text(empty=False, max_len=33, pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
                                  what="a user name (lowercase letters, digits, _ and -)", default="prometheus"),
    prometheus=PROMETHEUS,
    names=vocabulary.MapOf(vocabulary.Text(empty=False, max_len=255), vocabulary.Text(empty=False, max_len=255),
                           default={}),
    prometheus_port=vocabulary.Port(default=9090),
    window=vocabulary.Seconds(30, 86400, integer=True, default=300),
    # Epoch seconds: from 0 (unset) to the year 2286 - a value outside is a mistake, not a long window.
    start=vocabulary.Number(0, 1e10, default=0),
    ray_fact_path=vocabulary.AbsPath("reads", default="/etc/ansible/facts.d/rlinfra_ray.fact"),
    storage_dir=vocabulary.AbsPath("owns", spaces=False),
    purge=vocabulary.Switch(default=False),
)
ARGUMENT_SPEC = ARGS.spec


class Systemd:
    """The systemctl calls this module makes; none in check mode."""

    def __init__(self, module):
        self.module = module
        self.path = module.get_bin_path("systemctl", required=True)

    def run(self, *args):
        if self.module.check_mode:
            return
        rc, out, err = self.module.run_command([self.path] + list(args))
        if rc != 0:
            self.module.fail_json(msg="systemctl %s failed: %s" % (" ".join(args), (err or out).strip().replace("\n", " | ")))

    def state(self, verb, unit):
        dummy, out, dummy2 = self.module.run_command([self.path, verb, unit])
        return out.strip()


class Node:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.check = module.check_mode
        self.files, self.installed, self.services = [], [], {}
        self.diff = [] if module._diff else None  # secrets' content hidden (mode 0600: ray/node.file_diff)
        self.systemd = Systemd(module)
        self.dir = os.path.join(self.p["config_dir"], "metrics")

    def fail(self, msg):
        self.module.fail_json(msg=msg, files=self.files, installed=self.installed, services=self.services,
                              changed=bool(self.files or self.installed or self.services) and not self.check)

    def put(self, path, text, mode, uid=None):
        try:
            changed = put(path, text, mode, uid, self.check, self.diff)
        except OSError as e:
            self.fail("%s cannot be written: %s" % (path, e.strerror or e))
        if changed:
            self.files.append(path)
        return changed

    def read(self, path):
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return ""

    def did(self, unit, what):
        self.services.setdefault(unit, []).append(what)

    def uid(self, user, fallback="root"):
        """(name, uid) of ``user``, else of ``fallback``."""
        for name in (user, fallback):
            try:
                return name, pwd.getpwnam(name).pw_uid
            except KeyError:
                continue
        self.fail("user %s does not exist on this node" % user)
        return None

    # -- packages and the distribution's services --------------------------------------------------------------
    def mask_distro(self, kind):
        for unit in metrics.DISTRO_UNITS[kind]:
            if self.systemd.state("is-enabled", unit) == "masked":
                continue
            self.did(unit, "mask")
            self.systemd.run("mask", unit)
            if self.systemd.state("is-active", unit) == "active":
                self.did(unit, "stop")
                self.systemd.run("stop", unit)

    def binary(self, kind):
        found = self.module.get_bin_path(metrics.BINARIES[kind])
        if found:
            return found
        package = metrics.PACKAGES[kind]
        apt = self.module.get_bin_path("apt-get")
        if not self.p["install"] or not apt:
            self.fail("%s is not installed on this node%s: install the %s package, or set ray_metrics: false"
                      % (metrics.BINARIES[kind], "" if apt else " and it has no apt-get to install it with", package))
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
            self.fail("%s could not be installed with apt-get: %s; install it and run again, or set ray_metrics: false"
                      % (package, ((err or out).strip().splitlines() or ["no output"])[-1][:300]))
        return found

    # -- a service whose files were written ------------------------------------------------------------------
    def apply(self, unit, unit_changed, web_changed, config_changed=False, reloadable=False):
        active = self.systemd.state("is-active", unit) == "active"
        enabled = self.systemd.state("is-enabled", unit) == "enabled"
        reload_daemon, action, enable = metrics.service_action(active, enabled, unit_changed, web_changed,
                                                               config_changed, reloadable)
        if reload_daemon:
            self.systemd.run("daemon-reload")
        if enable:
            self.did(unit, "enable")
            self.systemd.run("enable", unit)
        if action:
            self.did(unit, action)
            self.systemd.run(action, unit)

    def mkdir(self):
        try:
            if ensure_dir(self.p["config_dir"], 0o755, check_mode=self.check, keep_mode=True):
                self.files.append(self.p["config_dir"])
            if ensure_dir(self.dir, 0o755, check_mode=self.check):
                self.files.append(self.dir)
        except OSError as e:
            self.fail("%s cannot be used: %s" % (self.dir, e.strerror or e))

    def web(self, name, user_uid):
        """The web config ``name`` for the password, owned by the service's user, 0600."""
        path = os.path.join(self.dir, name)
        try:
            hashed = metrics.kept_hash(self.read(path), self.p["password"], self.bcrypt)
            text = metrics.web_config(hashed)
        except metrics.MetricsError as e:
            self.fail("the metrics password cannot be hashed here: %s" % e)
        return path, self.put(path, text, 0o600, user_uid)

    # -- the two services ------------------------------------------------------------------------------------
    def exporter(self):
        p = self.p
        self.mask_distro("exporter")
        binary = self.binary("exporter")
        user, uid = self.uid(p["exporter_user"])
        web_path, web_changed = self.web(metrics.EXPORTER_WEB, uid)
        unit = metrics.exporter_unit(binary, p["address"], p["port"], web_path, user)
        unit_changed = self.put(os.path.join(p["unit_dir"], metrics.EXPORTER_UNIT), unit, 0o644)
        self.apply(metrics.EXPORTER_UNIT, unit_changed, web_changed)

    def prometheus(self, dcgm_here):
        p, q = self.p, dict(self.p["prometheus"])
        for key, t in PROMETHEUS.fields.items():
            if q.get(key) is None and t.default is not vocabulary.NOTSET:
                q[key] = t.default
        self.mask_distro("prometheus")
        binary = self.binary("prometheus")
        user, uid = self.uid(q["user"], q["user"])
        password_file = os.path.join(self.dir, metrics.PASSWORD)
        self.put(password_file, p["password"], 0o600, uid)
        web_path, web_changed = self.web(metrics.PROMETHEUS_WEB, uid)
        members = [dict(m, dcgm=bool(m.get("dcgm")) or m.get("host") in q["dcgm_hosts"]
                        or (dcgm_here and m.get("address") == p["address"])) for m in q["members"]]
        try:
            config = metrics.prometheus_config(members, q["exporter_port"], q["dcgm_port"], password_file,
                                               q["ray_sd_file"], q["scrape_interval"])
        except metrics.MetricsError as e:
            self.fail(str(e))
        config_changed = self.put(os.path.join(self.dir, metrics.PROMETHEUS_CONFIG), config, 0o644)
        self.storage(q["storage_dir"], uid)
        unit = metrics.prometheus_unit(binary, p["address"], q["port"], os.path.join(self.dir, metrics.PROMETHEUS_CONFIG),
                                       web_path, q["storage_dir"], q["retention"], user)
        unit_changed = self.put(os.path.join(p["unit_dir"], metrics.PROMETHEUS_UNIT), unit, 0o644)
        self.apply(metrics.PROMETHEUS_UNIT, unit_changed, web_changed, config_changed, reloadable=True)

    def storage(self, path, uid):
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
    def remove_unit(self, unit):
        path = os.path.join(self.p["unit_dir"], unit)
        if not os.path.lexists(path):
            return False
        self.did(unit, "stop")
        self.systemd.run("disable", "--now", unit)
        self.files.append(path)
        if not self.check:
            os.unlink(path)
        return True

    def remove_file(self, path):
        if os.path.lexists(path) and not os.path.isdir(path):
            self.files.append(path)
            if not self.check:
                os.unlink(path)

    def absent(self):
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


def query(module):
    """The latest utilisation of every node from the head's Prometheus, one line per node: the members its scrape config
    names (by their inventory names), then any O(names) adds."""
    p = module.params
    try:
        with open(os.path.join(p["config_dir"], "metrics", metrics.PROMETHEUS_CONFIG), encoding="utf-8") as handle:
            members = metrics.members_in(handle.read())
    except OSError:
        module.fail_json(msg="no Prometheus on this node (%s/metrics/%s is missing): run site.yml with ray_metrics on"
                         % (p["config_dir"], metrics.PROMETHEUS_CONFIG))
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
        module.fail_json(msg="the head's private address is unknown (no address given, none in %s)" % p["ray_fact_path"])
    try:
        with open(os.path.join(p["config_dir"], "metrics", metrics.PASSWORD), encoding="utf-8") as handle:
            password = handle.read().strip()
    except OSError as e:
        module.fail_json(msg="the metrics password cannot be read on this head (%s): run site.yml with ray_metrics on"
                         % (e.strerror or e))
    module.no_log_values.add(password)
    base = "http://%s" % metrics.host_port(address, p["prometheus_port"])
    headers = {"Authorization": metrics.authorization(password)}
    module.no_log_values.add(headers["Authorization"])
    end = time.time()
    start = p["start"] if 0 < p["start"] < end - 1 else end - p["window"]
    answers, problems = {}, []
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
    module.exit_json(changed=False, lines=metrics.utilisation_lines(structure, hosts), problems=problems + unread,
                     series=structure)


def main():
    module = ARGS.new_module(AnsibleModule)
    p = module.params
    if p["state"] == "query":
        query(module)
    node = Node(module)
    if p["state"] == "absent":
        node.absent()
        module.exit_json(changed=bool(node.files or node.services), files=node.files, installed=[], services=node.services,
                         **(dict(diff=node.diff) if node.diff else {}))
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
    fact = dict(exporter=True, prometheus=p["prometheus"] is not None, dcgm=dcgm,
                storage_dir=(p["prometheus"] or {}).get("storage_dir") or "")
    try:
        if ensure_dir(os.path.dirname(p["fact_path"]), 0o755, check_mode=module.check_mode, keep_mode=True):
            node.files.append(os.path.dirname(p["fact_path"]))
    except OSError as e:
        node.fail("%s cannot be used: %s" % (os.path.dirname(p["fact_path"]), e.strerror or e))
    node.put(p["fact_path"], fact_text(fact), 0o644)
    changed = bool(node.files or node.installed or node.services)
    module.exit_json(changed=changed, files=node.files, installed=node.installed, services=node.services, dcgm=dcgm,
                     **(dict(diff=node.diff) if node.diff else {}))


if __name__ == "__main__":
    main()
