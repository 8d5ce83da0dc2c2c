# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The work of module rlinfra.verl.verl_merge: one experiment's checkpoint merged into a Hugging Face model directory
with verl's model merger (in the cluster's venv, or in the head's Ray container), when the merge is needed; the target
replaced only when it is the merge's own (module_utils/common/owned.py); optionally uploaded to a Hugging Face repo.
Which checkpoint, whether a merge is needed and the report are module_utils/verl/checkpoint.py. Standard library only.

It needs AnsibleModule itself (``fail_json``/``exit_json`` end the call): the module passes it in (:func:`run`)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned, vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container as node_container
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint as verl_checkpoint

# Runs in the cluster's venv (or the head's container): the token arrives on stdin and lives only in this process's
# environment.
UPLOADER = r"""
import os, sys
os.environ["HF_TOKEN"] = sys.stdin.readline().strip()
from huggingface_hub import HfApi
repo, folder, private, message = sys.argv[1], sys.argv[2], sys.argv[3] == "true", sys.argv[4]
api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None, token=os.environ["HF_TOKEN"])
try:
    api.create_repo(repo_id=repo, repo_type="model", private=private, exist_ok=True)
    info = api.upload_folder(repo_id=repo, repo_type="model", folder_path=folder,
                             commit_message=message, ignore_patterns=[".rlinfra-merge.json"])
except Exception as e:  # one line for the task's message
    raise SystemExit("%s: %s" % (type(e).__name__, " ".join(str(e).split())))
print("uploaded to %s" % getattr(info, "commit_url", info))
"""


