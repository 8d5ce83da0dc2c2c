# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Checks run before an experiment is submitted, so that mistakes fail in seconds, not after
the cluster has spent minutes starting a run:

* ``verl_config``: compose verl's own Hydra config (``ppo_trainer`` by default) with the rendered
  overrides (verl/config_check.py). Needs ``verl`` (installed with ``--no-deps``, only its config files
  are read; verl is never imported), ``hydra-core`` and ``omegaconf`` in the controller's Python -
  or, in container mode, in the image (verl/image_config_check.py, run on the head); skipped, saying
  so, when they are missing.
* ``resources``: the cluster has the GPUs asked for and, per node, the CPUs verl's placement
  groups reserve (rule below).
* ``working_dir``: the zipped working_dir stays under Ray's upload limit, and holds only its own files (no link
  leads out of it, nor out of the experiments directory).

Resource rule for verl (verl 0.9, ``ResourcePoolManager.max_colocate_count = 3``): verl reserves one
placement-group bundle ``{"CPU": 3, "GPU": 1}`` per GPU, all the bundles of a node in one group, so
each of the ``trainer.nnodes`` nodes it uses needs at least ``trainer.n_gpus_per_node`` GPUs and
``3 x trainer.n_gpus_per_node`` CPUs. On top, the cluster needs 1 CPU for verl's ``TaskRunner`` actor
plus the entrypoint's ``entrypoint_num_cpus``. For NeMo RL only GPUs are checked
(``cluster.num_nodes`` nodes with ``cluster.gpus_per_node`` GPUs each); for custom programs only the
entrypoint's own resources.

