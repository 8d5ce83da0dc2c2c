# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""What of AnsibleModule the node-side functions use (``params``, ``check_mode``, ``get_bin_path``, ``run_command``,
``warn``, ``no_log_values``), for code that runs on a node without Ansible's module runtime
(plugin_utils/node_script.py): starting that runtime costs more than a converge check or a look at a Ray job.

Such a function returns its result as a dict, ``failed=True`` and ``msg`` when it failed; :func:`finish` hands that
to a real AnsibleModule, :meth:`PlainModule.reply` masks it as Ansible would for the script's one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import masked

# AnsibleModule.get_bin_path looks in these too, whatever PATH says.
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def finish(module: Any, result: Mapping[str, Any]) -> None:
    """A node-side function's result through AnsibleModule (which masks its no_log values)."""
    if result.get("failed"):
        module.fail_json(**dict((k, v) for k, v in result.items() if k != "failed"))
    module.exit_json(**result)


def run_module(
    ansible_module: Callable[..., Any],
    args: Any,
    function: Callable[[dict[str, Any], Any], Mapping[str, Any]],
    **kw: Any,
) -> None:
    """The whole ``main()`` of a module whose work is ``function(params, module)`` (plugin_utils/node_script.py's
    SCRIPTED): the module from ``args.new_module(ansible_module, **kw)`` (vocabulary.Args: every bad field refused
    first), then :func:`finish`. The module passes AnsibleModule in: this file imports no Ansible."""
    module = args.new_module(ansible_module, **kw)
    finish(module, function(module.params, module))


class PlainModule:
    def __init__(
        self, params: Mapping[str, Any] | None = None, no_log_values: Iterable[Any] = (), check_mode: bool = False
    ):
        self.params = dict(params or {})
        self.check_mode = bool(check_mode)
        self.no_log_values = set(no_log_values)
        self.warnings: list[str] = []

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def reply(self, result: Mapping[str, Any]) -> dict[str, Any]:
        """The result as the script prints it: warnings added, every no_log value masked."""
        result = dict(result)
        if self.warnings:
            result["warnings"] = list(result.get("warnings") or []) + self.warnings
        return masked(result, self.no_log_values)

    def get_bin_path(self, name: str, required: bool = False, opt_dirs: Iterable[str] | None = None) -> str | None:
        path = os.pathsep.join(list(opt_dirs or []) + [os.environ.get("PATH", os.defpath)] + list(SBIN))
        found = shutil.which(name, path=path)
        if found is None and required:
            raise ValueError("%s not found on this node" % name)
        return found

    def run_command(
        self, args: Sequence[str], check_rc: bool = False, environ_update: Mapping[str, str] | None = None, **dummy: Any
    ) -> tuple[int, str, str]:
        # As AnsibleModule runs commands: the C locale (stable output to parse), text out, no shell.
        env = dict(os.environ, LANG="C", LC_ALL="C", LC_MESSAGES="C", **(environ_update or {}))
        try:
            proc = subprocess.run(list(args), capture_output=True, text=True, errors="replace", env=env, check=False)
        except OSError as e:
            return 127, "", str(e)
        if check_rc and proc.returncode:
            raise RuntimeError("%s failed (rc %d): %s" % (args[0], proc.returncode, proc.stderr.strip()))
        return proc.returncode, proc.stdout, proc.stderr
