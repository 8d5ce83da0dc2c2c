#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
module: verl_merge
short_description: Merge a verl FSDP actor checkpoint into a Hugging Face model, and optionally upload it
version_added: 0.3.0
description:
  - Picks the step to merge (O(step), else the one C(latest_checkpointed_iteration.txt) names), checks that
    C(<checkpoint_dir>/global_step_N/actor) is a complete verl FSDP checkpoint (shards, C(fsdp_config.json),
    C(huggingface/config.json)), and runs verl's model merger
    (C(python -m verl.model_merger merge --backend fsdp)) from O(venv) into a staging directory next to O(target).
  - In container mode (the C(rlinfra_ray) local fact names a C(container), site.yml with C(ray_container_image), and
    O(venv) is not set) the merger and the uploader run inside the head's running Ray container
    (C(<engine> exec -i --env NAME ... rlinfra-ray-head python3 ...)) with the image's Python, the verl the jobs
    trained with. The checkpoint and the target's directory must be seen inside (volumes at the same path,
    C(ray_container_mounts)); one that is not, or a container that is not running, is one line before anything
    changes.
  - The staging directory then replaces O(target), with a record (C(.rlinfra-merge.json)) of the step, the source
    and the shards' names, sizes and modification times; a re-run for the same checkpoint changes nothing, a
    checkpoint saved again under the same step is merged again. A failed merge leaves O(target) as it was.
  - With O(hf_repo), uploads the model once per step. The token reaches the uploader on its standard input,
    never in a process's arguments.
  - An experiment of another framework than verl (O(framework)) has nothing for verl's model merger; the module then
    changes nothing and says so in RV(report).
  - Every failure is one line, the task's message.
author:
  - rlinfra maintainers (@rlinfra)
options:
  checkpoint_dir:
    description: The experiment's checkpoint directory (verl's C(trainer.default_local_dir)).
    type: path
    required: true
  experiment:
    description: The experiment's name, for the record and the messages.
    type: str
    required: true
  project:
    description: The experiment's project, for the record.
    type: str
    default: ""
  step:
    description: The step to merge; unset, the one verl's tracker file names.
    type: int
  target:
    description: Where the merged model goes (replaced as a whole).
    type: path
    required: true
  venv:
    description:
      - The Python environment holding verl.
      - Empty (the default) for the C(venv) of the C(rlinfra_ray) local fact of the host that runs the module
        (C(/etc/ansible/facts.d/rlinfra_ray.fact), written by site.yml); a host without one fails with one line.
      - Empty where that fact says container mode (its C(container)), the image's C(python3) inside the head's
        running Ray container instead (RV(runtime=container)). Set, it wins over the fact in either mode.
    type: path
    default: ""
  framework:
    choices: [verl, nemo_rl, custom]
    description:
      - The experiment's framework (C(framework) of M(rlinfra.verl.verl_experiment)'s C(experiment)). Only V(verl)
        experiments are merged; any other returns RV(merged=false) and a RV(report) that says why, and fails nothing.
    type: str
    default: verl
  force:
    description: Merge even when O(target) already holds this checkpoint.
    type: bool
    default: false
  trust_remote_code:
    description: Pass C(--trust-remote-code) to the merger.
    type: bool
    default: false
  host_label:
    description: How the messages name this host.
    type: str
    default: this host
  logs_tail_lines:
    description: Lines of the merger's output returned when it fails.
    type: int
    default: 30
  hf_repo:
    description: Hugging Face repository to upload the model to; empty, no upload.
    type: str
    default: ""
  hf_token:
    description: The Hugging Face token (required with O(hf_repo)).
    type: str
    default: ""
  hf_private:
    description: Create the repository private.
    type: bool
    default: true
  hf_endpoint:
    description: Hugging Face endpoint (C(HF_ENDPOINT)); empty, the public Hub.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Says what it would merge; merges and uploads nothing.
  diff_mode:
    support: none
    description: Nothing to diff.
"""

EXAMPLES = r"""
- name: Merge the latest checkpoint of gsm8k_ppo
  rlinfra.verl.verl_merge:
    checkpoint_dir: /data/checkpoints/verl_examples/default/gsm8k_ppo
    experiment: gsm8k_ppo
    target: /data/models/gsm8k_ppo
    venv: /opt/rlinfra/venv

- name: The same on the head, with the venv of its rlinfra_ray local fact
  rlinfra.verl.verl_merge:
    checkpoint_dir: /data/checkpoints/verl_examples/default/gsm8k_ppo
    experiment: gsm8k_ppo
    framework: "{{ exp.experiment.framework }}"
    target: /data/models/gsm8k_ppo
  become: true
"""

RETURN = r"""
step:
  description: The step merged (or found merged already); null for an experiment of another framework.
  returned: when a checkpoint was found, or the experiment is not a verl one
  type: int
