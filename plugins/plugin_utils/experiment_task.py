# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What the two experiment actions share: ``verl_experiment`` (find, load, validate; the cluster's head in the
inventory) and ``verl_experiment_render`` (the Ray job from that result, and the preflight checks). The inventory's
view of a cluster (its head, its hosts, their GPUs for a dry run) and the option types both declare."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import int_or_none
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_schema, experiment_source
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

# The collection's own directory: its bundled examples (experiments/) and its playbooks.
COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _ref(value):
    """An experiment's name, or ``rlinfra.verl:NAME`` for a bundled example (experiment_source's rule)."""
    try:
        experiment.validate_name(experiment_source.parse_ref(value)[0])
    except experiment_schema.ExperimentError as e:
        raise vocabulary.Line(str(e)) from e
    return value


def _extra_params(value):
    """verl_job_params: the same grammar as the file's params."""
    errors = []
    experiment_schema.flatten_params(value, errors.append)
    if errors:
        raise vocabulary.Line("extra params (verl_job_params): " + errors[0])
    return value


def role(option: str, variable: str, t: vocabulary.Type) -> vocabulary.Type:
    """``t`` named in its error lines as the option and the role variable that sets it."""
    t.label = "%s (%s)" % (option, variable)
    return t


def name_arg() -> vocabulary.Custom:
    return vocabulary.Custom("str", _ref, ["../etc/passwd", "a b", ""], "smoke", required=True)


def params_arg() -> vocabulary.Custom:
    return vocabulary.Custom("dict", _extra_params, [{"a b": 1}, {"hf_token": "hf_s3cr3t"}, {"~x": 1}], {}, default={})


def checkpoint_args() -> dict[str, vocabulary.Type]:
    """The checkpoint options of verl_experiment and verl_experiment_render (documented once, in the
    rlinfra.verl.experiment_checkpoint documentation fragment)."""
    return dict(
        checkpoint_root=role(
            "checkpoint_root",
            "verl_job_checkpoint_root",
            vocabulary.AbsPath("writes", default=experiment.DEFAULT_CHECKPOINT_ROOT, ansible="str"),
        ),
        checkpoint_cluster=role("checkpoint_cluster", "-e checkpoint_cluster", vocabulary.Name(empty=True, default="")),
    )


def text(value: object) -> str:
    return "" if value is None else str(value)


def locate(
    ref: str, experiments_dir: str, artifacts_dir: str, task_vars: Mapping[str, Any]
) -> experiment_source.Source:
    """Where experiment ``ref`` is, by experiment_source.locate's rule, from where an action on the controller stands:
    the controller's environment, the run's inventory and playbook directories, the current directory, the collection's
    bundled examples."""
    return experiment_source.locate(
        ref,
        explicit_dir=experiments_dir,
        environ=os.environ,
        inventory_sources=task_vars.get("ansible_inventory_sources") or [],
        playbook_dir=text(task_vars.get("playbook_dir")),
        cwd=os.getcwd(),
        collection_root=COLLECTION_ROOT,
        artifacts_dir=artifacts_dir,
    )


def hostvar(task_vars: Mapping[str, Any], host: str, name: str, default: Any = None) -> Any:
    try:
        value = task_vars["hostvars"][host].get(name, default)
    except (KeyError, AnsibleError):
        return default
    return default if value is None else value


def inventory(task_vars: Mapping[str, Any], cluster: str) -> tuple[list[str], list[str], list[str]]:
    """(heads, hosts, clusters): the cluster's hosts of ray_head, all its hosts, the clusters with a head."""
    groups = task_vars.get("groups") or {}
    members: dict[str, bool] = {}
    for group in ("ray_head", "ray_workers"):
        for host in groups.get(group, []):
            if (text(hostvar(task_vars, host, "ray_cluster")) or experiment.DEFAULT_CLUSTER) == cluster:
                members.setdefault(host, group == "ray_head")
    heads = [h for h, is_head in members.items() if is_head]
    clusters = sorted(
        {text(hostvar(task_vars, h, "ray_cluster")) or experiment.DEFAULT_CLUSTER for h in groups.get("ray_head", [])}
    )
    return heads, list(members), clusters


def inventory_nodes(
    task_vars: Mapping[str, Any], hosts: Iterable[str], heads: Collection[str], default_gpus: int | None
) -> list[dict[str, Any]]:
    """The nodes a dry run renders for, as ray_cluster_info would list them, from the inventory."""
    nodes = []
    for host in hosts:
        # ray_num_gpus may be 'auto' (counted on the node at install time): unknown here.
        gpus = int_or_none(hostvar(task_vars, host, "ray_num_gpus"))
        if gpus is None:
            gpus = int_or_none(hostvar(task_vars, host, "hyperbolic_gpu_count"))
        if gpus is None:
            gpus = default_gpus
        cpus = int_or_none(hostvar(task_vars, host, "ray_num_cpus"))
        resources = {"GPU": gpus}
        if cpus is not None:
            resources["CPU"] = cpus
        ip = hostvar(task_vars, host, "ray_private_ip") or hostvar(task_vars, host, "ansible_host") or host
        nodes.append(dict(node_ip=text(ip), node_name=host, is_head=host in heads, resources=resources))
    return nodes


class ExperimentAction(TypedAction):
    """An experiment action: never contacts a host; a problem with the experiment is its lines in ``errors``."""

    ERRORS_LIST = True
    _requires_connection = False

    def act(self, result: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        result["changed"] = False
        try:
            result.update(self.work(args, task_vars))
        except experiment_schema.ExperimentError as e:
            result.update(failed=True, msg=str(e), errors=e.errors)
        return result

    def work(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError
