# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.ray_node_logs``: collect, mask and pack one job's logs on a node (the module of
the same name, run there), then - with ``dest`` - bring the bundle to the controller, remove it from
the node and unpack it into ``dest`` (directories 0700, files 0600). Secrets are masked on the node:
what leaves it is already clean. Documentation: plugins/modules/ray_node_logs.py."""

from __future__ import annotations

import base64
import tarfile

from ansible.errors import AnsibleError

from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import cannot_write
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_logs
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_source import ARTIFACTS_VAR
from ansible_collections.rlinfra.verl.plugins.modules.ray_node_logs import ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGUMENT_SPEC = ARGS.spec  # what tests/unit/test_action_docs.py holds to the documentation


class ActionModule(TypedAction):
    ARGS = ARGS

    def act(self, result, args, task_vars):
        module_args = dict(self._task.args)
        dest = str(module_args.pop("dest", "") or "")
        try:
            res = self._execute_module(
                module_name="rlinfra.verl.ray_node_logs", module_args=module_args, task_vars=task_vars
            )
            res.pop("invocation", None)  # it lists the secret values (censored, but never needed here)
            result.update(res)
            if (
                dest
                and res.get("bundle")
                and not (res.get("failed") or res.get("unreachable") or self._task.check_mode)
            ):
                result.update(self._bring(res, dest, task_vars))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _bring(self, res, dest, task_vars):
        """The bundle into ``dest``; a failure is reported in the result, never raised (one node must not
        stop the gathering of the others)."""
        out = dict(fetched=False)
        try:
            # slurp rather than the connection's fetch: the bundle is root's (become), and is small (max_total_mib)
            got = self._execute_module(
                module_name="ansible.legacy.slurp", module_args=dict(src=res["bundle"]), task_vars=task_vars
            )
            if got.get("failed"):
                out["fetch_error"] = got.get("msg") or "slurp failed"
                return out
            try:
                files, refused = node_logs.unpack(base64.b64decode(got["content"]), dest)
            except OSError as e:
                if not e.errno:  # a damaged gzip stream (BadGzipFile): the bundle's fault, said below
                    raise
                out["fetch_error"] = cannot_write(ARTIFACTS_VAR, dest, "the node's logs", e)
                return out
            out.update(fetched=True, unpacked=len(files), refused=refused)
        except (OSError, tarfile.TarError, ValueError, AnsibleError) as e:
            out["fetch_error"] = "the bundle could not be brought back: %s" % (getattr(e, "strerror", None) or e)
        finally:
            self._execute_module(
                module_name="ansible.legacy.file",
                module_args=dict(path=res["bundle_dir"], state="absent"),
                task_vars=task_vars,
            )
        return out