def _last_line(text: str | None, fallback: str) -> str:
    lines = [line for line in (text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else fallback
    return line if len(line) <= 400 else line[:397] + "..."


def _write_record(directory: str, record: Mapping[str, Any]) -> None:
    # A temporary file of its own, never a fixed name: a link planted as "<record>.tmp" would be written through.
    write_atomic(
        os.path.join(directory, verl_checkpoint.RECORD), json.dumps(record, indent=4, sort_keys=True) + "\n", 0o644
    )


class Merge:
    def __init__(self, module: Any) -> None:
        self.module = module
        self.p = module.params
        # As Linux reads it (owned.check compares it so): '/data/m/' is /data/m, and '/' stays '/', never ''.
        self.target = vocabulary.normpath(self.p["target"])
        self.staging: str | None = None  # made by merge(), beside the target (owned.staging)
        self.venv = self.p["venv"]
        self.container: dict[str, str] = {}  # container mode: ray_client.fact_container's answer

    def find_runtime(self) -> None:
        """O(venv); else this host's rlinfra_ray local fact: its container (container mode) or its venv; else the task
        fails with one line."""
        if self.p["venv"]:
            return
        where = "no Python environment with verl known on %s" % self.p["host_label"]
        try:
            fact = ray_client.local_ray_fact()
            self.container = ray_client.fact_container(fact)
            venv = ray_client.fact_text(fact, "venv")
        except ray_client.RayError as e:
            self.fail("%s: %s, or set verl_job_venv" % (where, e))
        if self.container:
            return
        if not fact:
            self.fail(
                "%s: it has no rlinfra_ray local fact (%s, written by site.yml) and verl_job_venv is not set"
                % (where, ray_client.FACT_PATH)
            )
        if not venv:
            self.fail(
                "%s: its rlinfra_ray local fact (%s) names no venv and verl_job_venv is not set"
                % (where, ray_client.FACT_PATH)
            )
        self.venv = venv

    def command(self, args: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        return node_container.python_command(args, env, venv=self.venv, container=self.container)

    def see(self, paths: Sequence[tuple[str, str]]) -> None:
        """Container mode: the head's container runs and sees ``paths`` (container.check_visible); one line if not."""
        if not self.container:
            return

        def run(argv: Sequence[str], data: str | None = None) -> tuple[int, str, str]:
            proc = subprocess.run(argv, input=data, capture_output=True, text=True, check=False)
            return proc.returncode, proc.stdout, proc.stderr

        try:
            node_container.check_running(run, self.container["engine_path"], self.container["name"])
            node_container.check_visible(run, self.container["engine_path"], self.container["name"], paths)
        except OSError as e:
            self.fail(
                "the head's container engine %s cannot run: %s; run site.yml"
                % (self.container["engine_path"], e.strerror or e)
            )
        except node_container.ContainerError as e:
            self.drop_staging()
            self.fail(str(e))

    def where(self) -> str:
        if self.container:
            return "%s the head's container engine" % self.container["engine_path"]
        return "%s the cluster's venv" % self.venv

    def fail(self, msg: str, **extra: Any) -> None:
        self.module.fail_json(msg=msg, target=self.target, merged=False, uploaded_to="", **extra)

    def drop_staging(self) -> None:
        if self.staging:
            shutil.rmtree(self.staging, ignore_errors=True)

    def merge(self, step: int, actor: str, print_: Any) -> dict[str, Any]:
        self.staging = owned.staging(self.target)
        # The merger writes into the staging directory: a name no image holds by chance, so seen inside it is the
        # host's (the target's directory seen before might be one of the image's own, such as /tmp).
        self.see([(os.path.dirname(self.target), self.staging)])
        # Everything comes from the checkpoint (config and tokenizer in its huggingface/).
        argv, env = self.command(
            [
                "-m",
                "verl.model_merger",
                "merge",
                "--backend",
                "fsdp",
                "--local_dir",
                actor,
                "--target_dir",
                self.staging,
            ]
            + (["--trust-remote-code"] if self.p["trust_remote_code"] else []),
            dict(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1"),
        )
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        except OSError as e:
            self.drop_staging()
            self.fail("verl's model merger could not start on %s: %s (is %s?)" % (actor, e.strerror, self.where()))
        if proc.returncode != 0:
            self.drop_staging()
            tail = (proc.stdout.splitlines() + proc.stderr.splitlines())[-self.p["logs_tail_lines"] :]
            self.fail(
                "verl's model merger failed on %s (exit %d): %s"
                % (actor, proc.returncode, _last_line(proc.stderr, "no output")),
                merger_output=tail,
            )
        record = dict(
            experiment=self.p["experiment"],
            project=self.p["project"],
            step=step,
            source=actor,
            fingerprint=print_,
            uploaded={},
            merged_at=datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None).isoformat() + "Z",
        )
        _write_record(self.staging, record)
        staging = self.staging
        self.owned(lambda **kw: owned.replace(staging, self.target, **kw))
        return record

    def owned(self, act: Callable[..., Any]) -> Any:
        """``act`` (owned.check or owned.replace) on the target: never a directory the merge reads, nor one it did not
        make."""
        try:
            return act(
                markers=(verl_checkpoint.RECORD,),
                what="merge target",
                inputs=(("the checkpoint directory", self.p["checkpoint_dir"]), ("the venv", self.venv)),
                fix="merge into a directory of its own, outside the checkpoints (verl_job_models_root for merge.yml)",
            )
        except owned.NotOurs as e:
            self.drop_staging()
            self.fail(str(e))

    def upload(self, step: int, record: Mapping[str, Any]) -> dict[str, Any]:
        repo = self.p["hf_repo"]
        env = dict(PYTHONUNBUFFERED="1", HF_HUB_DISABLE_TELEMETRY="1")
        if self.p["hf_endpoint"]:
            env["HF_ENDPOINT"] = self.p["hf_endpoint"]
        argv, env = self.command(
            [
                "-c",
                UPLOADER,
                repo,
                self.target,
                "true" if self.p["hf_private"] else "false",
                "rlinfra: %s step %d" % (self.p["experiment"], step),
            ],
            env,
        )
        proc = subprocess.run(
            argv, input=self.p["hf_token"] + "\n", env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            line = mask_values(_last_line(proc.stderr, "no output"), [self.p["hf_token"]])
            self.fail(
                "upload of %s to Hugging Face repo %s failed (exit %d): %s"
                % (self.target, repo, proc.returncode, line),
                step=step,
                record=record,
            )
        record = dict(record, uploaded=dict(record.get("uploaded") or {}, **{repo: step}))
        _write_record(self.target, record)
        return record

    def run(self) -> None:
        p = self.p
        framework = p["framework"]
        if framework != "verl":
            # The train workflow merges after every experiment: one verl does not train is not a failure.
            self.module.exit_json(
                changed=False,
                merged=False,
                step=None,
                source="",
                target="",
                uploaded_to="",
                report=verl_checkpoint.not_verl_report(p["experiment"], framework),
            )
        if p["hf_repo"] and not p["hf_token"]:
            self.fail(
                "verl_job_hf_repo is %s but no Hugging Face token is set: export HF_TOKEN=... where "
                "ansible-playbook runs, or set verl_job_hf_token (or HF_TOKEN in verl_job_secrets, e.g. from "
                "Ansible Vault)" % p["hf_repo"]
            )
        self.find_runtime()
        self.owned(lambda **kw: owned.check(self.target, **kw))
        try:
            step, actor, files = verl_checkpoint.merge_source(
                p["checkpoint_dir"], p["experiment"], p["step"], p["host_label"]
            )
        except verl_checkpoint.MergeError as e:
            self.fail(str(e))
        print_ = verl_checkpoint.fingerprint(files)
        record = verl_checkpoint.read_record(self.target)
        needed = verl_checkpoint.merge_needed(record, step, actor, print_, p["force"])
        check = self.module.check_mode
        # A new merge's record has uploaded nothing yet.
        upload = bool(p["hf_repo"]) and (needed or (record.get("uploaded") or {}).get(p["hf_repo"]) != step)
        # Read only, so in check mode too: a dry run says a merge that could not run.
        if needed:
            self.see(verl_checkpoint.merge_paths_seen(actor, self.target))
        elif upload:
            self.see([(self.target, self.target)])
        if needed and not check:
            record = self.merge(step, actor, print_)
        uploaded = False
        if upload and not check:
            record = self.upload(step, record)
            uploaded = True
        self.module.exit_json(
            changed=needed or uploaded,
            merged=needed,
            step=step,
            source=actor,
            target=self.target,
            record=record,
            uploaded_to=p["hf_repo"] if uploaded else "",
            venv=self.venv,
            runtime="container" if self.container else "venv",
            container=self.container.get("name", ""),
            report=verl_checkpoint.report(
                p["experiment"], step, actor, self.target, needed, check, record, p["hf_repo"], uploaded
            ),
        )


def run(module: Any) -> None:
    """The whole of module verl_merge for AnsibleModule ``module`` (its arguments checked): ends the module with its
    result."""
    Merge(module).run()
