#!/usr/bin/python
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: ray_node
short_description: Converge one Ray node (head or worker) under systemd in one call
version_added: 0.3.0
description:
  - Everything the roles M(rlinfra.verl.ray_head) and M(rlinfra.verl.ray_worker) do on a node, in one round trip - the
    configuration and temp directories, the token, the public and secret environment files, the systemd unit,
    the nftables table of Ray's ports (O(firewall)), the restart decision, the start, the local fact, the wait
    and the record of what Ray now runs.
  - Every file is written whole (a temporary file renamed over it), and only when its content, mode or owner
    differ; secrets get their mode before their first byte.
  - Ray restarts only when what it runs changed - the unit, the environment files or the token changed here, or
    the record of the last converge (M(rlinfra.verl.ray_node_state)) differs from O(restart_inputs) and the
    fingerprint of the Python environment; RV(reasons) says why. Where it would restart while O(running_jobs)
    run and O(restart_running_jobs) is false, the files are updated, the record is dropped (so the next run
    foresees the restart) and the module fails with one line saying what to do.
  - Sessions started before O(unit) applied a umask left logs others can read; those files are closed to others.
  - The templates are rendered on the controller (the roles pass their text); this module decides and applies.
author:
  - rlinfra maintainers (@rlinfra)
options:
  role:
    description: The node's role; the unit is C(ray-<role>.service).
    type: str
    choices: [head, worker]
    required: true
  config_dir:
    description: Directory of the token, the environment files, the firewall rules and the record (mode 0755).
    type: path
    default: /etc/ray
  temp_dir:
    description: Ray's temp directory; created private (0700, owned by O(user)) when missing, left alone otherwise.
    type: path
    required: true
  user:
    description: The user Ray runs as; it owns the token, the secret environment and the temp directory.
    type: str
    default: root
  unit:
    description: The systemd unit's text; C(@NUM_GPUS@) in it is replaced by the GPU count (O(num_gpus)).
    type: str
    required: true
  num_gpus:
    description:
      - V(auto) counts the node's GPUs - its C(/dev/nvidiaN) devices, or, on a node with C(/dev/kfd) (AMD, ROCm),
        the cards C(rocm-smi) lists when it is installed, else the GPU nodes of the KFD topology in sysfs, else the
        render nodes under C(/dev/dri) (those sysfs names another vendor for left out); else the number given (0 to 1024).
    type: str
    default: auto
  rocm_env:
    description:
      - On a node with C(/dev/kfd) only, added to the public environment file for the names O(env) and
        O(secret_env) do not set, with C(HIP_VISIBLE_DEVICES) naming the GPUs Ray is given (C(0..n-1)) unless
        set there.
      - There, O(env) or O(secret_env) setting C(CUDA_VISIBLE_DEVICES) or C(ROCR_VISIBLE_DEVICES) is an error
        (one line, nothing changed) - Ray hands each worker its GPUs through C(HIP_VISIBLE_DEVICES) alone and verl
        refuses the others beside it.
    type: dict
    default: {}
  env:
    description: The public environment file (C(<config_dir>/ray.env), mode 0644).
    type: str
    default: ""
  secret_env:
    description: The secret environment file (C(<config_dir>/ray-secrets.env), mode 0600, owned by O(user)).
    type: str
    default: ""
  token:
    description: The cluster token (C(<config_dir>/auth_token), mode 0600, owned by O(user)); empty writes none (authentication off).
    type: str
    default: ""
  metrics_password:
    description:
      - The basic-auth password of the cluster's metrics (a head with C(ray_metrics) on), kept in
        C(<config_dir>/metrics/password) (mode 0600, owned by O(user); the directory 0755), before the secret
        environment that carries it is written. Empty writes none. Not a reason to restart Ray.
    type: str
    default: ""
    version_added: 0.14.0
  metrics_dir:
    description:
      - Make C(<config_dir>/metrics) (mode 0755), where role C(ray_metrics) writes the metrics stack's configs (C(ray_metrics)
        on); O(metrics_password) makes it too.
    type: bool
    default: false
    version_added: 0.14.0
  fact:
    description: The node's C(rlinfra_ray) local fact, written to O(fact_path) as JSON.
    type: dict
    default: {}
  fact_path:
    description: Where the local fact goes.
    type: path
    default: /etc/ansible/facts.d/rlinfra_ray.fact
  unit_dir:
    description: Where the systemd units go.
    type: path
    default: /etc/systemd/system
  firewall:
    description:
      - The nftables table of Ray's ports (the options of M(rlinfra.verl.ray_firewall) with V(state=present)); not
        set means no firewall. A missing C(nft) is installed with the node's package manager first (best effort).
      - Where the table is applied, a oneshot unit (C(rlinfra-ray-firewall.service)) loads it again at boot.
      - An empty C(ssh_connection) and C(controller) read E(SSH_CONNECTION) from the processes this one runs under.
      - Its values are checked as M(rlinfra.verl.ray_firewall) checks its options, before anything changes; an unknown
        key is refused. An C(allow) entry that opens Ray's ports to the whole internet or a large part of it (a public
        network wider than C(/8), or C(/16) for IPv6 - C(0.0.0.0/0), C(::/0)...) is refused unless C(allow_world) is
        true in this mapping.
    type: dict
  restart_inputs:
    description: What decides a restart apart from the Python environment, as named parts (digests of secrets only).
    type: dict
    default: {}
  python_env_state:
    description:
      - The record of the environment Ray runs from - a venv's (C(<venv>/rlinfra-state.json)) or, in container mode, the
        image's (C(<config_dir>/rlinfra-image.json), M(rlinfra.verl.ray_container)); its fingerprint is part of what
        decides a restart.
    type: path
  container_engine:
    description:
      - Container mode - the engine (V(podman) or V(docker)) of the O(unit)'s run line. The node puts its own part in
        place of the unit's C(@CONTAINER_ARGS@) - every name of O(env) and O(secret_env) as C(--env NAME) (the values
        reach the engine through the unit's environment files, never as arguments) and its GPUs (NVIDIA through CDI or
        C(--gpus), AMD through C(/dev/kfd), C(/dev/dri) and the video group). Empty - the venv.
      - After a start or restart the module waits (within O(timeout)) until the engine runs the container of
        O(fact)'s C(container.name) from its C(container.image_id), and fails with one line when it does not (an old
        container that outlived its stop would still answer on the GCS port).
    type: str
    choices: ["", podman, docker]
    default: ""
  foreseen:
    description: In check mode, the restart reasons the check before the run foresaw (a dry run installs nothing, so the fingerprint cannot tell).
    type: list
    elements: str
    default: []
  running_jobs:
    description: Submission ids of the jobs running on the node's cluster.
    type: list
    elements: str
    default: []
  restart_running_jobs:
    description: Restart Ray even while O(running_jobs) run (they fail).
    type: bool
    default: false
  wait:
    description:
      - After a start, V(alive) waits until the dashboard (O(address)) lists O(node_ip) alive; V(gcs) until
        O(gcs_address) accepts connections (enough for workers to join); V(none) does not wait.
    type: str
    choices: [alive, gcs, none]
    default: alive
  node_ip:
    description: The node's address in the cluster (for O(wait=alive)).
    type: str
    default: ""
  gcs_address:
    description:
      - C(host:port) of the cluster's GCS (for O(wait=gcs)).
      - On a worker (O(role=worker)) that is to start or restart, Ray starts only once this address accepts
        connections (within O(timeout)). A worker started before its head's GCS listens fails after Ray's own 20 s
        of retries and is restarted by systemd, which costs more than the wait. When the GCS never listens, the
        module fails with one line and Ray is not started.
    type: str
    default: ""
  timeout:
    description: Seconds to wait (for the head's GCS before a worker starts, for the container in container mode, and
      for O(wait)).
    type: int
    default: 120
