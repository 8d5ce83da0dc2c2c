# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Where an experiment file comes from, and where its artifacts go: one rule (docs/EXPERIMENTS.md).

1. ``rlinfra.verl:NAME`` names one of the collection's bundled examples, and nothing else does.
2. ``verl_job_experiments_dir`` (or the ``RLINFRA_EXPERIMENTS_DIR`` environment variable, when the
   variable is empty) is the only directory read.
3. Otherwise the user's project: ``experiments/`` in the inventory's directory, in the directory of
   the playbook the user ran (not the collection's own playbooks) and in the current directory, each
   followed by its parent's (so a subdirectory of the project, a ``playbooks/`` or an ``inventories/``
   directory find the project's ``experiments/``). The first that holds ``NAME.yml`` (or ``.yaml``) wins.

Artifacts (driver logs, metrics, working_dir zips, per-node logs) go to ``verl_job_artifacts_dir`` when
set, else ``artifacts/`` beside the project's ``experiments/`` that held the experiment, else (a bundled
example, an explicit experiments directory) ``artifacts/`` in the current directory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment

BUNDLED_PREFIX = "rlinfra.verl:"
ENV_VAR = "RLINFRA_EXPERIMENTS_DIR"
# The setting a line names when the controller cannot write a run's artifacts (files.cannot_write).
ARTIFACTS_VAR = "verl_job_artifacts_dir"


class Source:
    """One located experiment file: ``path``, the ``experiments_dir`` holding it, ``artifacts_dir``,
    ``how`` (bundled, explicit, project) and every directory ``searched``."""

    def __init__(
        self, name: str, path: str, experiments_dir: str, artifacts_dir: str, how: str, searched: Sequence[str]
    ):
        self.name, self.path, self.experiments_dir = name, path, experiments_dir
        self.artifacts_dir, self.how, self.searched = artifacts_dir, how, searched

    def as_dict(self) -> dict[str, Any]:
        return dict(
            name=self.name,
            path=self.path,
            experiments_dir=self.experiments_dir,
            artifacts_dir=self.artifacts_dir,
            how=self.how,
            searched=list(self.searched),
        )


def parse_ref(ref: Any) -> tuple[str, bool]:
    """(name, bundled) of what ``-e exp=`` said: ``NAME`` or ``rlinfra.verl:NAME``."""
    ref = "" if ref is None else str(ref).strip()
    bundled = ref.startswith(BUNDLED_PREFIX)
    name = ref[len(BUNDLED_PREFIX) :] if bundled else ref
    if not name:
        raise experiment.ExperimentError(
            "name the experiment: -e exp=NAME (experiments/NAME.yml of your project), "
            "or -e exp=%sNAME for one of the collection's examples" % BUNDLED_PREFIX
        )
    return experiment.validate_name(name), bundled


def _inside(path, root):
    return vocabulary.inside(os.path.realpath(path), os.path.realpath(root))


def project_dirs(
    inventory_sources: Iterable[Any] | None = (),
    playbook_dir: str | None = "",
    cwd: str | None = "",
    collection_root: str | None = "",
) -> list[str]:
    """The ``experiments/`` directories of the user's project, in search order, each once."""
    anchors = []
    for source in inventory_sources or ():
        source = os.path.abspath(os.path.expanduser(str(source)))
        if os.path.isdir(source):
            anchors.append(source)
        elif os.path.isfile(source):
            anchors.append(os.path.dirname(source))
    if playbook_dir and not (collection_root and _inside(playbook_dir, os.path.join(collection_root, "playbooks"))):
        anchors.append(os.path.abspath(playbook_dir))
    if cwd:
        anchors.append(os.path.abspath(cwd))
    dirs, seen = [], set()
    for anchor in anchors:
        for base in (anchor, os.path.dirname(anchor)):
            candidate = os.path.join(base, "experiments")
            real = os.path.realpath(candidate)
            if real not in seen:
                seen.add(real)
                dirs.append(candidate)
    return dirs


def _file_in(directory, name):
    for ext in experiment.EXTENSIONS:
        path = os.path.join(directory, name + ext)
        if os.path.lexists(path):  # a directory, a broken link: reading it says which
            experiment.check_inside(path, directory)
            return path
    return None


