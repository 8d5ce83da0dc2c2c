# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Controller-side action ``rlinfra.verl.verl_experiment``: find, load and validate an experiment file, and find its
cluster's head in the inventory. Documentation: plugins/modules/verl_experiment.py. Rendering the Ray job from its
result is ``verl_experiment_render``'s. It never contacts a host nor the Ray cluster."""

from __future__ import annotations

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_render, experiment_source
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError
from ansible_collections.rlinfra.verl.plugins.plugin_utils import experiment_task

ARGS = vocabulary.Args(
    name=experiment_task.name_arg(),
    loaded=vocabulary.Raw("this action's own result for the same experiment, earlier in the run", ansible="dict"),
    experiments_dir=experiment_task.role(
        "experiments_dir",
        "verl_job_experiments_dir",
        vocabulary.AbsPath("reads", relative=True, empty=True, default="", ansible="str"),
    ),
    artifacts_dir=experiment_task.role(
        "artifacts_dir",
        "verl_job_artifacts_dir",
        vocabulary.AbsPath("local", relative=True, empty=True, default="", ansible="str"),
    ),
    # Where merge.yml writes the experiment's merged model (<models_root>/<experiment>): checked here, on the
    # controller, before the head is reached.
    models_root=experiment_task.role(
        "models_root", "verl_job_models_root", vocabulary.AbsPath("writes", default="/data/models", ansible="str")
    ),
    cluster=vocabulary.Name(empty=True, default=""),
    run=vocabulary.Name(empty=True, default=""),
    params=experiment_task.params_arg(),
    **experiment_task.checkpoint_args(),
)
ARGUMENT_SPEC = ARGS.spec


def validated(exp, source, cluster, run, task_vars, checkpoint_root, checkpoint_cluster):
    """(what this action returns for a loaded experiment, the cluster's heads, the clusters with a head): its summary,
    where it came from, its cluster, head and hosts, its submission id, wait settings and checkpoint directory."""
    experiment.validate_name(cluster, "cluster")
    sid = experiment_render.submission_id(exp.name, cluster, run or None)
    heads, hosts, clusters = experiment_task.inventory(task_vars, cluster)
    return (
        dict(
            experiment=exp.summary(),
            source=source,
            experiments_dir=source.get("experiments_dir"),
            artifacts_dir=source.get("artifacts_dir"),
            cluster=cluster,
            run=run,
            submission_id=sid,
            run_artifacts_dir=experiment_source.check_artifacts(source.get("artifacts_dir") or "", exp.name),
            head_host=heads[0] if len(heads) == 1 else None,
            cluster_hosts=hosts,
            wait=dict(exp.wait),
            project=exp.project,
            checkpoint_dir=experiment_render.checkpoint_dir(exp, checkpoint_root, checkpoint_cluster or cluster),
        ),
        heads,
        clusters,
    )


class ActionModule(experiment_task.ExperimentAction):
    ARGS = ARGS

    def work(self, args, task_vars):
        name = experiment_source.parse_ref(args["name"])[0]
        if args["loaded"]:
            # Loaded and validated earlier in this run (select_head, on the controller): not read again.
            if args["loaded"].get("experiment", {}).get("name") != name:
                raise ExperimentError("loaded is not experiment %s" % name)
            return dict(args["loaded"])
        located = experiment_task.locate(args["name"], args["experiments_dir"], args["artifacts_dir"], task_vars)
        exp = experiment.load_experiment_file(name, located.path, extra_params=args["params"] or None)
        out, heads, clusters = validated(
            exp,
            located.as_dict(),
            args["cluster"] or exp.cluster,
            args["run"],
            task_vars,
            args["checkpoint_root"],
            args["checkpoint_cluster"],
        )
        out["model_dir"] = "%s/%s" % (vocabulary.normpath(args["models_root"]).rstrip("/"), exp.name)
        if not heads:
            raise ExperimentError(
                "no host of group ray_head belongs to Ray cluster '%s' (experiment %s, ray_cluster); clusters "
                "with a head in this inventory: %s" % (out["cluster"], exp.label, ", ".join(clusters) or "none")
            )
        if len(heads) > 1:
            raise ExperimentError(
                "Ray cluster '%s' has %d heads in group ray_head (%s); exactly one is allowed"
                % (out["cluster"], len(heads), ", ".join(heads))
            )
        return out
