"""The cache rlinfra.verl.hf_prefetch writes is the one huggingface_hub itself writes, and reads offline.

Against tests/fake_hf_hub on loopback: huggingface_hub's own snapshot_download (the merge test's venv,
tests/integration/merge_venv.sh) fills one cache, module_utils/verl/hf_prefetch.py another; the repository folders must
be identical (blob names and contents, refs, every snapshot link's target). Then, with the Hub unreachable and
HF_HUB_OFFLINE=1, huggingface_hub finds every file of the prefetched cache, scan_cache_dir reports it without
warnings, and transformers loads the model's config and tokenizer from it by repository id.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import hf_prefetch
from tests.fake_hf_hub.server import FakeHub
from tests.integration.test_merge import merge_venv  # noqa: F401  (the fixture)

TOKEN = "hf_" + "L" * 34
CONFIG = {"model_type": "gpt2", "vocab_size": 16, "n_positions": 8, "n_embd": 8, "n_layer": 1, "n_head": 1}
TOKENIZER = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [],
    "normalizer": None,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": None,
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2}, "unk_token": "[UNK]"},
}
MODEL = {
    "config.json": json.dumps(CONFIG).encode(),
    "tokenizer.json": json.dumps(TOKENIZER).encode(),
    "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}).encode(),
    "model.safetensors": bytes(range(256)) * 3000,
    "nested/dir/notes.txt": b"hello\n",
}
DATA = {"main/train.parquet": b"PAR1" + b"\0" * 5000, "README.md": b"# data\n"}

REAL = r"""
import json, sys
from huggingface_hub import snapshot_download
for kind, repo in (("model", "org/tiny"), ("dataset", "org/data")):
    print(snapshot_download(repo, repo_type=kind, cache_dir=sys.argv[1], token=sys.argv[2]))
"""
OFFLINE = r"""
import json, sys
from huggingface_hub import hf_hub_download, scan_cache_dir
from huggingface_hub.errors import OfflineModeIsEnabled
cache = sys.argv[1]
paths = {f: open(hf_hub_download("org/tiny", f, cache_dir=cache)).read()[:20] for f in ("config.json", "nested/dir/notes.txt")}
paths["train"] = len(open(hf_hub_download("org/data", "main/train.parquet", repo_type="dataset", cache_dir=cache), "rb").read())
info = scan_cache_dir(cache)
import transformers
config = transformers.AutoConfig.from_pretrained("org/tiny", cache_dir=cache)
tok = transformers.AutoTokenizer.from_pretrained("org/tiny", cache_dir=cache)
print(json.dumps({"files": paths, "warnings": [str(w) for w in info.warnings],
                  "repos": sorted((r.repo_type, r.repo_id, r.nb_files) for r in info.repos),
                  "model_type": config.model_type, "ids": tok("hello world")["input_ids"]}))
"""


def tree(root):
    """Every entry under root: a link's target, a file's bytes, refs' text."""
    out = {}
    for path in sorted(Path(root).rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path))
        elif path.is_file():
            out[rel] = ("file", path.read_bytes())
    return out


@pytest.fixture
def hub():
    with FakeHub(token=TOKEN, cdn_host="127.0.0.2") as h:
        h.add_repo("model", "org/tiny", MODEL, private=True)
        h.add_repo("dataset", "org/data", DATA)
        yield h


def test_same_layout_as_huggingface_hub_and_readable_offline(merge_venv, hub, tmp_path):  # noqa: F811
    python = str(merge_venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_ENDPOINT=hub.url, HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1", NO_PROXY="127.0.0.1,127.0.0.2"
    )
    real = subprocess.run(
        [python, "-c", REAL, str(tmp_path / "real"), TOKEN],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert real.returncode == 0, real.stderr[-3000:]

    items, dummy = hf_prefetch.normalize({"models": ["org/tiny"], "datasets": ["org/data"]}, pytest.fail)
    changed, results, lines = hf_prefetch.prefetch(items, str(tmp_path / "ours"), endpoint=hub.url, token=TOKEN)
    assert changed and [r["status"] for r in results] == ["downloaded", "downloaded"], lines
    for folder in ("models--org--tiny", "datasets--org--data"):
        theirs, ours = tree(tmp_path / "real" / folder), tree(tmp_path / "ours" / "hub" / folder)
        assert theirs and ours == theirs, sorted(set(theirs) ^ set(ours))

    hub.down = True
    env.update(HF_HUB_OFFLINE="1")
    offline = subprocess.run(
        [python, "-c", OFFLINE, str(tmp_path / "ours" / "hub")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert offline.returncode == 0, offline.stderr[-3000:]
    seen = json.loads(offline.stdout.strip().splitlines()[-1])
    assert seen["files"] == {
        "config.json": MODEL["config.json"].decode()[:20],
        "nested/dir/notes.txt": "hello\n",
        "train": len(DATA["main/train.parquet"]),
    }
    assert seen["warnings"] == [] and seen["repos"] == [["dataset", "org/data", 2], ["model", "org/tiny", 5]]
    assert seen["model_type"] == "gpt2" and seen["ids"] == [1, 2]