def check_artifacts(artifacts_dir: str, name: str) -> str:
    """The run's artifacts directory ``<artifacts_dir>/<name>``, neither it nor its parent a symbolic link (writing
    logs, metrics and zips through a link puts them wherever it points); one line of ExperimentError otherwise."""
    run_dir = os.path.join(artifacts_dir, name)
    for path in (artifacts_dir, run_dir, os.path.join(run_dir, "packages")):
        if os.path.islink(path):
            raise experiment.ExperimentError(
                "artifacts directory %s is a symbolic link (to %s): runs write their logs there only "
                "into a real directory; point verl_job_artifacts_dir at the target itself"
                % (path, os.path.realpath(path))
            )
        if os.path.lexists(path) and not os.path.isdir(path):
            raise experiment.ExperimentError(
                "artifacts directory %s is not a directory; move the file away or point "
                "verl_job_artifacts_dir elsewhere" % path
            )
    return run_dir


def bundled_names(collection_root: str) -> list[str]:
    return experiment.experiment_names(os.path.join(collection_root, "experiments"))


def locate(
    ref: Any,
    explicit_dir: str | None = "",
    environ: Mapping[str, str] | None = None,
    inventory_sources: Iterable[Any] | None = (),
    playbook_dir: str | None = "",
    cwd: str | None = "",
    collection_root: str = "",
    artifacts_dir: str | None = "",
) -> Source:
    """The :class:`Source` of experiment ``ref`` by the rule above; one line of ExperimentError otherwise."""
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    name, bundled = parse_ref(ref)
    bundled_dir = os.path.join(collection_root, "experiments")

    def artifacts(project=None):
        if artifacts_dir:
            return os.path.abspath(os.path.expanduser(artifacts_dir))
        return os.path.join(project or os.path.abspath(cwd), "artifacts")

    if bundled:
        path = _file_in(bundled_dir, name)
        if not path:
            names = bundled_names(collection_root)
            raise experiment.ExperimentError(
                "the collection has no example '%s'%s; its examples: %s"
                % (name, experiment.did_you_mean(name, names), ", ".join(BUNDLED_PREFIX + n for n in names) or "none")
            )
        return Source(name, path, bundled_dir, artifacts(), "bundled", [bundled_dir])

    explicit, setting = explicit_dir, "verl_job_experiments_dir"
    if not explicit and environ.get(ENV_VAR):
        explicit, setting = environ[ENV_VAR], ENV_VAR
    if explicit:
        directory = os.path.abspath(os.path.expanduser(explicit))
        if not os.path.isdir(directory):
            raise experiment.ExperimentError(
                "experiments directory %s (%s) %s; point %s at the directory of your experiment "
                "files"
                % (
                    directory,
                    setting,
                    "is not a directory" if os.path.lexists(directory) else "does not exist",
                    setting,
                )
            )
        path = _file_in(directory, name)
        if not path:
            raise experiment.ExperimentError(_not_found(name, [directory], setting, collection_root))
        return Source(name, path, directory, artifacts(), "explicit", [directory])

    searched = project_dirs(inventory_sources, playbook_dir, cwd, collection_root)
    for directory in searched:
        path = _file_in(directory, name)
        if path:
            return Source(
                name, path, directory, artifacts(os.path.dirname(os.path.abspath(directory))), "project", searched
            )
    raise experiment.ExperimentError(_not_found(name, searched, None, collection_root))


def _not_found(name, searched, setting, collection_root):
    names = sorted({n for d in searched for n in experiment.experiment_names(d)})
    shown = ", ".join(names[:20]) + (" and %d more" % (len(names) - 20) if len(names) > 20 else "")
    where = (
        "searched %s (%s)" % (searched[0], setting)
        if setting
        else "searched %s (the inventory's, the playbook's and the current directory, and their parents)"
        % ", ".join(searched)
    )
    example = name in bundled_names(collection_root) if collection_root else False
    return "experiment '%s' not found: no %s.yml or %s.yaml; %s; experiments there: %s%s%s" % (
        name,
        name,
        name,
        where,
        shown or "none",
        experiment.did_you_mean(name, names),
        "; the collection's example of that name is -e exp=%s%s" % (BUNDLED_PREFIX, name)
        if example
        else "; set verl_job_experiments_dir (or %s) to read another directory" % ENV_VAR,
    )
