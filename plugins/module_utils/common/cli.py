# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The playbooks' command-line switches (``-e name=value``), read strictly, before anything is done.

Each playbook has a fixed set of switches. A switch is refused, with one line for all of them, when:

* its value is not of its kind (an on/off switch that is not true/false/yes/no/1/0: ``| bool`` would
  read ``dry_run=treu`` as false and submit for real; a count that is not a whole number);
* it is an on/off switch or a count of another playbook (``stop.yml -e dry_run=true`` would stop for real).
  The words (``exp``, ``run``, ``cluster``, ``checkpoint_cluster``) pass: an AWX workflow sends its survey
  answers to every playbook of the chain, site.yml included;
* its name is a near miss of a switch (``-e dryrun=true``, ``-e dry-run=true``): Ansible would take it
  as a variable nobody reads, and the run would do the opposite of what was asked.

Names that belong to the collection's roles (``verl_job_*``, ``ray_*``, ...) and anything far from a
switch pass untouched: ``-e`` also sets ordinary variables.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import settings, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import (
    GPU_MODEL,
    MAX_GPUS,
    MAX_INSTANCES,
    MAX_PRICE,
)

# An experiment's name (module_utils/verl/experiment_schema.py NAME_RE, without its anchors).
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,79}"


def _word(pattern: str, max_len: int, what: str) -> vocabulary.Text:
    """A word the switch must give: never empty, never null."""
    return vocabulary.Text(empty=False, max_len=max_len, nullable=False, pattern=pattern, what=what)


def _count(high: int) -> vocabulary.Int:
    """A count from 1 to ``high``: the rental's own bounds for provision.yml's, and for an attempt or a step a number
    no run reaches (10**30 is no attempt, and would only become a path no run has)."""
    return vocabulary.Int(1, high, nullable=False, must="be a whole number from 1 to %d" % high)


# Each switch's type (module_utils/common/vocabulary.py). A switch given as null (from -e @file) is refused, never unset.
SWITCHES = {
    "exp": _word(
        r"^(rlinfra\.verl:)?%s$" % _NAME,
        200,
        "an experiment name (letters, digits, _ . -), or rlinfra.verl:NAME for a bundled example",
    ),
    # A scope (SCOPES): given, never empty - an unset shell variable (-e cluster=$CLUSTER) must not mean "all".
    "run": vocabulary.Name(nullable=False),
    "cluster": vocabulary.Name(nullable=False),
    "checkpoint_cluster": vocabulary.Name(nullable=False),
    "dry_run": vocabulary.Switch(nullable=False),
    "wait": vocabulary.Switch(nullable=False),
    "attempt": _count(10**6),
    "step": _count(10**12),
    "teardown_stop_jobs": vocabulary.Switch(nullable=False),
    "teardown_purge": vocabulary.Switch(nullable=False),
    "ray_restart_running_jobs": vocabulary.Switch(nullable=False),
    "release": vocabulary.Switch(nullable=False),
    "nodes": _count(MAX_INSTANCES),
    "gpu": _word(GPU_MODEL, 64, "a GPU model such as H100 (or any, with max_price)"),
    "gpu_count": _count(MAX_GPUS),
    "label": vocabulary.Name(nullable=False),
    "max_price": vocabulary.Number(0, MAX_PRICE, above=True, nullable=False, unit="US dollars per GPU-hour"),
    "region": vocabulary.Name(empty=True, nullable=False),
    "keep_partial": vocabulary.Switch(nullable=False),
    "api": vocabulary.Choice(("on_demand", "marketplace"), nullable=False),
    "replace_unfit": vocabulary.Switch(nullable=False),
    "on_end": vocabulary.Choice(("keep", "release", "release_always"), nullable=False),
}
# The switches that choose what a playbook acts on, and what leaving each out means. Given empty (an unset shell
# variable), each is refused in one line: "-e cluster=" on teardown.yml would otherwise take down every cluster. An AWX
# survey question left blank is sent as "" or null by AWX before 2026 (awx#16205, fixed by awx#16289): in an AWX job
# (awx_job_id set) that is "not answered", and teardown's survey asks for its cluster (required).
SCOPES = {
    "exp": "an experiment name",
    "run": "the run's suffix, or leave -e run out for the run without one",
    "cluster": "the cluster's name, or leave -e cluster out for the experiment's cluster (every cluster for site.yml, "
    "fitness.yml and teardown.yml)",
    "checkpoint_cluster": "the cluster whose checkpoints to resume from, or leave -e checkpoint_cluster out for the "
    "cluster's own",
    "label": "the label of the rentals (a name)",
}

# Words pass every playbook (an AWX workflow sends its survey answers to every playbook of its chain).
WORDS = ("exp", "run", "cluster", "checkpoint_cluster", "gpu", "label", "max_price", "region", "api")

