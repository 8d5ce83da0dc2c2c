# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.verl_experiment``: load, validate, render and preflight an
experiment file. Documentation: plugins/modules/verl_experiment.py. It never contacts a host nor
the Ray cluster, and never sees a secret's value (only which names are available)."""

from __future__ import annotations

import os
import tempfile

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils import experiment as E
from ansible_collections.rlinfra.verl.plugins.module_utils import experiment_schema
from ansible_collections.rlinfra.verl.plugins.module_utils import experiment_render
from ansible_collections.rlinfra.verl.plugins.module_utils import experiment_source as ES
from ansible_collections.rlinfra.verl.plugins.module_utils import hf_prefetch as HFP
from ansible_collections.rlinfra.verl.plugins.module_utils import secrets_file as SF
from ansible_collections.rlinfra.verl.plugins.module_utils import secrets_run as S
from ansible_collections.rlinfra.verl.plugins.module_utils import verl_preflight as P
from ansible_collections.rlinfra.verl.plugins.module_utils import vocabulary as V
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction
from ansible_collections.rlinfra.verl.plugins.module_utils.numbers import int_or_none

COLLECTION_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _ref(value):
    """An experiment's name, or ``rlinfra.verl:NAME`` for a bundled example (experiment_source's rule)."""
    try:
        E.validate_name(ES.parse_ref(value)[0])
    except E.ExperimentError as e:
        raise V.Line(str(e))
    return value


def _extra_params(value):
    """verl_job_params: the same grammar as the file's params."""
    errors = []
    experiment_schema.flatten_params(value, errors.append)
    if errors:
        raise V.Line("extra params (verl_job_params): " + errors[0])
    return value


def _role(option, variable, t):
    t.label = "%s (%s)" % (option, variable)
    return t


ARGS = V.Args(
    name=V.Custom("str", _ref, ["../etc/passwd", "a b", ""], "smoke", required=True),
    loaded=V.Raw("this action's own result for the same experiment, earlier in the run", ansible="dict"),
    experiments_dir=V.AbsPath(relative=True, empty=True, default="", ansible="str"),
    artifacts_dir=V.AbsPath(relative=True, empty=True, default="", ansible="str"),
    cluster=V.Name(empty=True, default=""),
    run=V.Name(empty=True, default=""),
    params=V.Custom("dict", _extra_params, [{"a b": 1}, {"hf_token": "hf_s3cr3t"}, {"~x": 1}], {}, default={}),
    stage=V.Choice(("validate", "render"), default="render"),
    nodes=V.Raw("the alive nodes as rlinfra.verl.ray_cluster_info returns them", ansible="list", elements="dict"),
    default_gpus_per_node=_role("default_gpus_per_node", "verl_job_dry_run_gpus_per_node", V.Int(0, 1024, default=8)),
    checkpoint_root=_role("checkpoint_root", "verl_job_checkpoint_root",
                          V.AbsPath(default=E.DEFAULT_CHECKPOINT_ROOT, ansible="str")),
    checkpoint_cluster=_role("checkpoint_cluster", "-e checkpoint_cluster", V.Name(empty=True, default="")),
    venv=_role("venv", "verl_job_venv", V.AbsPath(empty=True, default="", ansible="str")),
    secret_vars=V.ListOf(V.EnvName(), default=[]),
    # Where the run's secrets file goes (shared volume); empty: .rlinfra/secrets next to checkpoint_root.
    secrets_dir=_role("secrets_dir", "verl_job_secrets_dir", V.AbsPath(empty=True, default="", ansible="str")),
    code=V.Raw("rlinfra.verl.code_checkout's result", ansible="dict"),
    code_root=_role("code_root", "verl_job_code_root", V.AbsPath(empty=True, default="", ansible="str")),
    preflight=V.Switch(default=True),
    fail_on_preflight=V.Switch(default=True),
    verl_config_check=V.Choice(("auto", "required", "skip"), default="auto"),
    package_dir=V.AbsPath(relative=True, empty=True, default="", ansible="str"),
    wait=V.Switch(),
    wait_timeout=_role("wait_timeout", "verl_job_wait_timeout", V.Int(1)),
    progress_interval=_role("progress_interval", "verl_job_progress_interval", V.Int(1)),
    poll_interval=_role("poll_interval", "verl_job_poll_interval", V.Number(
        experiment_schema.MIN_POLL_INTERVAL, hint=" (the dashboard serves the whole cluster)")),
    stop_on_timeout=V.Switch(),
)
ARGUMENT_SPEC = ARGS.spec


