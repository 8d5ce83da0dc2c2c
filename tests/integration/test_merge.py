"""The real ``ansible-playbook merge.yml -e exp=NAME [-e step=N]`` on a real FSDP-sharded checkpoint.

The checkpoint is made here, in verl 0.9.1's layout: a tiny Qwen2 model built from a config (random
weights, bf16, nothing downloaded) is sharded with FSDP2 on the CPU by ``torchrun --nproc_per_node=2``
(gloo on loopback, ``init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))``, ``fully_shard`` per
decoder layer and on the root, as verl's FSDP engine does), and each rank saves its DTensor shards
as ``model_world_size_2_rank_{r}.pt`` next to ``fsdp_config.json`` and ``huggingface/`` (config and
tokenizer), under ``<checkpoint root>/<project>/<exp>/global_step_N/actor`` with
``latest_checkpointed_iteration.txt``; two steps with different weights. localhost is the only
ray_head (ansible_connection=local), like tests/integration/test_submit_loopback.py; the head's venv
(verl_job_venv) is the one tests/integration/merge_venv.sh builds (torch CPU, transformers, verl).

Checked: merge.yml runs verl's model merger on the latest step; the merged safetensors load with
transformers and every tensor equals the original weights (and differs from the other step's); a
re-run reports changed=0; -e step=N merges that step; a missing step, checkpoint directory or
tracker fails with one clear line; the upload reaches a fake Hugging Face Hub on loopback with the
token only in its Authorization header (never in the output, even at -vvv, nor on any process's
command line), sends exactly the merged files, and is not repeated by a re-run; an upload repo
without a token fails before merging; a rejected token fails with the Hub's answer in one line.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.integration.localhost_play import REPO, flat, recap, run_playbook, write_inventory

MERGE_VENV_SCRIPT = REPO / "tests" / "integration" / "merge_venv.sh"
EXP = "tiny_qwen2"
PROJECT = "merge_test"
STEPS = (2, 4)  # checkpointed steps; the tracker names the last one
FAKE_HF_TOKEN = "hf_mErGeFaKe0123456789tOkEnVaLuE"

EXPERIMENT = textwrap.dedent(
    """\
    description: tiny Qwen2 model, for merge.yml
    project: %s
    params:
      actor_rollout_ref:
        model:
          path: /data/models/base/tiny_qwen2
      data:
        train_files: /data/datasets/tiny/train.parquet
        val_files: /data/datasets/tiny/val.parquet
    """
    % PROJECT
)

# Runs under torchrun in the merge venv: one checkpoint per step, in verl's FSDP layout.
SHARD_SCRIPT = textwrap.dedent("""\
    import json, os, sys
    import torch
    import torch.distributed as dist
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models, pre_tokenizers
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    ckpt_dir, steps, side = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("fsdp",))  # verl: create_device_mesh
    # vocab 251: an odd first dimension, unevenly sharded (126 + 125 rows), as real vocabularies often are.
    config = Qwen2Config(vocab_size=251, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"])
    for step in steps:
        torch.manual_seed(1000 + step)  # the same weights on every rank (as if loaded from one model)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        with torch.no_grad():  # norms and biases start as ones/zeros: make every tensor distinctive
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.02)
        actor = os.path.join(ckpt_dir, "global_step_%d" % step, "actor")
        os.makedirs(actor, exist_ok=True)
        if rank == 0:
            full = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
            save_file(full, os.path.join(side, "reference_step_%d.safetensors" % step))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        state = model.state_dict()  # DTensor shards, as verl's FSDPCheckpointManager saves them
        torch.save(state, os.path.join(actor, "model_world_size_%d_rank_%d.pt" % (world, rank)))
        info = {k: {"dtensor": isinstance(v, DTensor), "placements": [("shard(%d)" % p.dim) if p.is_shard() else str(p)
                                                        for p in getattr(v, "placements", [])],
                    "local": list(v.to_local().shape) if isinstance(v, DTensor) else list(v.shape),
                    "full": list(v.shape)} for k, v in state.items()}
        with open(os.path.join(side, "shards_step_%d_rank_%d.json" % (step, rank)), "w") as f:
            json.dump(info, f)
        dist.barrier()
        if rank == 0:
            hf = os.path.join(actor, "huggingface")
            model.config.save_pretrained(hf)
            vocab = {"<unk>": 0, "<eos>": 1, **{"w%d" % i: i + 2 for i in range(249)}}
            tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
            tok.pre_tokenizer = pre_tokenizers.Whitespace()
            PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>",
                                    pad_token="<eos>").save_pretrained(hf)
            with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
                json.dump({"FSDP_version": 2, "world_size": world}, f, indent=4)
            torch.save({"dataloader": step}, os.path.join(ckpt_dir, "global_step_%d" % step, "data.pt"))
            with open(os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(step))
        dist.barrier()
    dist.destroy_process_group()
    """)

# Runs in the merge venv: compare a merged model with the original weights.
COMPARE_SCRIPT = textwrap.dedent("""\
    import json, sys
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    target, reference, other = sys.argv[1:4]
    ref, oth = load_file(reference), load_file(other)
    merged = load_file(target + "/model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.bfloat16)
    loaded = model.state_dict()

    def mismatches(got):
        return sorted(k for k in ref if k not in got or got[k].dtype != ref[k].dtype
                      or got[k].shape != ref[k].shape or not torch.equal(got[k], ref[k]))

    with torch.no_grad():
        logits = model(torch.tensor([[2, 3, 4, 5]])).logits
    print(json.dumps({
        "ref_keys": sorted(ref), "merged_keys": sorted(merged), "loaded_keys": sorted(loaded),
        "file_mismatches": mismatches(merged), "loaded_mismatches": mismatches(loaded),
        "equal_to_other_step": sorted(k for k in oth if k in merged and torch.equal(merged[k], oth[k])),
        "dtypes": sorted({str(v.dtype) for v in merged.values()}),
        "numel": sum(v.numel() for v in merged.values()),
        "logits_shape": list(logits.shape), "logits_finite": bool(torch.isfinite(logits).all()),
    }))
    """)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def merge_venv():
    """tests/integration/merge_venv.sh: built once (about 1.5 min), then re-used while its requirements stay."""
    start = time.monotonic()
    proc = subprocess.run(
        ["bash", str(MERGE_VENV_SCRIPT)], cwd=REPO, capture_output=True, text=True, timeout=2400, check=False
    )
    assert proc.returncode == 0, "merge_venv.sh failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-5000:])
    venv = Path(proc.stdout.strip().splitlines()[-1])
    assert (venv / "bin" / "python").is_file() and (venv / "bin" / "torchrun").is_file()
    sys.stderr.write("merge venv %s ready in %.1f s\n" % (venv, time.monotonic() - start))
    return venv


@pytest.fixture(scope="module")
def checkpoint(merge_venv, tmp_path_factory):
    """<root>/merge_test/tiny_qwen2/global_step_{2,4}/actor, sharded over 2 ranks; references in <root>."""
    root = tmp_path_factory.mktemp("checkpoints")
    ckpt_dir = root / PROJECT / "default" / EXP  # <root>/<project>/<cluster>/<exp>
    ckpt_dir.mkdir(parents=True)
    script = root / "shard_fsdp.py"
    script.write_text(SHARD_SCRIPT)
    env = dict(
        os.environ,
        GLOO_SOCKET_IFNAME="lo",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(root / "hf_home"),
        MASTER_ADDR="127.0.0.1",
    )
    proc = subprocess.run(
        [
            str(merge_venv / "bin" / "torchrun"),
            "--nnodes=1",
            "--nproc_per_node=2",
            "--master_addr=127.0.0.1",
            "--master_port=%d" % free_port(),
            str(script),
            str(ckpt_dir),
            ",".join(map(str, STEPS)),
            str(root),
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, "torchrun failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-5000:])
    references = {}
    for step in STEPS:
        references[step] = root / ("reference_step_%d.safetensors" % step)
        assert references[step].is_file()
    return {"root": root, "dir": ckpt_dir, "references": references, "venv": merge_venv}


@pytest.fixture
def workdir(tmp_path):
    write_inventory(tmp_path)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / (EXP + ".yml")).write_text(EXPERIMENT)
    (tmp_path / "experiments" / "never_trained.yml").write_text(EXPERIMENT)
    (tmp_path / "experiments" / "custom_program.yml").write_text(
        "framework: custom\nproject: %s\nentrypoint:\n  command: python3 train.py\n" % PROJECT
    )
    return tmp_path


def playbook(workdir, checkpoint, *extra, env=None, verbosity="-v"):
    common = {
        "verl_job_experiments_dir": str(workdir / "experiments"),
        "verl_job_checkpoint_root": str(checkpoint["root"]),
        "verl_job_models_root": str(workdir / "models"),
        "verl_job_venv": str(checkpoint["venv"]),
        "verl_job_become": False,
    }
    return run_playbook(
        workdir,
        "merge.yml",
        common,
        *extra,
        env=dict({"HF_HOME": str(workdir / "hf_home")}, **(env or {})),
        verbosity=verbosity,
    )


def compare(checkpoint, target, step):
    other = next(s for s in STEPS if s != step)
    proc = subprocess.run(
        [
            str(checkpoint["venv"] / "bin" / "python"),
            "-c",
            COMPARE_SCRIPT,
            str(target),
            str(checkpoint["references"][step]),
            str(checkpoint["references"][other]),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def assert_same_weights(result):
    assert result["ref_keys"] and len(result["ref_keys"]) == 3 + 2 * 12  # embed, norm, lm_head + 12 per layer
    assert result["merged_keys"] == result["ref_keys"]
    assert result["loaded_keys"] == result["ref_keys"]
    assert result["file_mismatches"] == [] and result["loaded_mismatches"] == []
    assert result["equal_to_other_step"] == []  # the comparison tells the two steps apart
    assert result["dtypes"] == ["torch.bfloat16"]
    assert result["logits_shape"] == [1, 4, 251] and result["logits_finite"]


def assert_tokenizer_carried_over(checkpoint, target, step):
    source = checkpoint["dir"] / ("global_step_%d" % step) / "actor" / "huggingface" / "tokenizer.json"
    merged = json.loads((target / "tokenizer.json").read_text())
    assert merged["model"]["vocab"] == json.loads(source.read_text())["model"]["vocab"]
    assert len(merged["model"]["vocab"]) == 251


def test_checkpoint_is_really_sharded(checkpoint):
    """The fixture's checkpoint is what verl's FSDP workers write: every weight a Shard(0) DTensor, split in two."""
    for step in STEPS:
        actor = checkpoint["dir"] / ("global_step_%d" % step) / "actor"
        assert sorted(p.name for p in actor.iterdir()) == [
            "fsdp_config.json",
            "huggingface",
            "model_world_size_2_rank_0.pt",
            "model_world_size_2_rank_1.pt",
        ]
        assert json.loads((actor / "fsdp_config.json").read_text()) == {"FSDP_version": 2, "world_size": 2}
        assert {"config.json", "tokenizer.json"} <= {p.name for p in (actor / "huggingface").iterdir()}
        ranks = [
            json.loads((checkpoint["root"] / ("shards_step_%d_rank_%d.json" % (step, r))).read_text()) for r in (0, 1)
        ]
        for key, info in ranks[0].items():
            assert info["dtensor"] and info["placements"] == ["shard(0)"], (key, info)
            rows = [ranks[r][key]["local"][0] for r in (0, 1)]
            assert sum(rows) == info["full"][0] and max(rows) < info["full"][0], (key, rows)
        assert ranks[0]["model.embed_tokens.weight"]["local"] == [126, 64]  # uneven: 251 = 126 + 125
    assert (checkpoint["dir"] / "latest_checkpointed_iteration.txt").read_text() == str(STEPS[-1])
    assert sorted(p.name for p in checkpoint["dir"].iterdir()) == ["global_step_%d" % s for s in STEPS] + [
        "latest_checkpointed_iteration.txt"
    ]


def test_merge_latest_step_then_rerun_changes_nothing(checkpoint, workdir):
    target = workdir / "models" / EXP
    proc = playbook(workdir, checkpoint, "exp=" + EXP)
    assert proc.returncode == 0, proc.output[-5000:]
    assert recap(proc.output)["changed"] > 0
    source = checkpoint["dir"] / ("global_step_%d" % STEPS[-1]) / "actor"
    assert "merged step %d of %s (%s) into %s" % (STEPS[-1], EXP, source, target) in flat(proc.output)

    assert_same_weights(compare(checkpoint, target, STEPS[-1]))
    assert_tokenizer_carried_over(checkpoint, target, STEPS[-1])
    files = {p.name for p in target.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", ".rlinfra-merge.json"} <= files
    record = json.loads((target / ".rlinfra-merge.json").read_text())
    assert record["step"] == STEPS[-1] and record["source"] == str(source) and record["experiment"] == EXP
    assert not (workdir / "models" / (".%s.merging" % EXP)).exists()
    weights_mtime = (target / "model.safetensors").stat().st_mtime_ns

    again = playbook(workdir, checkpoint, "exp=" + EXP)
    assert again.returncode == 0, again.output[-5000:]
    assert recap(again.output)["changed"] == 0
    assert "%s already holds step %d of %s" % (target, STEPS[-1], EXP) in flat(again.output)
    assert (target / "model.safetensors").stat().st_mtime_ns == weights_mtime


def test_merge_named_step_and_missing_ones(checkpoint, workdir):
    target = workdir / "models" / EXP
    first = STEPS[0]
    proc = playbook(workdir, checkpoint, "exp=" + EXP, "step=%d" % first)
    assert proc.returncode == 0, proc.output[-5000:]
    assert "merged step %d of %s" % (first, EXP) in flat(proc.output)
    assert_same_weights(compare(checkpoint, target, first))
    assert json.loads((target / ".rlinfra-merge.json").read_text())["step"] == first

    # Another step replaces the model (not merged into the same files).
    latest = playbook(workdir, checkpoint, "exp=" + EXP)
    assert latest.returncode == 0 and recap(latest.output)["changed"] > 0, latest.output[-5000:]
    assert_same_weights(compare(checkpoint, target, STEPS[-1]))

    missing = playbook(workdir, checkpoint, "exp=" + EXP, "step=3")
    assert missing.returncode != 0
    assert recap(missing.output)["failed"] == 1
    assert (
        "experiment %s has no checkpoint of step 3: %s/global_step_3/actor does not exist; steps found: %s"
        % (EXP, checkpoint["dir"], ", ".join(map(str, STEPS)))
    ) in flat(missing.output)
    assert json.loads((target / ".rlinfra-merge.json").read_text())["step"] == STEPS[-1]  # left as it was

    # The command line is read strictly before anything runs.
    bad = playbook(workdir, checkpoint, "exp=" + EXP, "step=latest")
    assert bad.returncode != 0
    assert re.search(
        r"Bad command line for merge.yml, nothing was done: step must be a whole number from 1 to 1000000000000, "
        r"got '+latest'+",
        flat(bad.output),
    ), bad.output[-3000:]

    # Not a verl experiment (the AWX train workflow merges after every experiment): nothing to merge.
    custom = playbook(workdir, checkpoint, "exp=custom_program")
    assert custom.returncode == 0, custom.output[-3000:]
    assert "nothing to merge: experiment custom_program is a custom experiment" in flat(custom.output)
    assert re.search(r"changed=0 .*failed=0", custom.output), custom.output[-2000:]
    assert not (workdir / "models" / "custom_program").exists()

    never = playbook(workdir, checkpoint, "exp=never_trained")
    assert never.returncode != 0
    assert (
        "experiment never_trained has no checkpoint directory %s/%s/default/never_trained"
        % (checkpoint["root"], PROJECT)
    ) in flat(never.output)


def test_missing_tracker_or_incomplete_checkpoint_fails_clearly(checkpoint, workdir):
    # A copy of the checkpoint without latest_checkpointed_iteration.txt (e.g. async_save).
    root = workdir / "ckpt"
    (root / PROJECT / "default" / EXP).mkdir(parents=True)
    for step in STEPS:
        (root / PROJECT / "default" / EXP / ("global_step_%d" % step)).symlink_to(
            checkpoint["dir"] / ("global_step_%d" % step)
        )
    moved = dict(checkpoint, root=root)
    proc = playbook(workdir, moved, "exp=" + EXP)
    assert proc.returncode != 0
    assert (
        "experiment %s has no checkpoint to merge: %s/%s/default/%s/latest_checkpointed_iteration.txt does not exist; "
        "steps found: 2, 4 (name one with -e step=N)" % (EXP, root, PROJECT, EXP)
    ) in flat(proc.output)
    assert not (workdir / "models" / EXP).exists()

    # A step whose actor directory lacks the shards and the model config (e.g. a Megatron or a partial one).
    partial = root / PROJECT / "default" / EXP / "global_step_6" / "actor"
    partial.mkdir(parents=True)
    (partial / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 2}')
    proc = playbook(workdir, moved, "exp=" + EXP, "step=6")
    assert proc.returncode != 0
    assert (
        "%s is not a complete verl FSDP checkpoint (it has no model_world_size_*_rank_*.pt shards, "
        "huggingface/config.json): merge.yml merges the actor checkpoints that verl's FSDP workers save" % partial
    ) in flat(proc.output)
    assert not (workdir / "models" / EXP).exists()


def processes_with_in_argv(text):
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(cmdline.parent.name)
        except OSError:  # gone meanwhile
            pass
    return found


class FakeHub:
    """Enough of the Hugging Face Hub API for HfApi.create_repo + upload_folder, on 127.0.0.1."""

    def __init__(self, token):
        self.token, self.requests, self.repos, self.files = token, [], {}, {}
        self.argv_leaks = []  # processes whose command line held the token while the upload ran
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.handle_any("GET")

            def do_POST(self):
                self.handle_any("POST")

            def handle_any(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                path = self.path.split("?")[0]
                auth = self.headers.get("Authorization")
                hub.requests.append({"method": method, "path": path, "auth": auth, "body": body})
                hub.argv_leaks += processes_with_in_argv(hub.token)
                if auth != "Bearer " + hub.token:
                    return self.reply(401, {"error": "Invalid credentials in Authorization header"})
                if method == "POST" and path == "/api/repos/create":
                    data = json.loads(body)
                    repo = "%s/%s" % (data["organization"], data["name"])
                    hub.repos[repo] = data
                    return self.reply(200, {"url": "%s/%s" % (hub.url, repo)})
                m = re.match(r"^/api/models/([^/]+/[^/]+)/(preupload|commit)/main$", path)
                if method == "POST" and m and m.group(1) in hub.repos:
                    if m.group(2) == "preupload":
                        return self.reply(
                            200,
                            {
                                "files": [
                                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None}
                                    for f in json.loads(body)["files"]
                                ]
                            },
                        )
                    for line in body.splitlines():
                        item = json.loads(line)
                        if item["key"] == "file":
                            hub.files.setdefault(m.group(1), {})[item["value"]["path"]] = base64.b64decode(
                                item["value"]["content"]
                            )
                    oid = "%040x" % len(hub.requests)
                    return self.reply(
                        200,
                        {
                            "commitUrl": "%s/%s/commit/%s" % (hub.url, m.group(1), oid),
                            "commitOid": oid,
                            "pullRequestUrl": None,
                        },
                    )
                return self.reply(404, {"error": "not found: %s %s" % (method, path)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_upload_to_hugging_face_token_only_in_the_environment(checkpoint, workdir):
    target = workdir / "models" / EXP
    upload = json.dumps({"verl_job_hf_repo": "rlinfra-test/tiny-qwen2"})

    # A repo without a token: one clear line, before anything is merged.
    no_token = playbook(workdir, checkpoint, "exp=" + EXP, upload)
    assert no_token.returncode != 0
    assert "verl_job_hf_repo is rlinfra-test/tiny-qwen2 but no Hugging Face token is set" in flat(no_token.output)
    assert not target.exists()

    with FakeHub(FAKE_HF_TOKEN) as hub:
        endpoint = json.dumps({"verl_job_hf_endpoint": hub.url})
        proc = playbook(
            workdir, checkpoint, "exp=" + EXP, upload, endpoint, env={"HF_TOKEN": FAKE_HF_TOKEN}, verbosity="-vvv"
        )  # -vvv shows the command lines Ansible runs
        assert proc.returncode == 0, proc.output[-5000:]
        assert "; uploaded to Hugging Face repo rlinfra-test/tiny-qwen2" in flat(proc.output)
        assert FAKE_HF_TOKEN not in proc.output
        assert hub.argv_leaks == []  # no process had it on its command line while the Hub was talked to

        authed = [r for r in hub.requests if r["auth"]]
        assert authed and all(r["auth"] == "Bearer " + FAKE_HF_TOKEN for r in authed)
        assert not any(FAKE_HF_TOKEN.encode() in r["body"] or FAKE_HF_TOKEN in r["path"] for r in hub.requests)
        assert hub.repos["rlinfra-test/tiny-qwen2"]["visibility"] == "private"
        local = {p.name: p.read_bytes() for p in target.iterdir() if p.name != ".rlinfra-merge.json"}
        assert "model.safetensors" in local
        assert hub.files["rlinfra-test/tiny-qwen2"] == local  # exactly the merged files, not the record
        record = json.loads((target / ".rlinfra-merge.json").read_text())
        assert record["uploaded"] == {"rlinfra-test/tiny-qwen2": STEPS[-1]}
        assert FAKE_HF_TOKEN not in (target / ".rlinfra-merge.json").read_text()

        count = len(hub.requests)
        again = playbook(workdir, checkpoint, "exp=" + EXP, upload, endpoint, env={"HF_TOKEN": FAKE_HF_TOKEN})
        assert again.returncode == 0, again.output[-5000:]
        assert recap(again.output)["changed"] == 0
        assert "already uploaded to Hugging Face repo rlinfra-test/tiny-qwen2" in flat(again.output)
        assert len(hub.requests) == count

        # A rejected token: the Hub's answer, one line, no token.
        other = json.dumps({"verl_job_hf_repo": "rlinfra-test/other", "verl_job_hf_token": "hf_wrong_token_value_123"})
        wrong = playbook(workdir, checkpoint, "exp=" + EXP, other, endpoint)
        assert wrong.returncode != 0
        assert "upload of %s to Hugging Face repo rlinfra-test/other failed (exit 1)" % target in flat(wrong.output)
        assert "401" in flat(wrong.output) and "hf_wrong_token_value_123" not in wrong.output


def test_models_root_at_or_above_the_checkpoints_is_refused_and_nothing_is_lost(checkpoint, workdir):
    """merge.yml with verl_job_models_root pointing at the checkpoints' directory (so that the target is the
    experiment's checkpoint directory) merged and then removed every global_step_*; now it is refused in one line."""
    exp_dir = checkpoint["dir"]
    before = sorted(str(p.relative_to(exp_dir)) for p in exp_dir.rglob("*"))
    models_root = exp_dir.parent  # <checkpoint root>/<project>/<cluster>: the target is the checkpoint directory
    proc = playbook(workdir, checkpoint, "exp=" + EXP, json.dumps({"verl_job_models_root": str(models_root)}))
    assert proc.returncode != 0
    assert (
        "refusing to replace the merge target %s: it is the checkpoint directory %s, which this operation reads; "
        "merge into a directory of its own, outside the checkpoints (verl_job_models_root for merge.yml)"
        % (exp_dir, exp_dir)
    ) in flat(proc.output), proc.output[-3000:]
    assert sorted(str(p.relative_to(exp_dir)) for p in exp_dir.rglob("*")) == before
