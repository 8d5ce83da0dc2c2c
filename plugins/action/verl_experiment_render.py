# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.verl_experiment_render``: the Ray job of an experiment that
``verl_experiment`` loaded and validated (its result, ``loaded``), for the cluster's alive nodes (or the inventory's,
in a dry run), and the preflight checks. Documentation: plugins/modules/verl_experiment_render.py. It never reads the
experiment file, never contacts the Ray cluster, and never sees a secret's value (only which names are available). It
contacts its host (the head) in one case only: in container mode (``container``, the head's Ray container) the verl
config check runs there, with the image's Python (rlinfra.verl.verl_config_check), instead of the controller's."""

from __future__ import annotations

import os

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container as ray_container
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import (
    experiment,
    experiment_render,
    experiment_schema,
    hf_prefetch,
    secrets_file,
    secrets_run,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import preflight as verl_preflight
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError
from ansible_collections.rlinfra.verl.plugins.plugin_utils import experiment_task, node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.experiment_task import role

ARGS = vocabulary.Args(
    loaded=vocabulary.Raw(
        "rlinfra.verl.verl_experiment's result for the experiment",
        ansible="dict",
        required=True,
        sample={"experiment": {}, "submission_id": "rlinfra-smoke-default", "cluster": "default"},
    ),
    nodes=vocabulary.Raw(
        "the alive nodes as rlinfra.verl.ray_cluster_info returns them", ansible="list", elements="dict"
    ),
    default_gpus_per_node=role(
        "default_gpus_per_node", "verl_job_dry_run_gpus_per_node", vocabulary.Int(0, 1024, default=8)
    ),
    venv=role("venv", "verl_job_venv", vocabulary.AbsPath("reads", empty=True, default="", ansible="str")),
    secret_vars=vocabulary.ListOf(vocabulary.EnvName(), default=[]),
    # Where the run's secrets file goes (shared volume); empty: .rlinfra/secrets next to checkpoint_root.
    secrets_dir=role(
        "secrets_dir", "verl_job_secrets_dir", vocabulary.AbsPath("owns", empty=True, default="", ansible="str")
    ),
    code=vocabulary.Raw("rlinfra.verl.code_checkout's result", ansible="dict"),
    code_root=role(
        "code_root", "verl_job_code_root", vocabulary.AbsPath("writes", empty=True, default="", ansible="str")
    ),
    preflight=vocabulary.Switch(default=True),
    fail_on_preflight=vocabulary.Switch(default=True),
    verl_config_check=vocabulary.Choice(("auto", "required", "skip"), default="auto"),
    # Container mode: the head's Ray container, as rlinfra.verl.ray_cluster_info returns it from the rlinfra_ray fact;
    # the verl config check then runs in it. Empty (a venv, a dry run): on the controller.
    container=ray_container.fact_arg(image_id_empty=False),
    package_dir=vocabulary.AbsPath("local", relative=True, empty=True, default="", ansible="str"),
    wait=vocabulary.Switch(),
    wait_timeout=role("wait_timeout", "verl_job_wait_timeout", vocabulary.Seconds(1, integer=True)),
    progress_interval=role("progress_interval", "verl_job_progress_interval", vocabulary.Seconds(1, integer=True)),
    poll_interval=role(
        "poll_interval",
        "verl_job_poll_interval",
        vocabulary.Seconds(experiment_schema.MIN_POLL_INTERVAL, hint=" (the dashboard serves the whole cluster)"),
    ),
    stop_on_timeout=vocabulary.Switch(),
    **experiment_task.checkpoint_args(),
)
ARGUMENT_SPEC = ARGS.spec
WAIT_OVERRIDES = (
    ("enabled", "wait"),
    ("timeout", "wait_timeout"),
    ("progress_interval", "progress_interval"),
    ("poll_interval", "poll_interval"),
    ("stop_on_timeout", "stop_on_timeout"),
)


class ActionModule(experiment_task.ExperimentAction):
    ARGS = ARGS

    def work(self, args, task_vars):
        loaded = args["loaded"]
        summary = loaded.get("experiment")
        if (
            not isinstance(summary, dict)
            or not {"name", "path"} <= set(summary)
            or "submission_id" not in loaded
            or "cluster" not in loaded
        ):
            raise ExperimentError(
                "loaded is not a result of rlinfra.verl.verl_experiment: register that task and pass it"
            )
        exp = experiment.Experiment.from_summary(loaded["experiment"])
        cluster = loaded["cluster"]
        heads, hosts, dummy = experiment_task.inventory(task_vars, cluster)
        out = dict(loaded)
        out["wait"] = dict(exp.wait, **dict((key, args[arg]) for key, arg in WAIT_OVERRIDES if args[arg] is not None))
        out["checkpoint_dir"] = experiment_render.checkpoint_dir(
            exp, args["checkpoint_root"], args["checkpoint_cluster"] or cluster
        )

        # Secrets: names only. Values are added later by a no_log task, from verl_job_secrets or
        # the controller environment (the same precedence is applied there).
        from_vars, from_env = secrets_run.sources(exp.secrets + exp.optional_secrets, args["secret_vars"], os.environ)
        present = from_vars + from_env
        missing = [n for n in exp.secrets if n not in present]
        out["secrets"] = dict(
            required=exp.secrets,
            optional=exp.optional_secrets,
            present=present,
            from_vars=from_vars,
            from_env=from_env,
            missing=missing,
            missing_optional=[n for n in exp.optional_secrets if n not in present],
        )

        if args["nodes"] is not None:
            nodes, source = args["nodes"], "cluster"
        else:
            nodes, source = (
                experiment_task.inventory_nodes(task_vars, hosts, heads, args["default_gpus_per_node"]),
                "inventory",
            )
        rendered = experiment_render.render(
            exp,
            nodes,
            cluster=cluster,
            run=loaded.get("run") or None,
            checkpoint_root=args["checkpoint_root"],
            venv=args["venv"] or None,
            secret_names_present=present,
            checkpoint_cluster=args["checkpoint_cluster"] or None,
            secrets_dir=args["secrets_dir"] or secrets_file.default_dir(args["checkpoint_root"]),
            code=args["code"],
            code_root=args["code_root"] or None,
        )
        experiment_render.check_job_size(exp.label, rendered)
        experiment_render.check_fits(exp, nodes, cluster, "alive now" if source == "cluster" else "in the inventory")
        out.update(rendered)
        out["nodes_source"] = source
        out["nodes"] = nodes

        checks = []
        if args["preflight"]:
            checks.append(self._check_secrets(exp, present, missing))
            if exp.framework == "verl":
                checks.append(
                    self._check_verl(
                        args["verl_config_check"],
                        rendered["overrides"],
                        exp.entrypoint.get("config") or experiment.VERL_DEFAULTS["config"],
                        args["container"],
                        task_vars,
                    )
                )
            checks.append(
                verl_preflight.check_resources(
                    exp.framework,
                    exp.conventions,
                    rendered["nnodes"],
                    rendered["gpus_per_node"],
                    nodes,
                    cluster,
                    rendered["resources"],
                    custom_known=source == "cluster",
                )
            )
        package = None
        if exp.working_dir:
            wd_check, package = self._package(exp, args["package_dir"])
            checks.append(wd_check)
            if package:
                out["runtime_env"]["working_dir"] = package["uri"]
                out["runtime_env_display"]["working_dir"] = "%s (%s)" % (package["uri"], exp.working_dir_path)
        out["package"] = package
        out["preflight"] = verl_preflight.summarize(checks)
        out["preflight"]["lines"] = ["%s: %s" % (c["status"], c["message"]) for c in checks]
        out["display"] = self._dry_run_view(
            out, exp, experiment_task.text(task_vars.get("inventory_hostname")), args["default_gpus_per_node"]
        )
        if args["fail_on_preflight"] and not out["preflight"]["ok"]:
            out["failed"] = True
            out["msg"] = "\n".join("preflight: %s" % m for m in out["preflight"]["failed"])
        return out

    @staticmethod
    def _dry_run_view(out, exp, head, default_gpus):
        """What a dry run prints: the job exactly as it would be submitted, secrets by name only."""
        return dict(
            dry_run=True,
            experiment="%s (%s) from %s" % (exp.name, exp.framework, exp.path),
            artifacts=out["artifacts_dir"],
            cluster="%s (head %s)" % (out["cluster"], head),
            submission_id=out["submission_id"],
            entrypoint=out["entrypoint"],
            runtime_env=out["runtime_env_display"],
            metadata=out["metadata"],
            resources=out["resources"],
            shape="%s node(s) x %s GPU(s), taken from the %s (%s; GPUs from ray_num_gpus / hyperbolic_gpu_count, else %d)"
            % (out["nnodes"], out["gpus_per_node"], out["nodes_source"], ", ".join(out["cluster_hosts"]), default_gpus)
            if out["nodes_source"] == "inventory"
            else "%s node(s) x %s GPU(s), taken from the cluster" % (out["nnodes"], out["gpus_per_node"]),
            checkpoint_dir=out["checkpoint_dir"],
            secrets=["%s=********" % n for n in out["secrets"]["present"]],
            working_dir=out["package"] if out["package"] is not None else "none",
            wait=out["wait"],
            code="%s@%s in %s"
            % (
                out["code"]["repo"],
                out["code"]["commit"] or "(%s, resolved when submitted)" % out["code"]["ref"],
                out["code"]["workdir"],
            )
            if out["code"]
            else "none",
            prefetch=[
                "%s into %s" % (hf_prefetch.label(i), exp.prefetch["hub_cache"] or exp.prefetch["hf_home"] + "/hub")
                for i in hf_prefetch.items_of(exp.prefetch)
            ]
            if exp.prefetch
            else "none",
            preflight="ok" if out["preflight"]["ok"] else "FAILED",
        )

    def _check_secrets(self, exp, present, missing):
        if missing:
            return verl_preflight.check(
                "secrets",
                "failed",
                "; ".join(
                    "secret %s is required by %s but is set neither in the controller's environment nor in "
                    "verl_job_secrets (export %s=... or put it in verl_job_secrets, e.g. from Ansible Vault)"
                    % (n, exp.label, n)
                    for n in missing
                ),
            )
        names = exp.secrets + exp.optional_secrets
        if not names:
            return verl_preflight.check("secrets", "passed", "no secrets")
        return verl_preflight.check(
            "secrets",
            "passed",
            "secrets passed to the job (by a 0600 file on the shared volume): %s%s"
            % (
                ", ".join(present) or "none",
                "; optional and not set: %s" % ", ".join(n for n in exp.optional_secrets if n not in present)
                if any(n not in present for n in exp.optional_secrets)
                else "",
            ),
        )

    def _check_verl(self, mode, overrides, config_name, container, task_vars):
        if mode == "skip":
            return verl_preflight.check(
                "verl_config", "skipped", "verl config check skipped (verl_job_verl_config_check=skip)"
            )
        problem = verl_preflight.container_problem(container)
        if problem:
            return verl_preflight.check("verl_config", "failed", problem)
        if container:
            head = experiment_task.text(task_vars.get("inventory_hostname"))
            res = node_script.call(
                self,
                task_vars,
                "rlinfra.verl.verl_config_check",
                dict(
                    engine_path=container["engine_path"],
                    container=container["name"],
                    image_id=container["image_id"],
                    node=head,
                    overrides=list(overrides),
                    config_name=config_name,
                ),
            )
            result = verl_preflight.image_check(res, container["image_id"], head)
        else:
            result = verl_preflight.check_verl_config(overrides, config_name)
        return verl_preflight.apply_mode(result, mode)

    def _package(self, exp, package_dir):
        if not package_dir:
            wd = verl_preflight.check_working_dir(
                exp.working_dir_path, exp.excludes, experiments_dir=exp.experiments_dir
            )
            return wd, wd.get("package")
        return verl_preflight.package_working_dir(exp.working_dir_path, exp.excludes, package_dir, exp.experiments_dir)
