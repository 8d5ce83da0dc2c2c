# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: slurm
short_description: The nodes of a Slurm job as one Ray cluster (ray_head and ray_workers)
version_added: 0.3.0
description:
  - Reads one Slurm job - by O(job_id), by O(job_name), or the allocation it runs in (E(SLURM_JOB_ID)) - through Slurm's
    own client tools (C(scontrol show job), with C(--json) where the installed Slurm offers it, C(squeue),
    C(scontrol show hostnames), C(scontrol show node)), on the controller or on O(login_host) over SSH.
  - The job's first node (Slurm's own order of its node list) goes to group C(ray_head), the others to C(ray_workers);
    all of them form one Ray cluster, C(ray_cluster) = O(ray_cluster), else the job's name, else its id.
  - Host variables - C(ansible_host) (the node's C(NodeAddr)), C(slurm_job_id), C(slurm_job_name), C(slurm_partition),
    C(slurm_gpus_per_node) (the job's per-node GPU request, else its GPU allocation over its nodes), C(slurm_node_addr).
  - A job that is pending, has ended or is unknown fails the source with one line saying so and what to do.
  - Only files named C(*slurm.yml) or C(*slurm.yaml) are read.
author:
  - rlinfra maintainers (@rlinfra)
extends_documentation_fragment:
  - ansible.builtin.constructed
  - ansible.builtin.inventory_cache
options:
  plugin:
    description: The name of this plugin.
    type: str
    required: true
    choices: [rlinfra.verl.slurm]
  job_id:
    description: The Slurm job whose nodes form the cluster; default the allocation this runs in.
    type: str
    env:
      - name: SLURM_JOB_ID
  job_name:
    description: The pending or running Slurm job of this name (exactly one), instead of O(job_id).
    type: str
  ray_cluster:
    description: The Ray cluster's name (C(ray_cluster)); default the job's name, else its id.
    type: str
  login_host:
    description:
      - Run Slurm's tools on this node over SSH (C(user@host)), for a controller without them; empty runs them here.
    type: str
    default: ""
  ssh_args:
    description: Arguments to C(ssh) for O(login_host) (a key, options).
    type: list
    elements: str
    default: ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
  timeout:
    description: Seconds one Slurm command may take.
    type: int
    default: 30
notes:
  - A failure adds no host; Ansible shows its line as a warning, and the collection's playbooks that need a cluster
    then stop with one line, as no host is in C(ray_head).
  - "The flow: allocate (C(salloc -N 3 --gres=gpu:8) or C(sbatch -N 3 --job-name rl --wrap 'sleep infinity')), then
    C(site.yml) and C(submit.yml) with this inventory, then C(teardown.yml) and C(scancel)."
"""

EXAMPLES = r"""
# inventories/rl.slurm.yml - the job named "rl" (sbatch --job-name rl -N 4 --gres=gpu:8 --wrap 'sleep infinity')
plugin: rlinfra.verl.slurm
job_name: rl

---
# By id, with Slurm's tools on the login node, and the nodes reached as user "ml"
plugin: rlinfra.verl.slurm
job_id: "4242"
login_host: ml@login01
compose:
  ansible_user: "'ml'"
keyed_groups:
  - key: slurm_partition
    prefix: partition
"""

import difflib

from ansible.errors import AnsibleError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node.slurm import Slurm, SlurmError
from ansible_collections.rlinfra.verl.plugins.plugin_utils.inventory_load import failed_before, give_up

PLUGIN = "rlinfra.verl.slurm"
# The options' types (module_utils/common/vocabulary.py); the constructed and cache options Ansible checks itself, but a
# negative cache_timeout it would take.
TYPES = {
    "job_id": vocabulary.Text(
        pattern=r"^[0-9]+(_[0-9]+)?$", what="a Slurm job id (digits, or digits_digits for an array task)"
    ),
    "job_name": vocabulary.Text(max_len=200),
    "ray_cluster": vocabulary.Name(empty=True),
    "login_host": vocabulary.Text(
        pattern=r"^([A-Za-z0-9_.-]+@)?[A-Za-z0-9][A-Za-z0-9_.-]*$",
        what="a login node as host or user@host (not an ssh option)",
    ),
    "ssh_args": vocabulary.ListOf(vocabulary.Text(empty=False)),
    "timeout": vocabulary.Int(1, 3600),
    "cache_timeout": vocabulary.Int(0),
}
CACHE_FORMAT = 1
OPTIONS = (
    "plugin",
    "job_id",
    "job_name",
    "ray_cluster",
    "login_host",
    "ssh_args",
    "timeout",
    "compose",
    "groups",
    "keyed_groups",
    "strict",
    "leading_separator",
    "use_extra_vars",
    "cache",
    "cache_plugin",
    "cache_timeout",
    "cache_connection",
    "cache_prefix",
)


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    """The nodes of one Slurm job as a Ray cluster."""

    NAME = PLUGIN

    def verify_file(self, path):
        return super().verify_file(path) and str(path).endswith(("slurm.yml", "slurm.yaml"))

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        failed_before(inventory, path)
        try:
            self._parse(path, cache)
        except (AnsibleError, SlurmError) as exc:
            give_up(inventory, path, "%s: cannot load %s: %s" % (PLUGIN, path, " ".join(str(exc).split())))

    def _parse(self, path, cache):
        config = self.loader.load_from_file(path, cache="none") or {}
        if not isinstance(config, dict):
            raise SlurmError("the file must be a YAML mapping of options")
        for key in config:
            if key not in OPTIONS:
                close = difflib.get_close_matches(str(key), OPTIONS, 1)
                raise SlurmError(
                    "unknown option %r%s; allowed: %s"
                    % (key, " (did you mean %r?)" % close[0] if close else "", ", ".join(OPTIONS[1:7]))
                )
        self._read_config_data(path)
        for name, t in TYPES.items():
            value = self.get_option(name)
            if value is not None:
                try:
                    t.validate(value)
                except vocabulary.Bad as e:
                    raise SlurmError(t.line(name, value, e)) from e
        job_id, job_name = self.get_option("job_id") or "", self.get_option("job_name") or ""
        if config.get("job_id") and job_name:
            raise SlurmError("set job_id or job_name, not both")
        if job_name:
            job_id = ""  # a job_name in the file wins over the allocation this runs in (SLURM_JOB_ID)
        key = self.get_cache_key(path)
        use_cache = self.get_option("cache") and cache
        loaded = None
        if use_cache:
            try:
                loaded = self._cache[key]
            except KeyError:
                loaded = None
            if not (
                isinstance(loaded, dict)
                and loaded.get("format") == CACHE_FORMAT
                and loaded.get("query") == [str(job_id), job_name]
            ):
                loaded = None
        if loaded is None:
            slurm = Slurm(self.get_option("login_host"), self.get_option("ssh_args"), self.get_option("timeout"))
            job, nodes = slurm.allocation(str(job_id), job_name)
            loaded = {"format": CACHE_FORMAT, "query": [str(job_id), job_name], "job": job, "nodes": nodes}
            if self.get_option("cache"):
                self._cache[key] = loaded
        self._populate(loaded["job"], loaded["nodes"])

    def _populate(self, job, nodes):
        inventory = self.inventory
        cluster = self.get_option("ray_cluster") or job["name"] or job["job_id"]
        try:
            cluster = vocabulary.Name().check(cluster)
        except vocabulary.Bad:
            # The job's name (sbatch --job-name "my run") is Slurm's free text; the cluster's name lands in paths and
            # units: the job's id stands in, said once, rather than a check of the roles failing later on every host.
            self.display.warning(
                "%s: Slurm job %s is named %s, which is no Ray cluster name (letters, digits, _ . -): "
                "ray_cluster is %s; set the ray_cluster option to choose one"
                % (PLUGIN, job["job_id"], vocabulary._shown(job["name"]), job["job_id"])
            )
            cluster = job["job_id"]
        head_group, workers_group = inventory.add_group("ray_head"), inventory.add_group("ray_workers")
        strict = self.get_option("strict")
        for i, node in enumerate(nodes):
            name = node["name"]
            inventory.add_host(name, group=head_group if i == 0 else workers_group)
            for var, value in (
                ("ansible_host", node["addr"]),
                ("slurm_node_addr", node["addr"]),
                ("slurm_job_id", job["job_id"]),
                ("slurm_job_name", job["name"]),
                ("slurm_partition", job["partition"]),
                ("slurm_gpus_per_node", job["gpus_per_node"]),
                ("ray_cluster", cluster),
            ):
                inventory.set_variable(name, var, wrap_var(value))
            hostvars = inventory.get_host(name).get_vars()
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)