_JOB = ("exp", "run", "cluster")
PLAYBOOKS = {
    "site": ("ray_restart_running_jobs",),
    "submit": _JOB + ("checkpoint_cluster", "dry_run", "wait", "on_end"),
    "status": _JOB,
    "stop": _JOB,
    "logs": _JOB + ("attempt",),
    "merge": _JOB + ("step",),
    "teardown": ("cluster", "teardown_stop_jobs", "teardown_purge", "release", "api"),
    "provision": ("nodes", "gpu", "gpu_count", "label", "max_price", "region", "keep_partial", "api", "replace_unfit"),
    "fitness": ("cluster",),
}

# The playbooks that work on a cluster of the inventory. Ansible only warns when an inventory source cannot be loaded
# and goes on with no hosts, so these stop when no host is in ray_head. teardown.yml checks its own (a cluster whose
# head is gone is still taken down); provision.yml rents its cluster.
NEEDS_CLUSTER = ("site", "submit", "status", "stop", "logs", "merge", "fitness")

# A playbook that runs another in the same run: the other's checks accept the first one's switches.
CHAINS = {"site": ("provision",), "fitness": ("provision",)}
# Variables of the collection's roles and plugins, and Ansible's own: given with -e on purpose.
_OWN_PREFIXES = (
    "verl_job_",
    "ray_",
    "nfs_mount_",
    "storage_lvm_",
    "python_env_",
    "hyperbolic_",
    "fitness_",
    "ansible_",
)


# The playbooks' own variables (rlinfra_*, typed in module_utils/common/settings.py): their plays' keywords read them
# before any task (timeout: rlinfra_step_timeout), so the command line's check is theirs too.
OWN = tuple(settings.names_for(["rlinfra"]))


def _near_miss(name: str, known: Iterable[str]) -> str | None:
    """The switch ``name`` was probably meant to be, or None."""
    if name in SWITCHES or name.startswith(_OWN_PREFIXES):
        return None
    squashed = re.sub(r"[^a-z0-9]", "", name.lower())
    for switch in known:
        # The same letters: a case or separator slip (DRY_RUN, dry-run) or two swapped letters (wiat).
        if sorted(squashed) == sorted(re.sub(r"[^a-z0-9]", "", switch)):
            return switch
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.8)
    return close[0] if close else None


def _value(name: str, value: Any) -> tuple[Any, str | None]:
    """(parsed, error)."""
    t = SWITCHES[name]
    if name in SCOPES and isinstance(value, str) and not value.strip():
        return None, "%s is empty (-e %s= with nothing after it: an unset shell variable?): give %s" % (
            name,
            name,
            SCOPES[name],
        )
    try:
        return t.validate(
            value.strip() if isinstance(value, str) and not isinstance(t, vocabulary.Switch) else value
        ), None
    except vocabulary.Bad as e:
        return None, t.line(name, value, e)


def check(
    playbook: str, given: Collection[str] | None, values: dict[str, Any], awx: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """``given``: the names passed with ``-e`` (None when unknown); ``values``: the switches' values as the
    play sees them (absent: not set); ``awx``: the run is an AWX job, whose survey sends a blank answer as "" or null
    (a scope left blank is then not given). Returns ``(parsed, errors)``: parsed switches of this playbook, and one
    line per problem."""
    mine = PLAYBOOKS[playbook]
    if awx:
        values = {
            n: v for n, v in values.items() if not (n in SCOPES and (v is None or isinstance(v, str) and not v.strip()))
        }
    parsed, errors = {}, []
    for name in mine:
        # A switch not given at all is absent from values (None there means -e name=null, an error).
        if name in values and (values[name] is not None or name in (given or ())):
            result, error = _value(name, values[name])
            if error:
                errors.append(error)
            else:
                parsed[name] = result
    errors += settings.check({n: v for n, v in values.items() if n in OWN})
    chained = {n for other in CHAINS.get(playbook, ()) for n in PLAYBOOKS[other]}
    for name in sorted(given or ()):
        if name in mine or name in chained:
            continue
        if name in SWITCHES:
            if name in WORDS:
                continue
            errors.append(
                "-e %s is not a switch of %s.yml (its switches: %s); it would be ignored: drop it"
                % (name, playbook, ", ".join(mine))
            )
            continue
        meant = _near_miss(name, mine)
        if meant:
            errors.append(
                "-e %s is not a switch of %s.yml; did you mean -e %s? (its switches: %s)"
                % (name, playbook, meant, ", ".join(mine))
            )
    return parsed, errors


def summary(playbook: str, errors: Iterable[str]) -> str:
    return "Bad command line for %s.yml, nothing was done: %s" % (playbook, "; ".join(errors))


def no_cluster(playbook: str, sources: Iterable[Any] | None) -> str:
    """The one line for a run whose inventory (``sources``: ansible_inventory_sources) gave no host in ray_head."""
    return (
        "No Ray cluster for %s.yml, nothing was done: no host in group ray_head; the inventory (%s) gave none "
        "(a source that could not be loaded is named in the warning above): fix it and rerun"
        % (playbook, ", ".join(str(s) for s in sources or ()) or "none given")
    )
