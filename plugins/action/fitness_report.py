# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.fitness_report``: fitness.yml's verdict for one cluster (module_utils/node/fitness_report.py),
written as JSON under the controller's artifacts directory. Documentation: plugins/modules/fitness_report.py."""

from __future__ import annotations

import os
import time

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.node import fitness_ray
from ansible_collections.rlinfra.verl.plugins.module_utils.node.fitness_report import save, verdict
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import net
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGS = vocabulary.Args(
    cluster=vocabulary.Name(required=True),
    head=vocabulary.Host(required=True),
    members=vocabulary.ListOf(vocabulary.Host(), required=True),
    links=vocabulary.Raw(reason="a fitness_net result, as that module returned it", ansible="dict", default={}),
    ray=vocabulary.Raw(reason="a ray_job result, as that module returned it", ansible="dict", default={}),
    exclude_unfit=vocabulary.Switch(default=False),
    thresholds=vocabulary.Section(
        dict(
            min_gbit=vocabulary.Number(0, 1e6),
            ray_min_gbit=vocabulary.Number(0, 1e6),
            allreduce_min_busbw=vocabulary.Number(0, 1e6),
        ),
        default={},
    ),
    artifacts_dir=vocabulary.AbsPath("local", relative=True, empty=True, default="artifacts/fitness"),
)
ARGUMENT_SPEC = ARGS.spec


def ray_result(job, check_mode=False):
    """The Ray check's result from the ray_job task's result: what the script printed, else one error. In check mode
    the Ray job is not submitted: nothing measured, which is no failure (``{}``)."""
    job = job or {}
    if job.get("skipped") and check_mode:
        return {}
    if job.get("skipped"):
        return dict(error="not run (%s)" % (job.get("skip_reason") or "skipped"))
    try:
        return fitness_ray.parse(job.get("logs_tail") or "")
    except ValueError as exc:
        status = job.get("status") or ("failed: %s" % job.get("msg") if job.get("failed") else "no status")
        return dict(error="%s (job %s)" % (exc, status))


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def act(self, result, args, task_vars):
        hostvars = task_vars.get("hostvars") or {}
        nodes, excluded = [], []
        for host in args["members"]:
            hv = hostvars[host] if host in hostvars else {}
            me = hv.get("fitness__me") if "fitness__me" in hv else None
            check = hv.get("fitness__node") if "fitness__node" in hv else None
            if not isinstance(check, dict) or not check or check.get("unreachable") or check.get("skipped"):
                check = {
                    "dropped": True,
                    "error": "no result: the node dropped out of the run (unreachable, frozen or "
                    "failed; its own line above says which), and was not measured",
                }
            # A node that dropped out before it said its address: the one the inventory knows, so that what Ray says of
            # it is still its own.
            ip = (me or {}).get("ip") or net.address_of(host, hostvars)
            nodes.append(dict(host=host, ip=str(ip or ""), ifname=str((me or {}).get("ifname") or ""), check=check))
            local = hv.get("ansible_local") if "ansible_local" in hv else None
            if isinstance(local, dict) and local.get("rlinfra_excluded"):
                excluded.append(host)
        out = verdict(
            args["cluster"],
            args["head"],
            nodes,
            (args["links"] or {}).get("links") or [],
            ray_result(args["ray"], self._task.check_mode),
            args["thresholds"],
            excluded,
            args["exclude_unfit"],
        )
        if self._task.check_mode:
            out["summary"].append(
                "check mode: only each node's own checks ran; the links between nodes and the checks "
                "through Ray (objects, the all-reduce), which send traffic and submit a Ray job, were "
                "not measured, and the verdict above leaves them out"
            )
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        out["document"]["time"] = out["record"]["time"] = stamp
        path = ""
        if not self._task.check_mode and args["artifacts_dir"]:
            base = args["artifacts_dir"]
            if not os.path.isabs(base):
                base = os.path.join(os.getcwd(), base)
            try:
                path = save(base, "%s-%s.json" % (args["cluster"], stamp), out["document"])
                out["record"]["path"] = path
                out["summary"][0] += " - " + path
            except ValueError as e:  # the verdict is still returned, with the one line of why it was not kept
                result.update(failed=True, msg=str(e))
        result.update(out, changed=False, fit=not out["failure"], path=path)
        return result