def _text(value):
    return "" if value is None else str(value)


_int = int_or_none


class ActionModule(TypedAction):
    ARGS = ARGS
    ERRORS_LIST = True
    _requires_connection = False

    def act(self, result, args, task_vars):
        result["changed"] = False
        try:
            result.update(self._run(args, task_vars))
        except E.ExperimentError as e:
            result.update(failed=True, msg=str(e), errors=e.errors)
        return result

    # ----------------------------------------------------------------------------------------

    def _locate(self, args, task_vars):
        return ES.locate(args["name"], explicit_dir=args["experiments_dir"], environ=os.environ,
                         inventory_sources=task_vars.get("ansible_inventory_sources") or [],
                         playbook_dir=_text(task_vars.get("playbook_dir")), cwd=os.getcwd(),
                         collection_root=COLLECTION_ROOT, artifacts_dir=args["artifacts_dir"])

    def _hostvar(self, task_vars, host, name, default=None):
        try:
            value = task_vars["hostvars"][host].get(name, default)
        except (KeyError, AnsibleError):
            return default
        return default if value is None else value

    def _inventory(self, task_vars, cluster):
        groups = task_vars.get("groups") or {}
        members = {}
        for group in ("ray_head", "ray_workers"):
            for host in groups.get(group, []):
                if (_text(self._hostvar(task_vars, host, "ray_cluster")) or E.DEFAULT_CLUSTER) == cluster:
                    members.setdefault(host, group == "ray_head")
        heads = [h for h, is_head in members.items() if is_head]
        clusters = sorted({_text(self._hostvar(task_vars, h, "ray_cluster")) or E.DEFAULT_CLUSTER
                           for h in groups.get("ray_head", [])})
        return heads, list(members), clusters

    def _inventory_nodes(self, task_vars, hosts, heads, default_gpus):
        nodes = []
        for host in hosts:
            # ray_num_gpus may be 'auto' (counted on the node at install time): unknown here.
            gpus = _int(self._hostvar(task_vars, host, "ray_num_gpus"))
            if gpus is None:
                gpus = _int(self._hostvar(task_vars, host, "hyperbolic_gpu_count"))
            if gpus is None:
                gpus = default_gpus
            cpus = _int(self._hostvar(task_vars, host, "ray_num_cpus"))
            resources = {"GPU": gpus}
            if cpus is not None:
                resources["CPU"] = cpus
            ip = self._hostvar(task_vars, host, "ray_private_ip") or self._hostvar(task_vars, host, "ansible_host") or host
            nodes.append(dict(node_ip=_text(ip), node_name=host, is_head=host in heads, resources=resources))
        return nodes

    def _run(self, args, task_vars):
        name = ES.parse_ref(args["name"])[0]
        if args["loaded"] and args["stage"] == "validate":
            if args["loaded"].get("experiment", {}).get("name") != name:
                raise E.ExperimentError("loaded is not experiment %s" % name)
            return dict(args["loaded"])
        if args["loaded"]:
            # Loaded and validated earlier in this run (select_head, on the controller): not read again.
            exp = E.Experiment.from_summary(args["loaded"]["experiment"])
            source = dict(args["loaded"].get("source") or {})
            if exp.name != name:
                raise E.ExperimentError("loaded is experiment %s, not %s" % (exp.name, name))
        else:
            located = self._locate(args, task_vars)
            exp = E.load_experiment_file(name, located.path, extra_params=args["params"] or None)
            source = located.as_dict()
        cluster = args["cluster"] or exp.cluster
        E.validate_name(cluster, "cluster")
        sid = experiment_render.submission_id(exp.name, cluster, args["run"] or None)
        heads, hosts, clusters = self._inventory(task_vars, cluster)

        out = dict(experiment=exp.summary(), source=source, experiments_dir=source.get("experiments_dir"),
                   artifacts_dir=source.get("artifacts_dir"), cluster=cluster, submission_id=sid,
                   run_artifacts_dir=ES.check_artifacts(source.get("artifacts_dir") or "", exp.name),
                   head_host=heads[0] if len(heads) == 1 else None, cluster_hosts=hosts)
        wait = dict(exp.wait)
        for key, arg in (("enabled", "wait"), ("timeout", "wait_timeout"), ("progress_interval", "progress_interval"),
                         ("poll_interval", "poll_interval"), ("stop_on_timeout", "stop_on_timeout")):
            if args[arg] is not None:
                wait[key] = args[arg]
        out["wait"] = wait
        out["project"] = exp.project
        out["checkpoint_dir"] = experiment_render.checkpoint_dir(exp, args["checkpoint_root"], args["checkpoint_cluster"] or cluster)
        if args["stage"] == "validate":
            if not heads:
                raise E.ExperimentError(
                    "no host of group ray_head belongs to Ray cluster '%s' (experiment %s, ray_cluster); clusters "
                    "with a head in this inventory: %s" % (cluster, exp.label, ", ".join(clusters) or "none"))
            if len(heads) > 1:
                raise E.ExperimentError("Ray cluster '%s' has %d heads in group ray_head (%s); exactly one is allowed"
                                        % (cluster, len(heads), ", ".join(heads)))
            return out

        # Secrets: names only. Values are added later by a no_log task, from verl_job_secrets or
        # the controller environment (the same precedence is applied there).
        from_vars, from_env = S.sources(exp.secrets + exp.optional_secrets, args["secret_vars"], os.environ)
        present = from_vars + from_env
        missing = [n for n in exp.secrets if n not in present]
        out["secrets"] = dict(required=exp.secrets, optional=exp.optional_secrets, present=present,
                              from_vars=from_vars, from_env=from_env, missing=missing,
                              missing_optional=[n for n in exp.optional_secrets if n not in present])

        if args["nodes"] is not None:
            nodes, source = args["nodes"], "cluster"
        else:
            nodes, source = self._inventory_nodes(task_vars, hosts, heads, args["default_gpus_per_node"]), "inventory"
        rendered = experiment_render.render(exp, nodes, cluster=cluster, run=args["run"] or None,
                            checkpoint_root=args["checkpoint_root"], venv=args["venv"] or None,
                            secret_names_present=present, checkpoint_cluster=args["checkpoint_cluster"] or None,
                            secrets_dir=args["secrets_dir"] or SF.default_dir(args["checkpoint_root"]),
                            code=args["code"], code_root=args["code_root"] or None)
        experiment_render.check_job_size(exp.label, rendered)
        experiment_render.check_fits(exp, nodes, cluster, "alive now" if source == "cluster" else "in the inventory")
        out.update(rendered)
        out["nodes_source"] = source
        out["nodes"] = nodes

        checks = []
        if args["preflight"]:
            checks.append(self._check_secrets(exp, present, missing))
            if exp.framework == "verl":
                checks.append(self._check_verl(args["verl_config_check"], rendered["overrides"],
                                               exp.entrypoint.get("config") or E.VERL_DEFAULTS["config"]))
            checks.append(P.check_resources(exp.framework, exp.conventions, rendered["nnodes"],
                                            rendered["gpus_per_node"], nodes, cluster, rendered["resources"],
                                            custom_known=source == "cluster"))
        package = None
        if exp.working_dir:
            wd_check, package = self._package(exp, args["package_dir"])
            checks.append(wd_check)
            if package:
                out["runtime_env"]["working_dir"] = package["uri"]
                out["runtime_env_display"]["working_dir"] = "%s (%s)" % (package["uri"], exp.working_dir_path)
        out["package"] = package
        out["preflight"] = P.summarize(checks)
        out["preflight"]["lines"] = ["%s: %s" % (c["status"], c["message"]) for c in checks]
        out["display"] = self._dry_run_view(out, exp, _text(task_vars.get("inventory_hostname")), args["default_gpus_per_node"])
        if args["fail_on_preflight"] and not out["preflight"]["ok"]:
            out["failed"] = True
            out["msg"] = "\n".join("preflight: %s" % m for m in out["preflight"]["failed"])
        return out

    @staticmethod
    def _dry_run_view(out, exp, head, default_gpus):
        """What a dry run prints: the job exactly as it would be submitted, secrets by name only."""
        return dict(
            dry_run=True, experiment="%s (%s) from %s" % (exp.name, exp.framework, exp.path),
            artifacts=out["artifacts_dir"],
            cluster="%s (head %s)" % (out["cluster"], head), submission_id=out["submission_id"],
            entrypoint=out["entrypoint"], runtime_env=out["runtime_env_display"], metadata=out["metadata"],
            resources=out["resources"],
            shape="%s node(s) x %s GPU(s), taken from the %s (%s; GPUs from ray_num_gpus / hyperbolic_gpu_count, else %d)"
                  % (out["nnodes"], out["gpus_per_node"], out["nodes_source"], ", ".join(out["cluster_hosts"]), default_gpus)
                  if out["nodes_source"] == "inventory" else
                  "%s node(s) x %s GPU(s), taken from the cluster" % (out["nnodes"], out["gpus_per_node"]),
            checkpoint_dir=out["checkpoint_dir"], secrets=["%s=********" % n for n in out["secrets"]["present"]],
            working_dir=out["package"] if out["package"] is not None else "none", wait=out["wait"],
            code="%s@%s in %s" % (out["code"]["repo"], out["code"]["commit"] or "(%s, resolved when submitted)" % out["code"]["ref"],
                                  out["code"]["workdir"]) if out["code"] else "none",
            prefetch=["%s into %s" % (HFP.label(i), exp.prefetch["hub_cache"] or exp.prefetch["hf_home"] + "/hub")
                      for i in HFP.items_of(exp.prefetch)] if exp.prefetch else "none",
            preflight="ok" if out["preflight"]["ok"] else "FAILED")

    def _check_secrets(self, exp, present, missing):
        if missing:
            return P.check("secrets", "failed", "; ".join(
                "secret %s is required by %s but is set neither in the controller's environment nor in "
                "verl_job_secrets (export %s=... or put it in verl_job_secrets, e.g. from Ansible Vault)"
                % (n, exp.label, n) for n in missing))
        names = exp.secrets + exp.optional_secrets
        if not names:
            return P.check("secrets", "passed", "no secrets")
        return P.check("secrets", "passed", "secrets passed to the job (by a 0600 file on the shared volume): %s%s" % (
            ", ".join(present) or "none",
            "; optional and not set: %s" % ", ".join(n for n in exp.optional_secrets if n not in present)
            if any(n not in present for n in exp.optional_secrets) else ""))

    def _check_verl(self, mode, overrides, config_name):
        if mode == "skip":
            return P.check("verl_config", "skipped", "verl config check skipped (verl_job_verl_config_check=skip)")
        result = P.check_verl_config(overrides, config_name)
        if mode == "required" and result["status"] == "skipped":
            result["status"] = "failed"
        return result

    def _package(self, exp, package_dir):
        if not package_dir:
            wd = P.check_working_dir(exp.working_dir_path, exp.excludes)
            return wd, wd.get("package")
        os.makedirs(package_dir, mode=0o700, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(prefix=".pkg-", suffix=".zip", dir=package_dir)
        os.close(fd)
        wd = P.check_working_dir(exp.working_dir_path, exp.excludes, dest=tmp_path)
        pkg = wd.get("package")
        if not pkg:
            if os.path.exists(tmp_path):
                os.unlink(tmp_path)
            return wd, None
        final = os.path.join(package_dir, pkg["uri"].split("://", 1)[1])
        os.replace(tmp_path, final)
        pkg["path"] = final
        return wd, pkg
