#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_metrics_info
short_description: What a Ray node has and needs for its metrics, read in one call that changes nothing
version_added: 0.14.0
description:
  - Read by the role C(rlinfra.verl.ray_metrics) before its templates (docs/OBSERVABILITY.md) - the paths of
    node_exporter and, with O(prometheus), Prometheus (Debian's C(prometheus-node-exporter) and C(prometheus)), the
    packages missing, whether the node has C(apt-get) and NVIDIA's DCGM exporter (C(dcgm-exporter)), the user
    node_exporter runs as, the bcrypt hash each web config gets, which of the collection's metrics units exist and
    run enabled, which of the distribution's own services of those programs are masked or running, and whether Prometheus's data directory
    is (or would be made) the collection's own.
  - The hash is the one the web config holds while it still matches O(password) - bcrypt salts each hash, so a new
    one each run would rewrite the file and restart the service every run - else a new one, made with the node's
    libcrypt in the module's process; the password is never in argv.
author:
  - rlinfra maintainers (@rlinfra)
options:
  password:
    description: The metrics password (user C(rlinfra)).
    type: str
    required: true
  exporter_user:
    description: The user node_exporter runs as (Debian's package makes it); RV(exporter_user) is root without it.
    type: str
    default: prometheus
  prometheus:
    description: The head - Prometheus too.
    type: bool
    default: false
  prometheus_user:
    description: With O(prometheus), the user Prometheus runs as; a user the node does not have fails the call.
    type: str
    default: root
  storage_dir:
    description: With O(prometheus), Prometheus's data directory (see RV(storage_ours)).
    type: path
  files:
    description: Paths to report in RV(files) (the files and directories role ray_metrics writes), read only.
    type: list
    elements: path
    default: []
seealso:
  - module: rlinfra.verl.ray_metrics
extends_documentation_fragment:
  - rlinfra.verl.metrics
  - rlinfra.verl.attributes.READ_ONLY
"""

EXAMPLES = r"""
- name: Read what the head has and needs for its metrics
  rlinfra.verl.ray_metrics_info:
    password: "{{ metrics_password }}"
    prometheus: true
    storage_dir: /workspace/prometheus
  become: true
  register: metrics_info
  no_log: true
"""

RETURN = r"""
runtime:
  description:
    - How the target ran the code - V(script) (a plain Python script through the connection, without Ansible's module
      runtime), V(local) (the action's own process, on the controller itself) or V(module).
  returned: always
  type: str
  sample: script
binaries:
  description: The path of each program (C(exporter), and C(prometheus) with O(prometheus)); empty when missing.
  returned: success
  type: dict
  sample: {exporter: /usr/bin/prometheus-node-exporter}
missing:
  description: The packages whose program is missing.
  returned: success
  type: list
  elements: str
apt:
  description: Whether the node has C(apt-get).
  returned: success
  type: bool
dcgm:
  description: Whether NVIDIA's DCGM exporter is installed.
  returned: success
  type: bool
exporter_user:
  description: The user node_exporter runs as - O(exporter_user), or root where the node has no such user.
  returned: success
  type: str
hashes:
  description: The bcrypt hash for each web config (C(exporter), C(prometheus)).
  returned: success
  type: dict
units:
  description: Whether each of the collection's units (C(exporter), C(prometheus)) exists.
  returned: success
  type: dict
running:
  description: Whether each of the collection's services (C(exporter), C(prometheus)) is active and enabled.
  returned: success
  type: dict
distro_masked:
  description: The distribution's own services of those programs that are masked.
  returned: success
  type: list
  elements: str
distro_active:
  description: The distribution's own services of those programs that are running.
  returned: success
  type: list
  elements: str
storage_ours:
  description: Whether O(storage_dir) is the collection's own, or would be when made (missing or empty).
  returned: success
  type: bool
files:
  description:
    - For each path of O(files), what it is - C(type) (V(file) or V(directory)), C(mode) (such as V(0644)), C(owner),
      C(group) and a file's C(sha1) - or null when it does not exist (or is a link or something else).
  returned: success
  type: dict
  sample: {/etc/ray/metrics/prometheus.yml: {type: file, mode: "0644", owner: root, group: root, sha1: 3f786850e387550fdab836ed7e6dc881de23001b}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import run_module
from ansible_collections.rlinfra.verl.plugins.module_utils.observe.metrics_info import info

USER = dict(
    empty=False,
    max_len=33,
    pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
    what="a user name (lowercase letters, digits, _ and -)",
)

ARGS = vocabulary.Args(
    password=vocabulary.Secret(required=True, empty=False),
    config_dir=vocabulary.AbsPath("config", spaces=False, default="/etc/ray"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    exporter_user=vocabulary.Text(default="prometheus", **USER),
    prometheus=vocabulary.Switch(default=False),
    prometheus_user=vocabulary.Text(default="root", **USER),
    storage_dir=vocabulary.AbsPath("owns", spaces=False),
    files=vocabulary.ListOf(vocabulary.AbsPath("reads"), default=[]),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    run_module(AnsibleModule, ARGS, info)


if __name__ == "__main__":
    main()