source:
  description: The actor checkpoint directory; empty for an experiment of another framework.
  returned: when a checkpoint was found, or the experiment is not a verl one
  type: str
target:
  description: The model directory; empty for an experiment of another framework.
  returned: always
  type: str
venv:
  description: The Python environment used (O(venv), or the C(rlinfra_ray) local fact's C(venv)); empty in container
    mode.
  returned: when the experiment is a verl one and the environment is known
  type: str
runtime:
  description: Where verl's merger and the uploader run - V(venv) (from RV(venv)) or V(container) (inside
    RV(container) with the image's Python).
  returned: when the experiment is a verl one and the environment is known
  type: str
  choices: [venv, container]
container:
  description: The head's Ray container the merger runs in (container mode); empty otherwise.
  returned: when the experiment is a verl one and the environment is known
  type: str
merged:
  description: Whether the merger ran (in check mode, whether it would).
  returned: always
  type: bool
uploaded_to:
  description: The repository uploaded to by this run, or empty.
  returned: always
  type: str
record:
  description: The model directory's record after the run.
  returned: when a checkpoint was found
  type: dict
report:
  description: One line saying what was done.
  returned: success
  type: str
merger_output:
  description: The end of the merger's output.
  returned: when the merger failed
  type: list
  elements: str
"""

import datetime
import json
import os
import shutil
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.rlinfra.verl.plugins.module_utils.common import owned
from ansible_collections.rlinfra.verl.plugins.module_utils.common.files import write_atomic
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import client as ray_client
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import checkpoint as verl_checkpoint
from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import mask_values
from ansible_collections.rlinfra.verl.plugins.module_utils.node import container as node_container

ARGS = vocabulary.Args(
    checkpoint_dir=vocabulary.AbsPath("reads", required=True),
    experiment=vocabulary.Name(required=True),
    project=vocabulary.Name(empty=True, default=""),
    step=vocabulary.Int(1),
    target=vocabulary.AbsPath("writes", required=True),
    venv=vocabulary.AbsPath("reads", empty=True, default=""),
    framework=vocabulary.Choice(("verl", "nemo_rl", "custom"), default="verl"),
    force=vocabulary.Switch(default=False),
    trust_remote_code=vocabulary.Switch(default=False),
    host_label=vocabulary.Text(empty=False, max_len=200, default="this host"),
    logs_tail_lines=vocabulary.Int(0, 10000, default=30),
    hf_repo=vocabulary.HfRepoId(empty=True, default=""),
    hf_token=vocabulary.Secret(default=""),
    hf_private=vocabulary.Switch(default=True),
    hf_endpoint=vocabulary.Url(empty=True, default=""),
)
ARGUMENT_SPEC = ARGS.spec

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


def _last_line(text, fallback):
    lines = [line for line in (text or "").splitlines() if line.strip()]
    line = lines[-1] if lines else fallback
    return line if len(line) <= 400 else line[:397] + "..."


def _write_record(directory, record):
    # A temporary file of its own, never a fixed name: a link planted as "<record>.tmp" would be written through.
    write_atomic(os.path.join(directory, verl_checkpoint.RECORD), json.dumps(record, indent=4, sort_keys=True) + "\n",
                 0o644)


class Merge:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        # As Linux reads it (owned.check compares it so): '/data/m/' is /data/m, and '/' stays '/', never ''.
        self.target = vocabulary.normpath(self.p["target"])
        self.staging = None  # made by merge(), beside the target (owned.staging)
        self.venv = self.p["venv"]
        self.container = {}  # container mode: ray_client.fact_container's answer

    def find_runtime(self):
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
            self.fail("%s: it has no rlinfra_ray local fact (%s, written by site.yml) and verl_job_venv is not set"
                      % (where, ray_client.FACT_PATH))
        if not venv:
            self.fail("%s: its rlinfra_ray local fact (%s) names no venv and verl_job_venv is not set"
                      % (where, ray_client.FACT_PATH))
        self.venv = venv

    def command(self, args, env):
        return node_container.python_command(args, env, venv=self.venv, container=self.container)

    def see(self, paths):
        """Container mode: the head's container runs and sees ``paths`` (container.check_visible); one line if not."""
        if not self.container:
            return

        def run(argv, data=None):
            proc = subprocess.run(argv, input=data, capture_output=True, text=True, check=False)
            return proc.returncode, proc.stdout, proc.stderr
        try:
            node_container.check_running(run, self.container["engine_path"], self.container["name"])
            node_container.check_visible(run, self.container["engine_path"], self.container["name"], paths)
        except OSError as e:
            self.fail("the head's container engine %s cannot run: %s; run site.yml" % (
                self.container["engine_path"], e.strerror or e))
        except node_container.ContainerError as e:
            self.drop_staging()
            self.fail(str(e))

    def where(self):
        if self.container:
            return "%s the head's container engine" % self.container["engine_path"]
        return "%s the cluster's venv" % self.venv

    def fail(self, msg, **extra):
        self.module.fail_json(msg=msg, target=self.target, merged=False, uploaded_to="", **extra)

    def drop_staging(self):
        if self.staging:
            shutil.rmtree(self.staging, ignore_errors=True)

    def merge(self, step, actor, print_):
        self.staging = owned.staging(self.target)
        # The merger writes into the staging directory: a name no image holds by chance, so seen inside it is the
        # host's (the target's directory seen before might be one of the image's own, such as /tmp).
        self.see([(os.path.dirname(self.target), self.staging)])
        # Everything comes from the checkpoint (config and tokenizer in its huggingface/).
        argv, env = self.command(
            ["-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", actor,
             "--target_dir", self.staging] + (["--trust-remote-code"] if self.p["trust_remote_code"] else []),
            dict(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1"))
        try:
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        except OSError as e:
            self.drop_staging()
            self.fail("verl's model merger could not start on %s: %s (is %s?)" % (actor, e.strerror, self.where()))
        if proc.returncode != 0:
            self.drop_staging()
            tail = (proc.stdout.splitlines() + proc.stderr.splitlines())[-self.p["logs_tail_lines"]:]
            self.fail("verl's model merger failed on %s (exit %d): %s" % (
                actor, proc.returncode, _last_line(proc.stderr, "no output")), merger_output=tail)
        record = dict(experiment=self.p["experiment"], project=self.p["project"], step=step, source=actor,
                      fingerprint=print_, uploaded={},
                      merged_at=datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None).isoformat() + "Z")
        _write_record(self.staging, record)
        self.owned(lambda **kw: owned.replace(self.staging, self.target, **kw))
        return record

    def owned(self, act):
        """``act`` (owned.check or owned.replace) on the target: never a directory the merge reads, nor one it did not
        make."""
        try:
            return act(markers=(verl_checkpoint.RECORD,), what="merge target", inputs=(
                ("the checkpoint directory", self.p["checkpoint_dir"]), ("the venv", self.venv)),
                fix="merge into a directory of its own, outside the checkpoints (verl_job_models_root for merge.yml)")
        except owned.NotOurs as e:
            self.drop_staging()
            self.fail(str(e))

    def upload(self, step, record):
        repo = self.p["hf_repo"]
        env = dict(PYTHONUNBUFFERED="1", HF_HUB_DISABLE_TELEMETRY="1")
        if self.p["hf_endpoint"]:
            env["HF_ENDPOINT"] = self.p["hf_endpoint"]
        argv, env = self.command(["-c", UPLOADER, repo, self.target, "true" if self.p["hf_private"] else "false",
                                  "rlinfra: %s step %d" % (self.p["experiment"], step)], env)
        proc = subprocess.run(argv, input=self.p["hf_token"] + "\n", env=env, capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            line = mask_values(_last_line(proc.stderr, "no output"), [self.p["hf_token"]])
            self.fail("upload of %s to Hugging Face repo %s failed (exit %d): %s" % (
                self.target, repo, proc.returncode, line), step=step, record=record)
        record = dict(record, uploaded=dict(record.get("uploaded") or {}, **{repo: step}))
        _write_record(self.target, record)
        return record

    def run(self):
        p = self.p
        framework = p["framework"]
        if framework != "verl":
            # The train workflow merges after every experiment: one verl does not train is not a failure.
            self.module.exit_json(changed=False, merged=False, step=None, source="", target="", uploaded_to="",
                                  report=verl_checkpoint.not_verl_report(p["experiment"], framework))
        if p["hf_repo"] and not p["hf_token"]:
            self.fail("verl_job_hf_repo is %s but no Hugging Face token is set: export HF_TOKEN=... where "
                      "ansible-playbook runs, or set verl_job_hf_token (or HF_TOKEN in verl_job_secrets, e.g. from "
                      "Ansible Vault)" % p["hf_repo"])
        self.find_runtime()
        self.owned(lambda **kw: owned.check(self.target, **kw))
        try:
            step, actor, files = verl_checkpoint.merge_source(p["checkpoint_dir"], p["experiment"], p["step"], p["host_label"])
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
            changed=needed or uploaded, merged=needed, step=step, source=actor, target=self.target, record=record,
            uploaded_to=p["hf_repo"] if uploaded else "", venv=self.venv,
            runtime="container" if self.container else "venv", container=self.container.get("name", ""),
            report=verl_checkpoint.report(p["experiment"], step, actor, self.target, needed, check, record, p["hf_repo"], uploaded))


def main():
    module = ARGS.new_module(AnsibleModule)
    Merge(module).run()


if __name__ == "__main__":
    main()
