# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.cluster_again``: with the experiment's ``recovery.replace``, a cluster whose head the provider
ended is rented again and converged by ``provision.yml`` (run from here, with the label's record's spec) before the
submit goes on. Documentation: plugins/modules/cluster_again.py; the rules: module_utils/hyperbolic/again.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_patterns, mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import again
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import record as hyperbolic_record
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.client import HyperbolicClient, HyperbolicError
from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic.rent import Rent
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_source
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError
from ansible_collections.rlinfra.verl.plugins.plugin_utils import experiment_task
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

TAIL_LINES = 12

ARGS = vocabulary.Args(
    name=experiment_task.name_arg(),
    experiments_dir=vocabulary.AbsPath("reads", relative=True, empty=True, default="", ansible="str"),
    cluster=vocabulary.Name(empty=True, default=""),
    record_dir=vocabulary.AbsPath("local", spaces=False, required=True),
    api_key=vocabulary.Secret(default=""),
    api_url=vocabulary.Url(empty=True, default=""),
    timeout=vocabulary.Seconds(60, 86400, integer=True, default=3600),
)
ARGUMENT_SPEC = ARGS.spec


def extra_vars_without_submit_switches():
    """This run's ``-e`` (as given) without the submit's own switches: provision.yml reads its command line strictly.
    ``-e @file`` is passed on as it is."""
    from ansible import context
    from ansible.parsing.splitter import parse_kv

    out = []
    for item in context.CLIARGS.get("extra_vars") or ():
        text = str(item).strip()
        if text.startswith("@"):
            out += ["-e", text]
        elif text.startswith(("{", "[")):
            try:
                data = json.loads(text)
            except ValueError:
                out += ["-e", text]
                continue
            if isinstance(data, dict):
                data = again.without_submit_switches(data)
            out += ["-e", json.dumps(data)] if data else []
        elif text:
            pairs = again.without_submit_switches(parse_kv(text))
            out += ["-e", json.dumps(pairs)] if pairs else []
    return out


class ActionModule(TypedAction):
    ARGS = ARGS
    _requires_connection = False

    def act(self, result, args, task_vars):
        result.update(changed=False, rented=False)
        name = experiment_source.parse_ref(args["name"])[0]
        try:
            located = experiment_task.locate(args["name"], args["experiments_dir"], "", task_vars)
            exp = experiment.load_experiment_file(name, located.path)
        except ExperimentError:
            return result  # the experiment's own lines come from its loading, next
        if not exp.recovery.get("replace"):
            return result
        cluster = args["cluster"] or exp.cluster
        path = os.path.join(args["record_dir"], "%s.json" % cluster)
        try:
            record = hyperbolic_record.read(path, cluster)
        except ValueError as e:
            result.update(failed=True, msg="recovery.replace: %s; nothing was rented" % e)
            return result
        wanted = again.spec(record)
        if wanted is None:
            return result  # not a rented cluster: the submit's reach says what to do by hand
        try:
            client = HyperbolicClient(args["api_key"], args["api_url"] or "https://api.hyperbolic.xyz")
            rent = Rent(client, api=wanted["api"], record_ids=hyperbolic_record.ids(record, wanted["api"]))
            listed = [v["name"] for v in rent.views(rent.ours(cluster), cluster)]
        except HyperbolicError as e:
            result.update(
                failed=True,
                msg="recovery.replace: the Hyperbolic API could not list the rentals of %s: %s; "
                "nothing was rented" % (cluster, e),
            )
            return result
        why = again.gone(record, listed)
        if not why:
            return result
        if self._task.check_mode:
            result.update(
                changed=True,
                msg="check mode: cluster %s is gone (%s): provision.yml would rent it again" % (cluster, why),
            )
            return result
        # Rented here first, so that provision.yml's inventory lists the new head among the others from its start (a
        # worker left would otherwise pass for the head there); provision.yml then rents nothing more and converges.
        t0 = time.monotonic()
        try:
            rented = rent.present(
                cluster,
                wanted["nodes"],
                "" if wanted["gpu"].lower() == "any" else wanted["gpu"],
                wanted["gpu_count"],
                again.ceiling(record),
                wanted["region"],
                timeout=900,
                min_hours=float(task_vars.get("hyperbolic_min_hours") or 1),
                daily_budget=task_vars.get("hyperbolic_daily_budget"),
                ssh_public_key=experiment_task.text(task_vars.get("hyperbolic_ssh_public_key")),
            )
            hyperbolic_record.update(path, cluster, wanted["api"], rented)
        except HyperbolicError as e:
            result.update(
                failed=True,
                msg="recovery.replace: cluster %s is gone (%s); renting it again failed: %s" % (cluster, why, e),
            )
            return result
        return self.provision(result, args, task_vars, cluster, wanted, why, t0)

    def provision(self, result, args, task_vars, cluster, wanted, why, t0):
        program = sys.argv[0] if os.path.basename(sys.argv[0]).startswith("ansible-playbook") else "ansible-playbook"
        argv = [program]
        for source in task_vars.get("ansible_inventory_sources") or []:
            argv += ["-i", str(source)]
        argv.append(os.path.join(experiment_task.COLLECTION_ROOT, "playbooks", "provision.yml"))
        for switch in again.provision_switches(cluster, wanted):
            argv += ["-e", switch]
        argv += extra_vars_without_submit_switches()
        self._display.display(
            "cluster %s is gone (%s): renting it again with provision.yml (%s), up to %ss"
            % (cluster, why, " ".join(again.provision_switches(cluster, wanted)), args["timeout"])
        )
        env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        secrets = [args["api_key"]]
        try:
            proc = subprocess.run(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=args["timeout"],
                check=False,
            )
        except subprocess.TimeoutExpired:
            result.update(
                failed=True,
                msg="recovery.replace: cluster %s is gone (%s); provision.yml did not finish "
                "within %ss: run it yourself (provision.yml %s), then submit.yml again"
                % (
                    cluster,
                    why,
                    args["timeout"],
                    " ".join("-e " + s for s in again.provision_switches(cluster, wanted)),
                ),
            )
            return result
        except OSError as e:
            result.update(failed=True, msg="recovery.replace: provision.yml could not be started: %s" % e)
            return result
        out = mask_patterns(mask_values((proc.stdout or "") + (proc.stderr or ""), secrets))
        if proc.returncode != 0:
            lines = out.strip().splitlines()
            wanted_lines = [x for x in lines if x.startswith(("fatal:", "failed:", "ERROR", "[ERROR]"))] or lines
            result.update(
                failed=True,
                changed=True,
                msg="recovery.replace: cluster %s is gone (%s); provision.yml "
                "failed (exit %d): %s" % (cluster, why, proc.returncode, " | ".join(wanted_lines[-TAIL_LINES:])[:3000]),
            )
            return result
        try:
            record = hyperbolic_record.read(os.path.join(args["record_dir"], "%s.json" % cluster), cluster)
        except ValueError:
            record = {}
        instances = sorted(
            (dict(name=r.get("name"), id=i) for i, r in (record.get("rentals") or {}).items() if isinstance(r, dict)),
            key=lambda v: str(v["name"]),
        )
        result.update(
            changed=True,
            rented=True,
            instances=instances,
            msg=again.summary_line(cluster, why, time.monotonic() - t0, instances),
        )
        return result
