# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Compose verl's own Hydra config (``ppo_trainer`` by default) with an experiment's rendered overrides.

Self-contained on purpose: the standard library at the top, hydra and omegaconf imported inside
:func:`check_verl_config`, nothing of the collection. The controller imports it (preflight.py, venv mode); in
container mode verl/image_config_check.py sends this file's source, with :data:`MAIN` appended, to the image's own
``python3`` on the head (``podman exec -i <container> python3 -``), so the check uses the verl and hydra the job
will run with. verl is never imported: only its config folder is found (``importlib.util.find_spec``).

``where``: None for the controller's Python; a label such as ``image 0123456789ab on head-1`` otherwise, which the
messages then name."""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
from collections.abc import Sequence
from typing import Any

_BASE_CACHE: dict[tuple[str, str], Any] = {}
INSTALL_HINT = "pip install --no-deps verl==0.9.1 && pip install hydra-core omegaconf"
IMAGE_HINT = (
    "use an image with verl and hydra-core (verl's own images have both), or set verl_job_verl_config_check=skip"
)
NAME = "verl_config"


def verdict(status: str, message: str, **extra: Any) -> dict[str, Any]:
    out = dict(name=NAME, status=status, message=message)
    out.update(extra)
    return out


def verl_config_dir() -> str | None:
    """``<verl package>/trainer/config`` without importing verl, or None."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "trainer", "config")
    return path if os.path.isdir(path) else None


def _verl_version(config_dir):
    try:
        from importlib import metadata

        return metadata.version("verl")
    except Exception:
        return "unknown version"


def _flat_keys(node, prefix=""):
    out = []
    if isinstance(node, dict):
        for k, v in node.items():
            key = "%s%s" % (prefix, k)
            out.append(key)
            out.extend(_flat_keys(v, key + "."))
    return out


def _missing_mandatory(cfg, OmegaConf):
    """``???`` keys left in the composed config, except under a section with ``enable: false``."""
    missing = []

    def walk(node, prefix):
        if OmegaConf.is_dict(node):
            try:
                if node.get("enable", None) is False:
                    return
            except Exception:
                pass
            for key in node.keys():
                full = "%s%s" % (prefix, key)
                if OmegaConf.is_missing(node, key):
                    missing.append(full)
                    continue
                try:
                    child = node._get_node(key)
                except Exception:
                    continue
                if OmegaConf.is_dict(child):
                    walk(child, full + ".")

    walk(cfg, "")
    return missing


def _expected_type_problem(key, base_value, new_value):
    if base_value is None or new_value is None or isinstance(base_value, str):
        return None
    if isinstance(base_value, bool):
        ok = isinstance(new_value, bool)
        want = "a boolean"
    elif isinstance(base_value, int):
        ok = isinstance(new_value, int) and not isinstance(new_value, bool)
        want = "an integer"
    elif isinstance(base_value, float):
        ok = isinstance(new_value, (int, float)) and not isinstance(new_value, bool)
        want = "a number"
    else:
        return None
    if ok:
        return None
    return "%s=%r: verl expects %s here (its default is %r)" % (key, new_value, want, base_value)


def _missing(reason, where, hint=""):
    """The check skipped: verl or hydra cannot be found in the Python that runs it."""
    if where:
        return verdict(
            "skipped",
            "the image has no verl/hydra (%s, for %s in %s): verl config check skipped; %s"
            % (reason, sys.executable, where, IMAGE_HINT),
        )
    return verdict(
        "skipped",
        "verl config check skipped: %s in the controller's Python (%s); %s%s"
        % (reason, sys.executable, hint, INSTALL_HINT),
    )


