# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The verl config check run with the image's Python, on the head in container mode: module
``rlinfra.verl.verl_config_check`` (the documentation and the options) and the same code as a plain script on the
head (plugin_utils/node_script.py).

The image's ``python3`` gets, on its standard input, verl/config_check.py's source with its ``MAIN`` appended
(``<engine> exec -i <container> python3 -``): the overrides travel as JSON inside that script, never in a process's
arguments. The answer is one marked JSON line; anything else (the container not running, no ``python3`` in the
image) is a failed check naming the engine's own line."""

from __future__ import annotations

import json
import socket
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.node import container as container_rules
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import config_check

STATUSES = ("passed", "failed", "skipped")


def where(image_id: str | None, node: str | None) -> str:
    """How the messages name the Python that ran the check: ``image 0123456789ab on head-1``."""
    return "image %s on %s" % ((image_id or "?")[:12], node or socket.gethostname())


def _source():
    """config_check.py's own text, from whatever loaded it: the file (tests), Ansible's collection loader (the
    controller), its module zip, or node_script's loader (the plain script route); each has ``get_source``."""
    loader = getattr(config_check, "__loader__", None)
    get = getattr(loader, "get_source", None)
    text = get(config_check.__name__) if get else None
    if isinstance(text, bytes):  # Ansible's collection loader gives bytes
        text = text.decode("utf-8")
    if not text:
        raise RuntimeError(
            "the source of module_utils/verl/config_check.py cannot be read here (loader %r)" % (loader,)
        )
    return text


def image_script(overrides: Iterable[Any], config_name: str, label: str) -> str:
    """The program the image's Python runs: the check and its arguments (JSON in the text, not in argv)."""
    payload = json.dumps(dict(overrides=[str(o) for o in overrides], config_name=config_name, where=label))
    return _source() + config_check.main_for(payload)


def command(engine_path: str, container: str) -> list[str]:
    # The exec line merge uses too (node/container.py): one rule for running something in the head's container.
    return container_rules.exec_prefix(engine_path, container) + ["python3", "-"]


def _tail(text, limit=300):
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[-limit:]


def answer(rc: int | None, stdout: str | None, stderr: str | None, label: str, argv: Sequence[str]) -> dict[str, Any]:
    """The check from the engine's exit code and output; a failed check naming what went wrong otherwise."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(config_check.MARK):
            try:
                value = json.loads(line[len(config_check.MARK) :])
            except ValueError:
                break
            if isinstance(value, dict) and value.get("status") in STATUSES and isinstance(value.get("message"), str):
                value["name"] = config_check.NAME
                return value
            break
    why = _tail(stderr) or _tail(stdout) or "no output"
    return config_check.verdict(
        "failed", "verl config check could not run in %s: %s exited %s: %s" % (label, " ".join(argv), rc, why)
    )


def run_in_image(
    engine_path: str,
    container: str,
    image_id: str | None,
    node: str | None,
    overrides: Iterable[Any],
    config_name: str,
    timeout: float,
    run: Callable[..., Any] = subprocess.run,
) -> dict[str, Any]:
    label = where(image_id, node)
    argv = command(engine_path, container)
    try:
        text = image_script(overrides, config_name, label)
    except RuntimeError as e:
        return config_check.verdict("failed", "verl config check could not run in %s: %s" % (label, e))
    try:
        proc = run(argv, input=text, capture_output=True, text=True, errors="replace", timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return config_check.verdict(
            "failed", "verl config check in %s did not finish within %ss (%s)" % (label, timeout, " ".join(argv))
        )
    except OSError as e:
        return config_check.verdict(
            "failed", "verl config check could not run in %s: %s: %s" % (label, engine_path, e.strerror or e)
        )
    return answer(proc.returncode, proc.stdout, proc.stderr, label, argv)


def check(p: Mapping[str, Any], module: Any) -> dict[str, Any]:
    """The module's result for parameters ``p``; ``module`` is an AnsibleModule or a plain_module.PlainModule. The
    check itself only reads: a failed or skipped check is the result's ``check``, not the task's failure (the render
    action decides, with verl_job_verl_config_check)."""
    result = run_in_image(
        p["engine_path"],
        p["container"],
        p["image_id"],
        p.get("node") or "",
        p.get("overrides") or [],
        p.get("config_name") or "ppo_trainer",
        p.get("timeout") or 300,
    )
    return dict(changed=False, check=result, line="%s: %s" % (result["status"], result["message"]))
