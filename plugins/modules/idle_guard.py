#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: idle_guard
short_description: Install (or remove) the timer that releases an idle cluster's Hyperbolic instances
version_added: 0.9.0
description:
  - On a cluster's head, O(state=present) installs a systemd timer (C(rlinfra-idle-guard.timer), every
    O(check_every) seconds) whose service checks Ray's jobs on the head's dashboard. When no job is C(PENDING) or
    C(RUNNING) and the last one ended (or, without jobs, Ray started) at least O(idle_release_after) seconds ago, it
    stops Ray on the head and releases every Hyperbolic instance tagged with O(label) through the API, saying why in
    one journal line (C(journalctl -u rlinfra-idle-guard)). When it cannot read the jobs it releases nothing.
  - It runs the node's C(python3) on a copy of the collection's Hyperbolic client and the guard
    (C(module_utils/hyperbolic/idle_guard.py)), which the action plugin sends from the controller, under O(root). The API key
    lives only in O(config_path) (root, mode 0600), never in a unit or an argument.
  - O(state=absent) stops and removes the timer, its units, the config and the copy.
  - This releases machines that may hold data on their local disks; keep what matters on the shared volume.
author:
  - rlinfra maintainers (@rlinfra)
options:
  state:
    description: Installed or removed.
    type: str
    choices: [present, absent]
    default: present
  label:
    description: The tag of the instances to release (provision.yml tags them with the Ray cluster's name).
    type: str
  idle_release_after:
    description: Seconds without a running job after which the cluster is released.
    type: int
  check_every:
    description: Seconds between checks.
    type: int
    default: 300
  api_key:
    description: Hyperbolic API key the head uses to release the instances.
    type: str
  api_url:
    description: Base URL of the Hyperbolic API.
    type: str
    default: https://api.hyperbolic.xyz
  dashboard_url:
    description: The head's Ray dashboard, as the head reaches it.
    type: str
  token_path:
    description: The head's copy of the cluster token (empty without token authentication).
    type: str
    default: ""
  root:
    description: Where the copy of the guard's code lives.
    type: path
    default: /opt/rlinfra/idle-guard
  config_path:
    description: The guard's configuration (root-only).
    type: path
    default: /etc/rlinfra/idle-guard.json
  unit_dir:
    description: Where the units go.
    type: path
    default: /etc/systemd/system
  files:
    description: The code to copy, relative path to content. The action plugin fills it in from the collection.
    type: dict
    default: {}
attributes:
  action:
    support: full
    description: The action plugin reads the guard's code from the collection on the controller.
  check_mode:
    support: full
    description: Says what would change and changes nothing.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Release the cluster after two idle hours
  rlinfra.verl.idle_guard:
    label: exp-a
    idle_release_after: 7200
    api_key: "{{ lookup('ansible.builtin.env', 'HYPERBOLIC_API_KEY') }}"
    dashboard_url: http://10.0.0.5:8265
    token_path: /etc/ray/auth_token
  become: true
"""

RETURN = r"""
files:
  description: The files written or removed.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.idle_guard_install import install

ARGS = vocabulary.Args(
    state=vocabulary.Choice(("present", "absent"), default="present"),
    # Needed with state=present (idle_guard_install.present says which are missing): label, idle_release_after,
    # api_key, dashboard_url.
    label=vocabulary.Name(),
    # 0 (off) is what a removal passes; with state=present the module asks for 1 or more (idle_guard_install.present).
    idle_release_after=vocabulary.Int(0, vocabulary.YEAR, unit="seconds"),
    check_every=vocabulary.Int(10, vocabulary.YEAR, unit="seconds", default=300),
    api_key=vocabulary.Secret(),
    api_url=vocabulary.Url(schemes=("https", "http"), default="https://api.hyperbolic.xyz"),
    dashboard_url=vocabulary.Url(schemes=("http", "https"), path=False),
    # A path on the head, not the token; type str as documented.
    token_path=vocabulary.AbsPath("reads", empty=True, default="", no_log=False, ansible="str"),
    # Both go into the service's unit (Environment=PYTHONPATH=..., ExecStart=... CONFIG): no spaces.
    root=vocabulary.AbsPath("owns", spaces=False, default="/opt/rlinfra/idle-guard"),
    config_path=vocabulary.AbsPath("config", spaces=False, default="/etc/rlinfra/idle-guard.json"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    # Filled by the action: the guard's code, below root.
    files=vocabulary.MapOf(vocabulary.RelPath(), vocabulary.Text(lines=True, max_len=1 << 22), default={}),
)
ARGUMENT_SPEC = ARGS.spec


def main():
    install(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