Each check is a dict ``{name, status: passed|failed|skipped, message}``.
"""

from __future__ import annotations

import contextlib

# The tests reach find_spec through this module.
import importlib.util  # noqa: F401 pylint: disable=unused-import
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.common.numbers import float_or_none, tidy
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import package as ray_package
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_source

# This module's API (the controller's check): re-exported from config_check, which the image runs on its own.
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.config_check import (  # noqa: F401 pylint: disable=unused-import
    INSTALL_HINT,
    check_verl_config,
    verl_config_dir,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment import SHAPE_KEYS
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError

VERL_CPUS_PER_GPU = 3  # verl ResourcePoolManager.max_colocate_count: bundle {"CPU": 3, "GPU": 1} per GPU
VERL_TASK_RUNNER_CPUS = 1  # verl's TaskRunner actor (plain @ray.remote: 1 CPU to schedule)


def check(name: str, status: str, message: str, **extra: Any) -> dict[str, Any]:
    out = dict(name=name, status=status, message=message)
    out.update(extra)
    return out


CONTAINER_KEYS = ("engine_path", "name", "image_id")


def container_problem(container: Mapping[str, Any] | None) -> str | None:
    """The line when ``container`` (the head's Ray container, from its rlinfra_ray fact) is given but cannot be run
    in; None for a whole one or none ({}: a venv, a dry run)."""
    if not container:
        return None
    missing = [k for k in CONTAINER_KEYS if not container.get(k)]
    if missing:
        return (
            "container names no %s: the verl config check cannot run in the head's image; pass the head's container "
            "as rlinfra.verl.ray_cluster_info returns it (engine_path, name, image_id), or {} for a venv"
            % " or ".join(missing)
        )
    return None


def image_check(res: Mapping[str, Any], image_id: str | None, head: str | None) -> dict[str, Any]:
    """The verl_config check from rlinfra.verl.verl_config_check's result ``res`` (run in the image on the head); a
    failed task (the module refused its arguments, the script raised) is a failed check in one line."""
    found = res.get("check") if isinstance(res, dict) else None
    if not res.get("failed") and isinstance(found, dict) and found.get("status") in ("passed", "failed", "skipped"):
        return dict(found, name="verl_config")
    why = " ".join(str(res.get("msg") or "no result").split())[:500]
    return check(
        "verl_config",
        "failed",
        "verl config check could not run in image %s on %s: %s" % ((image_id or "?")[:12], head or "the head", why),
    )


def apply_mode(result: dict[str, Any], mode: str | None) -> dict[str, Any]:
    """``verl_job_verl_config_check``: under ``required`` a skipped check (no verl/hydra where it ran) fails."""
    if mode == "required" and result["status"] == "skipped":
        result = dict(result, status="failed")
    return result


# --------------------------------------------------------------------------------------------
# Cluster resources
# --------------------------------------------------------------------------------------------


def _res(node, key):
    return float_or_none((node.get("resources") or {}).get(key))


def check_resources(
    framework: str,
    conventions: str,
    nnodes: int | None,
    gpus_per_node: int | None,
    nodes: Iterable[Mapping[str, Any]] | None,
    cluster: str = "default",
    resources: Mapping[str, Any] | None = None,
    custom_known: bool = False,
) -> dict[str, Any]:
    """Check ``nodes`` (alive nodes with ``resources``) against what the job will ask for.
    ``custom_known``: the nodes carry all their resources (read from the live cluster, not from the
    inventory), so the entrypoint's custom resources can be checked too."""
    name = "resources"
    nodes = list(nodes or [])
    resources = resources or {}
    ep_cpus = float(resources.get("entrypoint_num_cpus") or 0)
    ep_gpus = float(resources.get("entrypoint_num_gpus") or 0)
    if not nodes:
        return check(name, "failed", "Ray cluster '%s' has no alive node" % cluster)
    gpus = [_res(n, "GPU") or 0.0 for n in nodes]
    cpus = [_res(n, "CPU") for n in nodes]
    cpu_known = all(c is not None for c in cpus)
    shape = "%d node(s), GPUs per node %s, CPUs per node %s" % (
        len(nodes),
        [tidy(g) for g in gpus],
        [tidy(c) if c is not None else "?" for c in cpus],
    )
    notes = []

    if framework in ("verl", "nemo_rl"):
        # The keys the job's shape was read from; with conventions: none, the framework's own, for the message.
        keys = SHAPE_KEYS.get(conventions) or SHAPE_KEYS[framework]
        nn, gpn = int(nnodes or 0), int(gpus_per_node or 0)
        asked = "%s=%d x %s=%d" % (keys[0], nn, keys[1], gpn)
        if nn < 1 or gpn < 1:
            return check(
                name,
                "failed",
                "%s needs GPUs but the job asks for %s, from cluster '%s' (%s)" % (framework, asked, cluster, shape),
            )
        fit = [i for i, g in enumerate(gpus) if g >= gpn]
        if len(fit) < nn:
            return check(
                name,
                "failed",
                "not enough GPUs: %s needs %d node(s) with %d GPU(s) each (%d GPUs), but "
                "cluster '%s' has %d such node(s) and %s GPU(s) in all (%s)"
                % (asked, nn, gpn, nn * gpn, cluster, len(fit), tidy(sum(gpus)), shape),
            )
        if framework == "verl":
            need = VERL_CPUS_PER_GPU * gpn
            if cpu_known:
                cpu_fit = [i for i in fit if cpus[i] >= need]
                if len(cpu_fit) < nn:
                    return check(
                        name,
                        "failed",
                        "not enough CPUs: verl reserves %d CPUs per GPU, so each of the %d "
                        "node(s) needs %d CPUs for %d GPUs, but only %d node(s) of cluster '%s' have that (%s)"
                        % (VERL_CPUS_PER_GPU, nn, need, gpn, len(cpu_fit), cluster, shape),
                    )
                # Whatever the bundles leave, on any node, must hold the TaskRunner and the driver.
                spare = sum(cpus) - nn * need
                extra = VERL_TASK_RUNNER_CPUS + ep_cpus
                if spare < extra:
                    return check(
                        name,
                        "failed",
                        "not enough CPUs: verl's placement groups take %d CPUs and the "
                        "TaskRunner plus the entrypoint need %s more, but cluster '%s' has %s CPUs in all (%s)"
                        % (nn * need, tidy(extra), cluster, tidy(sum(cpus)), shape),
                    )
            else:
                notes.append("CPU counts unknown, CPU rule (%d per GPU) not checked" % VERL_CPUS_PER_GPU)
    custom = dict(resources.get("entrypoint_resources") or {}) if custom_known else {}
    if ep_cpus or ep_gpus or custom:
        ok = [
            i
            for i in range(len(nodes))
            if gpus[i] >= ep_gpus
            and (cpus[i] is None or cpus[i] >= ep_cpus)
            and all((_res(nodes[i], k) or 0.0) >= float(v) for k, v in custom.items())
        ]
        if not ok:
            # A job no node can hold is not refused by Ray: it stays PENDING until the wait times out.
            wanted = ", ".join("%s=%s" % (k, tidy(v)) for k, v in sorted(custom.items()))
            wanted = ", entrypoint_resources: " + wanted if wanted else ""
            return check(
                name,
                "failed",
                "no node of cluster '%s' can hold the entrypoint (entrypoint_num_cpus=%s, "
                "entrypoint_num_gpus=%s%s; %s)" % (cluster, tidy(ep_cpus), tidy(ep_gpus), wanted, shape),
            )
    message = "cluster '%s' fits the job: %s" % (cluster, shape)
    if notes:
        message += "; " + "; ".join(notes)
    return check(name, "passed", message)


# --------------------------------------------------------------------------------------------
# working_dir
# --------------------------------------------------------------------------------------------


def check_working_dir(
    path: str | None,
    excludes: Iterable[str] | None = (),
    max_bytes: int = ray_package.RAY_PACKAGE_MAX_BYTES,
    dest: str | None = None,
    experiments_dir: str | None = None,
) -> dict[str, Any]:
    """Zip the working_dir (to ``dest`` when given); passes with the package's uri and size. ``dest`` that cannot be
    written is no fault of the working_dir: its :class:`ray_package.DestError` goes to the caller, who knows what set
    it. ``experiments_dir``: the directory the working_dir must not leave through a link."""
    name = "working_dir"
    if not path:
        return check(name, "skipped", "no working_dir")
    try:
        pkg = ray_package.build_package(path, excludes, max_bytes=max_bytes, dest=dest, experiments_dir=experiments_dir)
    except ray_package.PackageError as e:
        return check(name, "failed", str(e))
    except ray_package.DestError:
        raise
    except OSError as e:
        return check(name, "failed", _unreadable(path, excludes, e))
    pkg.pop("data", None)
    return check(
        name,
        "passed",
        "working_dir %s: %d file(s), %s zipped, under Ray's %s limit (checkpoints/ and "
        "*.safetensors excluded)" % (path, pkg["files"], ray_package.mib(pkg["size"]), ray_package.mib(max_bytes)),
        package=pkg,
    )


def package_working_dir(
    path: str | None, excludes: Iterable[str] | None, package_dir: str, experiments_dir: str | None = None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(check, package): :func:`check_working_dir` with the zip kept in ``package_dir`` (the run's
    ``<artifacts>/<NAME>/packages``) under its content's name; ``package`` is None when the check failed, and nothing
    is left behind then. A directory or a zip that cannot be written is one line of ExperimentError naming
    verl_job_artifacts_dir: a full disk or a read-only directory is no fault of the working_dir."""
    tmp_path = None
    try:
        os.makedirs(package_dir, mode=0o700, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(prefix=".pkg-", suffix=".zip", dir=package_dir)
        os.close(fd)
        wd = check_working_dir(path, excludes, dest=tmp_path, experiments_dir=experiments_dir)
        pkg = wd.get("package")
        if pkg:
            final = os.path.join(package_dir, pkg["uri"].split("://", 1)[1])
            os.replace(tmp_path, final)
            tmp_path, pkg["path"] = None, final
        return wd, pkg
    except OSError as e:
        raise ExperimentError(
            files.cannot_write(experiment_source.ARTIFACTS_VAR, package_dir, "the working_dir package", e)
        ) from e
    finally:
        if tmp_path:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)


def _unreadable(root, excludes, error):
    """One line naming the file of ``root`` that could not be read. An error raised while reading
    (EIO) carries no file name: the files are then read again, in package order, to find it."""
    culprit = error.filename
    if not culprit:
        patterns = tuple(ray_package.DEFAULT_EXCLUDES) + tuple(excludes or ())
        try:
            for _dummy, full, is_dir in ray_package.iter_entries(root, patterns):
                if is_dir:
                    continue
                try:
                    with open(full, "rb") as f:
                        while f.read(1 << 20):
                            pass
                except OSError as e:
                    culprit, error = full, e
                    break
        except (OSError, ray_package.PackageError):
            pass
    reason = error.strerror or str(error)
    if culprit:
        rel = os.path.relpath(culprit, root) if os.path.isabs(culprit) else culprit
        return (
            "working_dir %s: cannot read %s (%s); fix the file's permissions, or leave it out with the "
            "experiment's excludes (e.g. excludes: [%s])" % (root, rel, reason, ray_package.excludes_item(rel))
        )
    return "working_dir %s cannot be read (%s); check the directory's permissions and disk" % (root, reason)


def summarize(checks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    failed = [c for c in checks if c["status"] == "failed"]
    return dict(
        ok=not failed,
        checks=checks,
        failed=[c["message"] for c in failed],
        skipped=[c["message"] for c in checks if c["status"] == "skipped"],
    )
