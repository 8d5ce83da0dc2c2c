"""Every path the collection is given says what it is for (module_utils/common/paths.py): each path-typed field of
every surface - module and action arguments, experiment keys, role variables, command-line switches - is declared with
a purpose, and the roles' path variables are all typed. A generic path (``AbsPath()`` with no purpose) fails here the
day it is declared; the generated bad-input tests (test_bad_input_generated.py) then try ``/``, the system's
directories and what lies under them on every written one."""

from __future__ import annotations

import glob
import importlib
import os
import pkgutil

import pytest
import yaml

from ansible_collections.rlinfra.verl.plugins import action as action_pkg
from ansible_collections.rlinfra.verl.plugins import modules as modules_pkg
from ansible_collections.rlinfra.verl.plugins.module_utils.common import cli, paths, settings, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_schema

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH_TYPES = (vocabulary.AbsPath, settings._Path)


def _walk(t, where):
    """``(where, type)`` of every path type at or below ``t``."""
    if isinstance(t, PATH_TYPES):
        yield where, t
    if isinstance(t, vocabulary.Section):
        for key, sub in t.fields.items():
            yield from _walk(sub, "%s.%s" % (where, key))
    elif isinstance(t, vocabulary.ListOf):
        yield from _walk(t.item, where + "[]")
    elif isinstance(t, vocabulary.MapOf):
        yield from _walk(t.key, where + "{key}")
        yield from _walk(t.value, where + "{}")
    elif isinstance(t, vocabulary.OneOf):
        for sub in t.types:
            yield from _walk(sub, where)
    elif isinstance(t, vocabulary.PathOrUrl):
        yield from _walk(t.path, where)
    elif isinstance(t, experiment_schema._ByFramework):
        for name, section in t.sections.items():
            yield from _walk(section, "%s<%s>" % (where, name))


def _declarations():
    out = []
    for pkg in (modules_pkg, action_pkg):
        for info in pkgutil.iter_modules(pkg.__path__):
            mod = importlib.import_module("%s.%s" % (pkg.__name__, info.name))
            args = getattr(mod, "ARGS", None)
            if isinstance(args, vocabulary.Args):
                for field, t in args:
                    out += _walk(t, "%s %s: %s" % (pkg.__name__.rsplit(".", 1)[-1], info.name, field))
    out += _walk(experiment_schema.SCHEMA, "experiment key")
    for name, t in settings.RULES.items():
        out += _walk(t, "role variable " + name)
    for name, t in cli.SWITCHES.items():
        out += _walk(t, "switch " + name)
    return out


DECLARED = _declarations()


def test_the_surfaces_have_paths_to_check():
    assert len(DECLARED) > 80, len(DECLARED)


def test_every_path_field_says_what_it_is_for():
    generic = sorted(where for where, t in DECLARED if t.purpose not in paths.PURPOSES)
    assert not generic, "path fields without a purpose (give each one of %s):\n%s" % (
        ", ".join(paths.PURPOSES),
        "\n".join(generic),
    )


def test_a_path_without_a_purpose_is_found():
    """The walk sees a generic path wherever one hides (in a section, a list, a mapping's keys)."""
    hidden = vocabulary.Section(dict(a=vocabulary.ListOf(vocabulary.MapOf(vocabulary.AbsPath(), vocabulary.Int()))))
    assert [(w, t.purpose) for w, t in _walk(hidden, "x")] == [("x.a[]{key}", None)]
    with pytest.raises(ValueError):
        vocabulary.AbsPath("write")  # a misspelt purpose is no purpose


def test_every_path_variable_of_the_roles_has_a_typed_purpose():
    """A role variable that is a path (``type: path`` in its argument spec, or named as one) is a rule with a purpose in
    module_utils/common/settings.py, or reaches an action whose argument names it (verl_job's, checked on the
    controller before any connection)."""
    labelled = {t.label.split(" ")[-1].strip("()") for where, t in DECLARED if t.label}
    labelled |= {t.label for where, t in DECLARED if t.label}
    # Path variables whose value reaches a typed argument by another way, each with why no rule of its own is needed.
    reached = {
        "verl_job_node_logs_dir": "tasks_from node_logs: set by the role itself from run_artifacts_dir (artifacts_dir, local)",
        "verl_job_token_path": "a file the Ray modules only read (auth_token_path, reads): anywhere is good",
        "python_env_fingerprint_file": "python_env_sync's fingerprint_file (writes); its default lies in python_env_path",
    }
    path_like = (
        "_dir",
        "_path",
        "_root",
        "_point",
        "_file",
        "_mounts",
        "_venv",
        "_store",
        "_wheelhouse",
        "_archive",
        "_export",
        "_python",
    )
    missing = []
    for spec in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")):
        with open(spec) as handle:
            entries = yaml.safe_load(handle)["argument_specs"].values()
        for entry in entries:
            for name, option in (entry.get("options") or {}).items():
                if option.get("type") != "path" and not name.endswith(path_like):
                    continue
                rule = settings.RULES.get(name)
                typed = [t for w, t in _walk(rule, name)] if rule is not None else []
                if isinstance(rule, vocabulary.RelPath) or name in reached:
                    continue  # a relative path stays inside its base by its type
                if not (typed and all(t.purpose for t in typed)) and name not in labelled:
                    missing.append("%s (%s)" % (name, os.path.relpath(spec, ROOT)))
    assert not missing, "role path variables without a typed purpose:\n" + "\n".join(sorted(set(missing)))


@pytest.mark.parametrize(
    "path,purpose,bad",
    [
        ("/", "owns", "not /"),
        ("/usr", "owns", "/usr is one"),
        ("//etc", "writes", "/etc is one"),
        ("/etc/ssh", "mounts", "/etc/ssh is under /etc"),
        ("/proc/1/x", "local", "under /proc"),
        ("/var/lib", "owns", "not /var/lib itself"),
        ("/home/ubuntu", "writes", "not /home/ubuntu itself"),
        ("/opt/", "owns", "not /opt itself"),
        ("/etc", "config", "not /etc itself"),
        ("/usr/lib/x", "config", "under /usr"),
        ("/var/lib/dpkg/x", "owns", "under /var/lib/dpkg"),
    ],
)
def test_misplaced(path, purpose, bad):
    assert bad in paths.misplaced(path, purpose)


@pytest.mark.parametrize(
    "path,purpose",
    [
        ("/opt/rlinfra/venv", "owns"),
        ("/workspace", "writes"),
        ("/data", "mounts"),
        ("/etc/ray", "config"),
        ("/etc/systemd/system", "config"),
        ("/var/lib/rlinfra", "owns"),
        ("/home/ubuntu/ckpt", "writes"),
        ("/usr/bin/python3", "reads"),
        ("/", "remote"),
        ("/tmp/x", "local"),
        ("artifacts", "local"),
    ],
)
def test_placed(path, purpose):
    assert paths.misplaced(path, purpose) is None


def test_duplicates_are_the_same_place():
    assert paths.duplicates(["/data", "/workspace", "/data/", "//data"]) == ["/data/", "//data"]
    assert paths.duplicates(["/data", "/data2"]) == []
