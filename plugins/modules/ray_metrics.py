#!/usr/bin/python
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

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.observe.metrics_node import run

DURATION = r"^([0-9]+(ms|s|m|h|d|w|y))+$"
PROMETHEUS = vocabulary.Options(
    dict(
        port=vocabulary.Port(default=9090),
        user=vocabulary.Text(
            empty=False,
            max_len=33,
            pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
            what="a user name (lowercase letters, digits, _ and -)",
            default="root",
        ),
        storage_dir=vocabulary.AbsPath("owns", spaces=False, required=True),
        retention=vocabulary.Text(
            empty=False, max_len=32, pattern=DURATION, what="a Prometheus duration such as 15d or 12h", default="15d"
        ),
        scrape_interval=vocabulary.Text(
            empty=False, max_len=32, pattern=DURATION, what="a Prometheus duration such as 15s", default="15s"
        ),
        members=vocabulary.ListOf(
            vocabulary.Options(
                dict(
                    host=vocabulary.Text(empty=False, max_len=255, required=True),
                    address=vocabulary.Address(empty=True),
                    dcgm=vocabulary.Switch(default=False),
                ),
                suboptions=False,
            ),
            required=True,
        ),
        dcgm_hosts=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=255), default=[]),
        exporter_port=vocabulary.Port(default=9100),
        dcgm_port=vocabulary.Port(default=9400),
        ray_sd_file=vocabulary.AbsPath("reads", spaces=False, required=True),
    ),
    suboptions=False,
)

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("present", "query", "absent"), default="present"),
    address=vocabulary.Address(empty=True),
    port=vocabulary.Port(default=9100),
    password=vocabulary.Secret(),
    config_dir=vocabulary.AbsPath("config", spaces=False, default="/etc/ray"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    fact_path=vocabulary.AbsPath("config", default="/etc/ansible/facts.d/rlinfra_metrics.fact"),
    install=vocabulary.Switch(default=True),
    exporter_user=vocabulary.Text(
        empty=False,
        max_len=33,
        pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
        what="a user name (lowercase letters, digits, _ and -)",
        default="prometheus",
    ),
    prometheus=PROMETHEUS,
    names=vocabulary.MapOf(
        vocabulary.Text(empty=False, max_len=255), vocabulary.Text(empty=False, max_len=255), default={}
    ),
    prometheus_port=vocabulary.Port(default=9090),
    window=vocabulary.Seconds(30, 86400, integer=True, default=300),
    # Epoch seconds: from 0 (unset) to the year 2286 - a value outside is a mistake, not a long window.
    start=vocabulary.Number(0, 1e10, default=0),
    ray_fact_path=vocabulary.AbsPath("reads", default="/etc/ansible/facts.d/rlinfra_ray.fact"),
    storage_dir=vocabulary.AbsPath("owns", spaces=False),
    purge=vocabulary.Switch(default=False),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run(ARGS.new_module(AnsibleModule), PROMETHEUS)


if __name__ == "__main__":
    main()