def check_verl_config(
    overrides: Sequence[str], config_name: str = "ppo_trainer", config_dir: str | None = None, where: str | None = None
) -> dict[str, Any]:
    """Compose verl's config with ``overrides`` (argv items, as Hydra receives them)."""
    config_dir = config_dir or verl_config_dir()
    if config_dir is None:
        return _missing("verl is not installed", where, "to catch misspelt keys before submitting: ")
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf
    except ImportError as e:
        return _missing(str(e), where)
    version = _verl_version(config_dir)
    # Which Python ran it, when not the controller's: "verl 0.9.1 config in image 0123456789ab on head-1".
    tail = " - verl %s config in %s" % (version, where) if where else ""
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=config_dir, version_base=None):
            key: Any = (config_dir, config_name)
            if key not in _BASE_CACHE:  # verl's defaults, to compare types and suggest keys
                try:
                    _BASE_CACHE[key] = compose(config_name, overrides=[])
                except Exception as e:
                    return verdict(
                        "failed",
                        "verl config %r cannot be composed from %s: %s%s"
                        % (config_name, config_dir, _one_line(e), tail),
                    )
            base = _BASE_CACHE[key]
            try:
                cfg = compose(config_name, overrides=list(overrides))
            except Exception as e:
                return verdict("failed", _compose_error(e, base, OmegaConf, version) + tail)
    finally:
        GlobalHydra.instance().clear()

    problems = []
    for item in overrides:
        key = item.split("=", 1)[0].lstrip("+~")
        if "=" not in item:
            continue
        try:
            base_value = OmegaConf.select(base, key, throw_on_missing=False, throw_on_resolution_failure=False)
            new_value = OmegaConf.select(cfg, key, throw_on_missing=False, throw_on_resolution_failure=False)
        except Exception:
            continue
        problem = _expected_type_problem(key, base_value, new_value)
        if problem:
            problems.append(problem)
    missing = _missing_mandatory(cfg, OmegaConf)
    if missing:
        problems.append(
            "verl's config leaves %s unset (???): set %s in params (e.g. actor_rollout_ref.rollout.name: vllm)"
            % (", ".join(missing), "it" if len(missing) == 1 else "them")
        )
    if problems:
        return verdict(
            "failed", "verl config check (verl %s, %s): %s%s" % (version, config_name, "; ".join(problems), tail)
        )
    return verdict(
        "passed",
        "verl config check passed: %d override(s) compose with verl %s's %s%s"
        % (len(overrides), version, config_name, tail),
    )


def _compose_error(exc, base, OmegaConf, version):
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    cause = getattr(exc, "__cause__", None)
    text = " ".join(lines[:2]) if lines else type(exc).__name__
    if cause is not None and str(cause).strip():
        first = str(cause).strip().splitlines()[0]
        if first not in text:
            text += " (%s)" % first
    hint = ""
    if "Could not override '" in text:
        key = text.split("Could not override '", 1)[1].split("'", 1)[0]
        keys = _flat_keys(OmegaConf.to_container(base, resolve=False))
        close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
        if close:
            hint = " Did you mean '%s'?" % close[0]
    return "verl config check failed (verl %s): %s%s" % (version, text, hint)


def _one_line(exc):
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0] if lines else type(exc).__name__


# What image_config_check.py appends to this file's source for the image's Python: the arguments are a JSON text in
# the script itself (so on stdin, never in any process's arguments); the result is one marked JSON line.
MARK = "RLINFRA-VERL-CONFIG "
MAIN = r"""
def _rlinfra_main(payload):
    import json
    args = json.loads(payload)
    try:
        result = check_verl_config(args["overrides"], args["config_name"], where=args["where"])
    except Exception as exc:  # an error of hydra itself, not of the overrides: still one line
        result = verdict("failed", "verl config check could not run (%s: %s) in %s" % (
            type(exc).__name__, _one_line(exc), args["where"]))
    result["python"] = sys.executable
    sys.stdout.write(MARK + json.dumps(result) + "\n")


_rlinfra_main(@PAYLOAD@)
"""


def main_for(payload: str) -> str:
    """:data:`MAIN` with the arguments' JSON text ``payload`` as a string literal."""
    return MAIN.replace("@PAYLOAD@", repr(payload))
