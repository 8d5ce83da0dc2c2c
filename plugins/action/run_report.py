# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.run_report``: a run's report (module_utils/observe/report.py) amended on the controller with
what its nodes' logs say once they are gathered. Documentation: plugins/modules/run_report.py."""

from __future__ import annotations

import os

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import report
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_source
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGS = vocabulary.Args(
    report_dir=vocabulary.AbsPath("local", relative=True, required=True),
    nodes=vocabulary.Raw(
        reason="the looped results of rlinfra.verl.ray_node_logs, as Ansible registered them",
        ansible="list",
        elements="dict",
        default=[],
    ),
    causes=vocabulary.ListOf(vocabulary.Text(), default=[]),
    unreachable_head=vocabulary.Text(),
    error=vocabulary.Text(lines=True, max_len=4000),
    experiment=vocabulary.Name(),
    cluster=vocabulary.Name(),
)
ARGUMENT_SPEC = ARGS.spec


def node_events(run, nodes):
    """The report events of every node's kernel events in the run's window (report.kernel_rows), from the registered
    loop of ray_node_logs (``item`` names the node; a failed or unreachable one gives none)."""
    out = []
    for res in nodes or []:
        if isinstance(res, dict) and not res.get("failed") and not res.get("unreachable"):
            out += report.kernel_rows(run, str(res.get("item") or "?"), res.get("kernel_events") or [])
    return out


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def act(self, result, args, task_vars):
        run_dir = args["report_dir"]
        if not os.path.isabs(run_dir):
            run_dir = os.path.join(os.getcwd(), run_dir)
        result.update(changed=False, path="", events=[])
        if args.get("unreachable_head"):
            return self.head_gone(result, args, run_dir)
        if self._task.check_mode:
            result["msg"] = "check mode: the run report was left as it is"
            return result
        try:
            run = report.load(run_dir)
            if run is None:
                result["msg"] = "no run report in %s to amend (the run was not waited for)" % run_dir
                return result
            events = node_events(run, args["nodes"])
            sids = [
                a.get("submission_id")
                for a in run.get("attempts") or []
                if isinstance(a, dict) and a.get("submission_id")
            ] or [run.get("submission_id")]
            links = report.node_log_rows(os.path.dirname(run_dir), run_dir, sids)
            path, changed = report.amend(run_dir, events, args["causes"], links)
        except OSError as e:
            line = files.cannot_write(experiment_source.ARTIFACTS_VAR, run_dir, "the run report", e)
            result.update(failed=True, msg=line)
            return result
        except ValueError as e:
            result.update(failed=True, msg="could not amend the run report in %s: %s" % (run_dir, e))
            return result
        result.update(
            changed=changed,
            path=path,
            events=[e["text"] for e in events],
            msg="run report %s: %s" % ("updated" if changed else "already up to date", path),
        )
        return result

    @staticmethod
    def head_gone(result, args, run_dir):
        """The head does not answer: one line with what this controller last saw of the run; nothing is changed."""
        try:
            run = report.load(run_dir)
        except (OSError, ValueError):
            run = None
        result.update(
            failed=True,
            msg=report.head_gone_line(
                run,
                args["unreachable_head"],
                args.get("cluster") or "?",
                args.get("experiment") or "?",
                args.get("error"),
                os.path.join(run_dir, report.NAME) if run else run_dir,
            ),
        )
        return result
