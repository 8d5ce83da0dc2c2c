# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.verl_submit``: submit a rendered experiment to its Ray cluster, once.

Decides from the cluster's job list whether the run already exists (a re-run after the controller
died attaches to its newest attempt) and whether another run writes the same checkpoints (refused),
then runs the module once on the head: the run's secrets file, the working_dir zip (inside the call when
small, else copied first) and the job. Documentation: plugins/modules/verl_submit.py."""

from __future__ import annotations

import base64
import os

from ansible_collections.rlinfra.verl.plugins.module_utils.ray import attempts
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import ACTIVE_STATUSES
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import secrets_run
from ansible_collections.rlinfra.verl.plugins.modules.verl_submit import ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

HOOK_SOURCE = os.path.join(os.path.dirname(__file__), "..", "module_utils", "verl", "secrets_file.py")
# A zip up to this size travels inside the module call (base64); a larger one is copied to the head first.
INLINE_MAX = 8 * 1024 * 1024


class Refused(Exception):
    pass


ARGUMENT_SPEC = ARGS.spec  # what tests/unit/test_action_docs.py holds to the documentation


class ActionModule(TypedAction):
    ARGS = ARGS
    TRANSFERS_FILES = True

    def act(self, result, args, task_vars):
        self.task_vars = task_vars
        try:
            result.update(self._submit(args))
        except Refused as e:
            result.update(failed=True, msg=str(e))
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        return result

    def _module(self, name, module_args):
        res = node_script.call(self, self.task_vars, name, module_args)
        if res.get("failed") or res.get("unreachable"):
            lines = (res.get("module_stderr") or res.get("exception") or "").strip().splitlines()
            raise Refused(res.get("msg") or (lines[-1] if lines else "the submit failed on the head"))
        return res

    def _submit(self, args):
        job, jobs = args["job"], args["jobs"]
        sid = job["submission_id"]
        current = attempts.newest_attempt(jobs, sid)
        holder = attempts.checkpoint_holder(jobs, job.get("checkpoint_dir"), sid, ACTIVE_STATUSES)
        if holder is not None and current is None:
            raise Refused(
                "%s (%s) already writes %s: two runs in one checkpoint directory would resume from each other's "
                "checkpoints. Wait for it or stop it (stop.yml), or give this run its own directory (params "
                "trainer.default_local_dir)."
                % (holder["submission_id"], holder.get("status"), job.get("checkpoint_dir"))
            )
        call = {k: v for k, v in args.items() if v is not None and k not in ("hook", "package_data")}
        call.update(submit=current is None, write_secrets=secrets_run.needed(current))
        if job.get("secrets_file"):
            with open(HOOK_SOURCE) as f:
                call["hook"] = f.read()
        package = job.get("package")
        changed = False
        if package and current is None:
            if os.path.getsize(package["path"]) <= INLINE_MAX:
                with open(package["path"], "rb") as f:
                    call["package_data"] = base64.b64encode(f.read()).decode()
            else:
                changed = self._copy(package["path"], args["package_dest"])
        res = {}
        if current is None or job.get("secrets_file"):
            res = self._module("rlinfra.verl.verl_submit", call)
            changed = res.get("changed", False) or changed
        called = dict(runtime=res["runtime"]) if "runtime" in res else {}
        if current is not None:
            line = (
                "%s already exists (%s); not submitted again%s - use -e run=N for a new run, which resumes from "
                "the checkpoints"
                % (
                    current["submission_id"],
                    current.get("status"),
                    ", attempt %d of the run" % current["attempt"] if current["attempt"] > 1 else "",
                )
            )
            return dict(
                changed=changed,
                submission_id=current["submission_id"],
                submitted=False,
                status=current.get("status"),
                current=current,
                msg=line,
                **called,
            )
        return dict(
            changed=True,
            submission_id=sid,
            submitted=True,
            status=res.get("status"),
            current=None,
            msg="Submitted %s (%s)" % (sid, res.get("status") or "?"),
            **called,
        )

    def _copy(self, src, dest):
        """The zip onto the head (0600), kept there: a recovery after a head restart uploads it again. Its directory is
        made 0700 when missing (an existing one is left as it is)."""
        made = self._execute_module(
            module_name="ansible.legacy.command",
            task_vars=self.task_vars,
            module_args=dict(argv=["mkdir", "-p", "-m", "0700", "--", os.path.dirname(dest)]),
        )
        if made.get("failed") or made.get("rc", 0) != 0:
            raise Refused(
                "the directory of %s could not be made on the head: %s (verl_job_remote_tmp)"
                % (dest, (made.get("stderr") or made.get("msg") or "").strip()[:300])
            )
        task = self._task.copy()
        task.args = dict(src=src, dest=dest, mode="0600")
        copy = self._shared_loader_obj.action_loader.get(
            "ansible.legacy.copy",
            task=task,
            connection=self._connection,
            play_context=self._play_context,
            loader=self._loader,
            templar=self._templar,
            shared_loader_obj=self._shared_loader_obj,
        )
        res = copy.run(task_vars=self.task_vars)
        if res.get("failed"):
            raise Refused("the working_dir zip could not be copied to %s: %s" % (dest, res.get("msg")))
        return bool(res.get("changed"))