extends_documentation_fragment:
  - rlinfra.verl.ray_dashboard
attributes:
  check_mode:
    support: full
    description: Reports what would be written, installed, restarted; changes nothing and does not wait.
  diff_mode:
    support: full
    description: Each file written (the unit, the environment files, the local fact, the boot unit) with its
      change; files only their owner may read (the token, the secrets' environment, the converge record) show
      that they change, not their content.
seealso:
  - module: rlinfra.verl.ray_node_state
  - module: rlinfra.verl.ray_firewall
"""

EXAMPLES = r"""
- name: Run the Ray head under systemd
  rlinfra.verl.ray_node:
    role: head
    temp_dir: /workspace/ray
    unit: "{{ lookup('ansible.builtin.template', 'ray.service.j2') }}"
    env: "RAY_AUTH_MODE=token\n"
    token: "{{ ray_token }}"
    fact: {role: head, cluster: default, dashboard_url: "http://10.0.0.5:8265"}
    restart_inputs: {unit: {num_gpus: auto}}
    python_env_state: /opt/rlinfra/venv/rlinfra-state.json
    wait: gcs
    gcs_address: 10.0.0.5:6379
  no_log: true
"""

RETURN = r"""
gpus:
  description: The GPU count the unit was given.
  returned: always
  type: int
  sample: 8
gpu_vendor:
  description: The vendor of the node's GPUs as found - V(nvidia), V(amd) (C(/dev/kfd)), or empty.
  returned: always
  type: str
  sample: amd
files:
  description: The files and directories written (or that would be).
  returned: always
  type: list
  elements: str
  sample: [/etc/ray/ray.env, /etc/systemd/system/ray-head.service]
reasons:
  description: Why Ray was restarted (empty when it was not); see M(rlinfra.verl.ray_node_state) for the record's reasons.
  returned: always
  type: list
  elements: str
  sample: [unit file, ray_env]
started:
  description: Whether Ray was started or restarted.
  returned: always
  type: bool
firewall:
  description: What the firewall part did (M(rlinfra.verl.ray_firewall)'s return values), empty without O(firewall).
  returned: always
  type: dict
closed_logs:
  description: How many older session log files were closed to other users.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container as ray_container
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import DASHBOARD_ARGS
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.firewall import PortsType
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.node_apply import check_num_gpus, converge

USER = dict(
    empty=False,
    max_len=33,
    pattern=r"^[a-z_][a-z0-9_-]{0,31}\$?$",
    what="a user name (lowercase letters, digits, _ and -)",
)
# The options of rlinfra.verl.ray_firewall with state=present (ray_firewall declares them for itself: a module
# cannot import another); none set takes ray_firewall's default (module_utils/ray/node_apply.py FIREWALL_DEFAULTS,
# path in config_dir).
FIREWALL = vocabulary.Options(
    dict(
        ports=PortsType(required=True),
        # An empty address passes the type for module_utils/ray/firewall.py's own line (the member's facts are missing).
        members=vocabulary.ListOf(
            vocabulary.Options(
                dict(
                    host=vocabulary.Text(empty=False, max_len=255, required=True),
                    address=vocabulary.Address(empty=True),
                ),
                suboptions=False,
            )
        ),
        controller=vocabulary.Address(empty=True),
        ssh_connection=vocabulary.Text(max_len=512),
        # Refused when it opens Ray's ports to a large part of the internet, unless allow_world (beside it) is true.
        allow=vocabulary.Networks(world_switch="allow_world"),
        allow_world=vocabulary.Switch(),
        protected_ports=vocabulary.ListOf(vocabulary.Port()),
        path=vocabulary.AbsPath("config"),
        table=vocabulary.Text(
            empty=False,
            max_len=41,
            pattern=r"^[A-Za-z][A-Za-z0-9_]{0,40}$",
            what="an nftables table name (letters, digits and _, starting with a letter, at most 41)",
        ),
    ),
    suboptions=False,
)
# What the roles write to the node's rlinfra_ray local fact (read back by the modules that talk to the dashboard).
FACT = vocabulary.Options(
    dict(
        role=vocabulary.Choice(("head", "worker")),
        cluster=vocabulary.Name(),
        node_ip=vocabulary.Address(empty=True),
        gcs_address=vocabulary.HostPort(empty=True),
        dashboard_url=vocabulary.Url(schemes=("http", "https"), path=False, default_scheme="http", empty=True),
        token_path=vocabulary.AbsPath("reads", empty=True),
        venv=vocabulary.AbsPath("reads", empty=True),
        temp_dir=vocabulary.AbsPath("reads", empty=True),
        idle_guard=vocabulary.Switch(),
        # Container mode: where the node's Ray runs (the engine, the container's name, the image and its ID).
        container=ray_container.fact_arg(),
    ),
    suboptions=False,
    default={},
)

ARGS = vocabulary.Args(
    role=vocabulary.Choice(("head", "worker"), required=True),
    config_dir=vocabulary.AbsPath("config", default="/etc/ray"),
    temp_dir=vocabulary.AbsPath("owns", required=True),
    user=vocabulary.Text(default="root", **USER),
    unit=vocabulary.Text(lines=True, empty=False, max_len=1 << 20, required=True, sample="ExecStart=ray start\n"),
    num_gpus=vocabulary.Custom("str", check_num_gpus, ["soon", "-1", "1.5", "1025", " 8"], "auto", default="auto"),
    rocm_env=vocabulary.EnvMap(default={}),
    env=vocabulary.Text(lines=True, max_len=1 << 20, default=""),
    secret_env=vocabulary.Secret(multiline=True, max_len=1 << 20, default=""),
    token=vocabulary.Secret(default=""),
    metrics_password=vocabulary.Secret(default=""),
    metrics_dir=vocabulary.Switch(default=False),
    fact=FACT,
    fact_path=vocabulary.AbsPath("config", default="/etc/ansible/facts.d/rlinfra_ray.fact"),
    unit_dir=vocabulary.AbsPath("config", default="/etc/systemd/system"),
    firewall=FIREWALL,
    restart_inputs=vocabulary.MapOf(
        vocabulary.Name(),
        vocabulary.Raw(reason="a part is hashed whole, whatever its shape (its digest is compared)"),
        default={},
    ),
    python_env_state=vocabulary.AbsPath("reads"),
    container_engine=vocabulary.Choice(("", "podman", "docker"), default=""),
    foreseen=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=200), default=[]),
    running_jobs=vocabulary.ListOf(vocabulary.Text(empty=False, max_len=200), default=[]),
    restart_running_jobs=vocabulary.Switch(default=False),
    wait=vocabulary.Choice(("alive", "gcs", "none"), default="alive"),
    node_ip=vocabulary.Address(empty=True, default=""),
    gcs_address=vocabulary.HostPort(empty=True, default=""),
    timeout=vocabulary.Seconds(0, integer=True, default=120),
    **DASHBOARD_ARGS,
)
ARGUMENT_SPEC = ARGS.spec


def main():
    converge(ARGS.new_module(AnsibleModule))


if __name__ == "__main__":
    main()
