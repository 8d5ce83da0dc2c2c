# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Rendering a validated experiment into the Ray job: the submission id, the managed params (cluster shape,
checkpoint directory), the entrypoint (Hydra overrides, each shell-quoted), the runtime_env without secret values and
a masked copy for display, the metadata; :func:`reshape` fits a rendered job to another set of nodes (recovery).
Loading and validating is experiment.py's; this never reads the file."""

from __future__ import annotations

import copy
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.cluster_shape import cluster_shape
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout
from ansible_collections.rlinfra.verl.plugins.module_utils.verl._experiment_quote import hydra_override, shell_quote
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment import (
    DEFAULT_CHECKPOINT_ROOT,
    DEFAULT_ENV,
    MAX_SUBMISSION_ID,
    NEMO_RL_DEFAULTS,
    SHAPE_KEYS,
    SUBMISSION_PREFIX,
    VERL_DEFAULTS,
    validate_name,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import (
    MAX_ARG_BYTES,
    NAME_RE,
    ExperimentError,
    fmt,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.secrets_file import (
    ENTRYPOINT_PREFIX,
    FILE_VAR,
    HOOK,
    file_path,
)

if TYPE_CHECKING:
    from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment import Experiment


def submission_id(name: str, cluster: str, run: str | int | None = None) -> str:
    """``rlinfra-<experiment>-<cluster>[-<run>]``: re-running submit never starts a duplicate."""
    validate_name(name)
    validate_name(cluster, "cluster")
    sid = "%s-%s-%s" % (SUBMISSION_PREFIX, name, cluster)
    if run not in (None, ""):
        run = str(run)
        if not NAME_RE.match(run):
            raise ExperimentError(
                "invalid run suffix %s: use letters, digits, '_', '-' or '.' (e.g. -e run=2)" % fmt(run)
            )
        sid += "-" + run
    if len(sid) > MAX_SUBMISSION_ID:
        raise ExperimentError(
            "submission id %s is %d characters, more than %d; shorten the experiment name, the "
            "cluster name or the run suffix" % (fmt(sid), len(sid), MAX_SUBMISSION_ID)
        )
    return sid


def check_job_size(label: str, rendered: Mapping[str, Any]) -> None:
    """The rendered entrypoint and each environment variable fit in one Linux argv/environment
    string (:data:`MAX_ARG_BYTES`); over it Ray would create the job and fail it at exec."""
    size = len(rendered["entrypoint"].encode("utf-8", "surrogatepass"))
    if size > MAX_ARG_BYTES:
        raise ExperimentError(
            "%s: the rendered entrypoint is %d bytes, over the %d Linux allows for one command "
            "line argument (Ray runs it with /bin/sh -c); move long values or many params into "
            "a config file (entrypoint.config, or a file in working_dir)" % (label, size, MAX_ARG_BYTES)
        )
    for name, value in ((rendered.get("runtime_env") or {}).get("env_vars") or {}).items():
        size = len(name.encode("utf-8")) + 1 + len(str(value).encode("utf-8", "surrogatepass"))
        if size > MAX_ARG_BYTES:
            raise ExperimentError(
                "%s: environment variable %s is %d bytes, over the %d Linux allows for one "
                "environment string" % (label, name, size, MAX_ARG_BYTES)
            )


def check_fits(
    exp: Experiment, nodes: Sequence[Mapping[str, Any]] | None, cluster: str, where: str = "alive now"
) -> None:
    """The experiment's settings that name a node count fit the cluster it runs on (``nodes``)."""
    min_nodes = exp.recovery.get("min_nodes")
    if min_nodes and nodes and min_nodes > len(nodes):
        raise ExperimentError(
            "%s: recovery.min_nodes is %d but Ray cluster %s has %d node(s) %s: a recovery would wait for nodes it can "
            "never get; set recovery.min_nodes to at most %d"
            % (exp.label, min_nodes, cluster, len(nodes), where, len(nodes))
        )


def checkpoint_dir(
    exp: Experiment, checkpoint_root: str | None = DEFAULT_CHECKPOINT_ROOT, cluster: str | None = None
) -> str:
    """``<root>/<project>/<cluster>/<experiment>``: two clusters sharing the network volume never
    write into one directory; an explicit directory in the params wins."""
    if exp.conventions == "verl" and exp.param("trainer.default_local_dir"):
        return exp.param("trainer.default_local_dir")
    if exp.conventions == "nemo_rl" and exp.param("checkpointing.checkpoint_dir"):
        return exp.param("checkpointing.checkpoint_dir")
    root = (checkpoint_root or DEFAULT_CHECKPOINT_ROOT).rstrip("/") or "/"
    return "%s/%s/%s/%s" % (root, exp.project, cluster or exp.cluster, exp.name)


# The Hydra keys of a run's shape, per convention: (nodes key, GPUs per node key).
def managed_params(
    exp: Experiment,
    nodes: Sequence[Mapping[str, Any]] | None,
    checkpoint_root: str | None = DEFAULT_CHECKPOINT_ROOT,
    cluster: str | None = None,
    now: float | None = None,
) -> list[tuple[str, Any]]:
    """The overrides rlinfra adds (those the experiment does not set), in a fixed order."""
    nnodes, gpus = cluster_shape(nodes)
    ckpt = checkpoint_dir(exp, checkpoint_root, cluster)
    if exp.conventions == "verl":
        wanted = [
            ("trainer.project_name", exp.project),
            ("trainer.experiment_name", exp.name),
            ("trainer.default_local_dir", ckpt),
            ("trainer.resume_mode", "auto"),
        ]
    elif exp.conventions == "nemo_rl":
        wanted = [("checkpointing.checkpoint_dir", ckpt)]
    else:
        wanted = []
    if exp.conventions in SHAPE_KEYS:
        wanted += list(zip(SHAPE_KEYS[exp.conventions], (nnodes, gpus)))
    deadline = exp.recovery.get("deadline")
    if deadline and exp.conventions in DEADLINE_KEYS:
        margin = exp.recovery["deadline_margin"]
        wanted.append(
            (
                DEADLINE_KEYS[exp.conventions],
                margin
                if exp.conventions == "verl"
                else save_by(vocabulary.epoch(deadline), margin, time.time() if now is None else now),
            )
        )
    return [(k, v) for k, v in wanted if not exp.has_param(k)]


# How each convention is told of a deadline, besides DEADLINE_ENV (absolute, read by verl): verl's margin before it
# (``should_save_ckpt_esi``'s redundant_time, on top of its save and one step), NeMo RL's time to save by (DD:HH:MM:SS
# from its training loop's start: counted from each attempt's submission, less the margin for its start and save).
DEADLINE_KEYS = {"verl": "trainer.esi_redundant_time", "nemo_rl": "checkpointing.checkpoint_must_save_by"}
DEADLINE_ENV = "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"


def save_by(deadline: float, margin: float, now: float) -> str:
    """NeMo RL's checkpoint_must_save_by for an attempt submitted at ``now``: ``DD:HH:MM:SS`` (at least one second)."""
    left = max(1, int(deadline - margin - now))
    return "%02d:%02d:%02d:%02d" % (left // 86400, left // 3600 % 24, left // 60 % 60, left % 60)


def check_deadline(exp: Experiment, now: float) -> None:
    """A deadline the run cannot meet (already within its margin) refuses the submit, in one line."""
    deadline = exp.recovery.get("deadline")
    if not deadline:
        return
    margin = exp.recovery["deadline_margin"]
    left = vocabulary.epoch(deadline) - now
    if left <= margin:
        raise ExperimentError(
            "%s: recovery.deadline %s is %s, within recovery.deadline_margin (%d s): the run could not save before it; "
            "set a later deadline (when the machines really end) or a smaller deadline_margin; nothing was submitted"
            % (exp.label, deadline, "%d s away" % left if left > 0 else "past", margin)
        )


def code_workdir(exp: Experiment, code: Mapping[str, Any] | None = None, root: str | None = None) -> str | None:
    """Where the job runs when the experiment names ``code`` (None otherwise): the checkout's directory that the
    code_checkout module returned (``code["workdir"]``), or in a dry run the one the ref's commit will have."""
    if not exp.code:
        return None
    if code:
        return code["workdir"]
    return code_checkout.workdir(root, exp.code, "<commit of %s>" % exp.code["ref"])


def entrypoint_head(exp: Experiment, workdir: str | None = None) -> str:
    """The command before the overrides, as a shell string; ``workdir``: the code's checkout, where it runs."""
    ep = exp.entrypoint
    if workdir and exp.framework == "nemo_rl":
        ep = dict(ep, repo_dir=workdir)
    elif workdir:
        return "cd %s && %s" % (shell_quote(workdir), entrypoint_head(exp))
    if exp.framework == "verl":
        python = ep.get("python") or VERL_DEFAULTS["python"]
        parts = [python.strip(), "-m", ep.get("module") or VERL_DEFAULTS["module"]]
        config = ep.get("config") or VERL_DEFAULTS["config"]
        if config != VERL_DEFAULTS["config"]:
            parts.append(shell_quote("--config-name=" + config))
        return " ".join(parts)
    if exp.framework == "nemo_rl":
        runner = (ep.get("runner") or NEMO_RL_DEFAULTS["runner"]).strip()
        parts = [
            "cd",
            shell_quote(ep["repo_dir"]),
            "&&",
            runner,
            shell_quote(ep.get("script") or NEMO_RL_DEFAULTS["script"]),
        ]
        if ep.get("config"):
            parts += ["--config", shell_quote(ep["config"])]
        return " ".join(parts)
    return ep["command"].strip()


def job_template(
    exp: Experiment, pairs: Iterable[tuple[str, Any]], filled: Iterable[tuple[str, Any]], workdir: str | None = None
) -> dict[str, Any]:
    """What :func:`reshape` needs to render the entrypoint again for another cluster shape: the
    command, the override pairs, and which shape keys rlinfra filled (those it may change)."""
    filled_keys = {k for k, dummy in filled}
    keys = SHAPE_KEYS.get(exp.conventions, (None, None))
    out: dict[str, Any]
    out = {
        "head": entrypoint_head(exp, workdir),
        "pairs": [[k, v] for k, v in pairs],
        "shape_keys": list(keys),
        "filled": [k in filled_keys for k in keys],
    }
    if exp.conventions == "nemo_rl" and DEADLINE_KEYS["nemo_rl"] in filled_keys:
        # counted from each attempt's submission: reshape() sets it again for the next attempt
        out["save_by"] = [
            DEADLINE_KEYS["nemo_rl"],
            vocabulary.epoch(exp.recovery["deadline"]),
            exp.recovery["deadline_margin"],
        ]
    return out


# What verl reads to resume from one step's directory rather than the one its tracker file names.
RESUME_KEYS = ("trainer.resume_mode", "trainer.resume_from_path")


def reshape(
    template: Mapping[str, Any],
    nodes: Sequence[Mapping[str, Any]] | None = None,
    resume_from: str | None = None,
    now: float | None = None,
) -> tuple[str, Any, Any]:
    """``(entrypoint, nnodes, gpus_per_node)`` of ``template`` on the cluster made of ``nodes``
    (None: as rendered). Only the shape keys rlinfra filled change; a shape the experiment set
    itself is kept. ``resume_from``: a verl step directory to resume from (``trainer.resume_mode=resume_path``), when
    the tracker's step is not whole; ``""``: start over (no whole checkpoint at all)."""
    pairs = [list(p) for p in template["pairs"]]
    if resume_from is not None:
        pairs = [p for p in pairs if p[0] not in RESUME_KEYS]
        pairs += (
            [["trainer.resume_mode", "resume_path"], ["trainer.resume_from_path", resume_from]]
            if resume_from
            else [["trainer.resume_mode", "disable"]]
        )
    if template.get("save_by"):
        key, deadline, margin = template["save_by"]
        now = time.time() if now is None else now
        pairs = [[k, save_by(deadline, margin, now) if k == key else v] for k, v in pairs]
    if nodes is not None:
        for key, filled, value in zip(template["shape_keys"], template["filled"], cluster_shape(nodes)):
            for pair in pairs:
                if filled and pair[0] == key:
                    pair[1] = value
    values = dict((k, v) for k, v in pairs)
    keys = template["shape_keys"]
    overrides = [hydra_override(k, v) for k, v in pairs]
    entrypoint = " ".join([template["head"]] + [shell_quote(o) for o in overrides])
    return entrypoint, values.get(keys[0]) if keys[0] else None, values.get(keys[1]) if keys[1] else None


def render(
    exp: Experiment,
    nodes: Sequence[Mapping[str, Any]] | None,
    cluster: str | None = None,
    run: str | int | None = None,
    checkpoint_root: str | None = DEFAULT_CHECKPOINT_ROOT,
    venv: str | None = None,
    secret_names_present: Collection[str] = (),
    checkpoint_cluster: str | None = None,
    secrets_dir: str | None = None,
    code: Mapping[str, Any] | None = None,
    code_root: str | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """Everything the Ray job needs, except secret values and the working_dir package URI.

    ``nodes`` is the list of alive nodes (``ray_cluster_info``'s ``nodes``, or the same shape
    built from the inventory for a dry run). Returns a dict with ``submission_id``, ``entrypoint``,
    ``overrides`` (argv items as Hydra gets them), ``filled`` (the overrides rlinfra added),
    ``runtime_env`` (no secrets), ``runtime_env_display`` (secrets as ********), ``metadata``,
    ``resources``, ``checkpoint_dir``, ``nnodes``, ``gpus_per_node``, and ``secrets_file`` /
    ``secrets_dir`` (None without secrets, or without ``secrets_dir``: names only): see :func:`_route_secrets`;
    and ``code`` (repo, ref, commit, workdir; None when the experiment names no code). The ``code`` argument is
    the code_checkout module's result (``commit``, ``workdir``); None in a dry run.
    """
    cluster = cluster or exp.cluster
    ckpt_cluster = checkpoint_cluster or cluster
    sid = submission_id(exp.name, cluster, run)
    now = time.time() if now is None else now
    check_deadline(exp, now)
    filled = managed_params(exp, nodes, checkpoint_root, ckpt_cluster, now=now)
    pairs = list(exp.params) + filled
    overrides = [hydra_override(k, v) for k, v in pairs]
    workdir = code_workdir(exp, code, code_root)
    template = job_template(exp, pairs, filled, workdir)
    present = [n for n in list(exp.secrets) + list(exp.optional_secrets) if n in secret_names_present]
    # Where the cluster's run files live, secrets or not: a submit removes the files that ended runs left there.
    secrets_run_dir = "%s/%s" % (secrets_dir.rstrip("/"), cluster) if secrets_dir else None
    secrets_dir = secrets_dir.rstrip("/") if present and secrets_dir else None
    if secrets_dir:
        template["head"] = ENTRYPOINT_PREFIX + template["head"]
    entrypoint = reshape(template, now=now)[0]

    env_vars = dict(DEFAULT_ENV)
    env_vars.update(exp.env)
    if exp.recovery.get("deadline") and DEADLINE_ENV not in env_vars:
        env_vars[DEADLINE_ENV] = "%d" % vocabulary.epoch(exp.recovery["deadline"])
    if venv and "PATH" not in env_vars:
        # Ray expands ${PATH} in env_vars: the driver's `python3` is the cluster's venv.
        env_vars["PATH"] = venv.rstrip("/") + "/bin:${PATH}"
    runtime_env = {"env_vars": env_vars}
    secrets_file = _route_secrets(runtime_env, secrets_dir, cluster, sid) if secrets_dir else None
    display_env = dict(env_vars)
    for name in present:
        display_env[name] = MASK
    display: dict[str, Any] = dict(runtime_env, env_vars=display_env)
    if exp.working_dir:
        display["working_dir"] = exp.working_dir_path

    shape = dict(pairs)
    if exp.conventions in SHAPE_KEYS:
        nnodes, gpus = (shape.get(k) for k in SHAPE_KEYS[exp.conventions])
    else:
        nnodes, gpus = cluster_shape(nodes)
    ckpt = checkpoint_dir(exp, checkpoint_root, ckpt_cluster)
    metadata = {
        "rlinfra_experiment": exp.name,
        "rlinfra_cluster": cluster,
        "rlinfra_project": exp.project,
        "rlinfra_framework": exp.framework,
        "rlinfra_run": str(run or ""),
        "rlinfra_checkpoint_dir": ckpt,
        "rlinfra_attempt": "1",
        "rlinfra_nodes": str(len(nodes or [])),
    }
    code_out = None
    if exp.code:
        commit = code["commit"] if code else None
        code_out = {"repo": exp.code["repo"], "ref": exp.code["ref"], "commit": commit, "workdir": workdir}
        metadata["rlinfra_code"] = "%s@%s" % (exp.code["repo"], commit or "<commit of %s>" % exp.code["ref"])
    return dict(
        submission_id=sid,
        cluster=cluster,
        entrypoint=entrypoint,
        overrides=overrides,
        filled=[hydra_override(k, v) for k, v in filled],
        runtime_env=runtime_env,
        runtime_env_display=display,
        metadata=metadata,
        resources=copy.deepcopy(exp.resources),
        checkpoint_dir=ckpt,
        nnodes=nnodes,
        gpus_per_node=gpus,
        project=exp.project,
        job_template=template,
        secrets_file=secrets_file,
        secrets_dir=secrets_dir,
        secrets_run_dir=secrets_run_dir,
        code=code_out,
    )


def _route_secrets(runtime_env, secrets_dir, cluster, sid):
    """Secret values never enter the runtime_env: Ray puts env_vars in the argv of its worker-setup
    process on every node. Only the path of the run's secrets file does; the entrypoint's shell
    sources the file for the driver and Ray's setup hook (found on PYTHONPATH, on the shared volume
    next to the files) loads it in every worker. Returns the file's path."""
    env_vars = runtime_env["env_vars"]
    path = file_path(secrets_dir, cluster, sid)
    env_vars[FILE_VAR] = path
    # The experiment's own PYTHONPATH stays, after the hook's directory; no trailing ':' (it would
    # put the worker's current directory on sys.path).
    env_vars["PYTHONPATH"] = secrets_dir + (":" + env_vars["PYTHONPATH"] if env_vars.get("PYTHONPATH") else "")
    runtime_env["worker_process_setup_hook"] = HOOK
    return path
