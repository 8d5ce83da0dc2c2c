"""module_utils/verl/hf_prefetch.py: Hugging Face models and datasets fetched once into the Hub cache.

Against tests/fake_hf_hub (the Hub's download endpoints on loopback, with its "CDN" on another port), on real
files: the layout, the skip when already there (no download, and no request at all for a pinned commit),
resume after a dropped connection, a corrupted file refused, the token sent only to the Hub, one line per
failure. tests/integration/test_prefetch.py checks the layout against huggingface_hub itself.
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import hf_prefetch as hp
from tests.fake_hf_hub.server import FakeHub, git_blob_id

TOKEN = "hf_" + "s" * 34
WEIGHTS = bytes(range(256)) * 4096  # 1 MiB, an LFS file
FILES = {
    "config.json": b'{"model_type": "qwen2"}',
    "tokenizer.json": b'{"v": 1}',
    "model.safetensors": WEIGHTS,
    "original/consolidated.pth": b"x" * 1000,
}


def items(text):
    errors = []
    out, hf_home = hp.normalize(text, errors.append)
    assert errors == []
    return out


@pytest.fixture
def hub():
    with FakeHub(token=TOKEN) as h:
        h.commit = h.add_repo("model", "org/tiny", FILES, private=True)
        h.data_commit = h.add_repo("dataset", "org/gsm", {"main/train.parquet": b"P" * 5000, "README.md": b"# gsm"})
        yield h


def run(hub, tmp_path, section, **kw):
    kw.setdefault("token", TOKEN)
    return hp.prefetch(items(section), str(tmp_path / "hf"), endpoint=hub.url, retries=kw.pop("retries", 3), **kw)


def test_normalize_reads_strings_and_mappings_and_reports_each_problem():
    got = items(
        {
            "models": ["org/a", {"repo": "b", "revision": "v1.0", "allow_patterns": "*.json"}],
            "datasets": [{"repo": "org/d", "ignore_patterns": ["*.md"]}],
        }
    )
    assert got == [
        {"kind": "model", "repo": "org/a", "revision": "main", "allow_patterns": [], "ignore_patterns": []},
        {"kind": "model", "repo": "b", "revision": "v1.0", "allow_patterns": ["*.json"], "ignore_patterns": []},
        {"kind": "dataset", "repo": "org/d", "revision": "main", "allow_patterns": [], "ignore_patterns": ["*.md"]},
    ]
    errors = []
    hp.normalize(
        {
            "models": [
                "../etc",
                "a--b/c",
                {"repo": "o/x", "revision": "../../x"},
                {"repo": "o/y", "allow": "*"},
                "o/z",
                "o/z",
                3,
            ],
            "datasets": "org/d",
            "hf_home": "rel",
            "extra": 1,
        },
        errors.append,
    )
    assert [e.split(":")[0] for e in errors] == [
        "prefetch",
        "prefetch.hf_home",
        "prefetch.models[0]",
        "prefetch.models[1]",
        "prefetch.models[2]",
        "prefetch.models[3]",
        "prefetch.models[5]",
        "prefetch.models[6]",
        "prefetch.datasets",
    ]
    assert "unknown key 'extra'" in errors[0] and "listed twice" in errors[6]


def test_first_run_writes_huggingface_hubs_layout_second_run_downloads_nothing(hub, tmp_path):
    section = {"models": ["org/tiny"], "datasets": ["org/gsm"]}
    changed, results, lines = run(hub, tmp_path, section)
    assert changed and [r["status"] for r in results] == ["downloaded", "downloaded"]
    assert results[0]["commit"] == hub.commit and results[0]["downloaded_files"] == 4
    root = tmp_path / "hf" / "hub" / "models--org--tiny"
    assert (root / "refs" / "main").read_text() == hub.commit
    link = root / "snapshots" / hub.commit / "model.safetensors"
    assert os.readlink(link) == "../../blobs/" + hp.hashlib.sha256(WEIGHTS).hexdigest()
    assert link.read_bytes() == WEIGHTS
    nested = root / "snapshots" / hub.commit / "original" / "consolidated.pth"
    assert os.readlink(nested) == "../../../blobs/" + git_blob_id(b"x" * 1000)
    assert (
        tmp_path / "hf" / "hub" / "datasets--org--gsm" / "snapshots" / hub.data_commit / "main" / "train.parquet"
    ).read_bytes() == b"P" * 5000
    assert not list(root.glob("blobs/*.incomplete"))
    assert "downloaded 4 files" in lines[0] and hub.commit[:12] in lines[0]

    before = len(hub.downloads())
    changed, results, lines = run(hub, tmp_path, section)
    assert not changed and [r["status"] for r in results] == ["present", "present"]
    assert len(hub.downloads()) == before  # asked which commit main is, fetched no file
    assert lines[0].endswith("already in the cache, nothing downloaded")


def test_pinned_commit_already_there_asks_nothing_and_offline_branch_uses_the_cached_commit(hub, tmp_path):
    run(hub, tmp_path, {"models": ["org/tiny"]})
    asked = len(hub.requests)
    changed, results, dummy = run(hub, tmp_path, {"models": [{"repo": "org/tiny", "revision": hub.commit}]})
    assert not changed and results[0]["status"] == "present" and len(hub.requests) == asked

    hub.down = True
    changed, results, lines = run(hub, tmp_path, {"models": ["org/tiny"]}, retries=1)
    assert not changed and results[0]["status"] == "cached"
    assert "could not reach the Hub" in lines[0] and "using the cached commit %s" % hub.commit[:12] in lines[0]
    with pytest.raises(hp.PrefetchError, match=r"^dataset org/gsm@main: could not reach the Hub at http"):
        run(hub, tmp_path, {"datasets": ["org/gsm"]}, retries=1)


def test_a_new_commit_on_the_branch_fetches_only_the_changed_files(hub, tmp_path):
    run(hub, tmp_path, {"models": ["org/tiny"]})
    new = hub.add_repo("model", "org/tiny", dict(FILES, **{"config.json": b'{"model_type": "qwen3"}'}), private=True)
    before = len(hub.downloads())
    changed, results, dummy = run(hub, tmp_path, {"models": ["org/tiny"]})
    assert changed and results[0]["commit"] == new and results[0]["downloaded_files"] == 4
    assert len(hub.downloads()) == before + 1  # the blobs of the other three were already there
    root = tmp_path / "hf" / "hub" / "models--org--tiny"
    assert (root / "refs" / "main").read_text() == new
    assert (root / "snapshots" / hub.commit / "config.json").read_bytes() == FILES["config.json"]  # the old one stays


def test_patterns_select_files(hub, tmp_path):
    changed, results, dummy = run(
        hub,
        tmp_path,
        {
            "models": [
                {"repo": "org/tiny", "allow_patterns": ["*.json", "*.safetensors"], "ignore_patterns": ["tokenizer*"]}
            ]
        },
    )
    snap = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / hub.commit
    assert sorted(p.name for p in snap.rglob("*") if p.is_symlink()) == ["config.json", "model.safetensors"]
    with pytest.raises(hp.PrefetchError, match="no file of commit .* matches allow_patterns"):
        run(hub, tmp_path, {"models": [{"repo": "org/tiny", "allow_patterns": ["*.gguf"]}]})


def test_dropped_connection_resumes_with_a_range_and_is_logged(hub, tmp_path):
    hub.drop_next("model.safetensors", after=300000)
    sleeps = []
    h = hp.Hub(hub.url, TOKEN, timeout=10)
    real = h.download
    h.download = lambda *a, **k: real(*a, sleep=sleeps.append, **k)
    changed, results, lines = hp.prefetch(items({"models": ["org/tiny"]}), str(tmp_path / "hf"), hub=h)
    assert (
        tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / hub.commit / "model.safetensors"
    ).read_bytes() == WEIGHTS
    cdn = [r for r in hub.cdn_requests if r["method"] == "GET"]
    assert [r["range"] for r in cdn] == [None, "bytes=300000-"] and [r["status"] for r in cdn] == [200, 206]
    assert any("model.safetensors: attempt 1 failed" in line and "resuming" in line for line in lines)
    assert sleeps == [2]


def test_corrupted_download_is_removed_and_named(hub, tmp_path):
    hub.corrupt_next("tokenizer.json")
    with pytest.raises(hp.PrefetchError) as e:
        run(hub, tmp_path, {"models": ["org/tiny"]})
    assert "tokenizer.json: the downloaded file does not match its id" in str(e.value) and "\n" not in str(e.value)
    blobs = tmp_path / "hf" / "hub" / "models--org--tiny" / "blobs"
    assert git_blob_id(FILES["tokenizer.json"]) not in [p.name for p in blobs.iterdir()]
    assert not list(blobs.glob("*.incomplete"))
    changed, results, dummy = run(hub, tmp_path, {"models": ["org/tiny"]})  # a re-run completes it
    assert changed and results[0]["status"] == "downloaded"


@pytest.mark.parametrize("resumed", [False, True])
def test_a_partial_file_that_is_a_link_is_dropped_never_written_through(hub, tmp_path, resumed):
    """<blob>.incomplete replaced by a link to a user's file: the download truncated it (or was appended to it)."""
    victim = tmp_path / "users-file"
    victim.write_bytes(b"mine" * (100 if resumed else 1))  # shorter than the blob: taken as a partial download
    blobs = tmp_path / "hf" / "hub" / "models--org--tiny" / "blobs"
    blobs.mkdir(parents=True)
    os.symlink(victim, blobs / (hp.hashlib.sha256(WEIGHTS).hexdigest() + ".incomplete"))
    changed, results, dummy = run(hub, tmp_path, {"models": ["org/tiny"]})
    assert changed and results[0]["status"] == "downloaded"
    assert victim.read_bytes() == b"mine" * (100 if resumed else 1)
    assert (
        tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / hub.commit / "model.safetensors"
    ).read_bytes() == WEIGHTS
    assert not list(blobs.glob("*.incomplete"))


def test_failures_are_one_line_each(hub, tmp_path):
    cases = [
        (
            {"models": ["org/tiny"]},
            "",
            r"^model org/tiny@main: the Hub at \S+ answered 401 .*set HF_TOKEN in verl_job_secrets",
        ),
        ({"models": ["org/tiny"]}, "hf_wrong", r"answered 401 .*token was refused"),
        ({"models": ["org/none"]}, TOKEN, r"^model org/none@main: .* answered 404 .*check the name and the revision"),
        ({"models": [{"repo": "org/tiny", "revision": "v9"}]}, TOKEN, r"answered 404"),
    ]
    for section, token, pattern in cases:
        with pytest.raises(hp.PrefetchError, match=pattern) as e:
            run(hub, tmp_path, section, token=token)
        assert "\n" not in str(e.value) and TOKEN not in str(e.value)
    assert not (tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots").exists()


def test_token_goes_to_the_hub_only_never_to_the_cdn_nor_to_disk(hub, tmp_path):
    run(hub, tmp_path, {"models": ["org/tiny"]})
    assert all(r["token_ok"] for r in hub.requests)
    assert hub.cdn_requests and not any(r["auth"] for r in hub.cdn_requests)
    for path in (tmp_path / "hf").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_check_mode_reports_without_writing(hub, tmp_path):
    changed, results, lines = run(hub, tmp_path, {"models": ["org/tiny"]}, check_mode=True)
    assert changed and results[0]["status"] == "downloaded" and "would download 4 files" in lines[0]
    assert not (tmp_path / "hf").exists() and hub.downloads() == []


def test_tree_lists_the_commits_files_as_huggingface_hub_does(hub, tmp_path):
    run(hub, tmp_path, {"models": [{"repo": "org/tiny", "allow_patterns": "*.json"}]})
    tree = json.loads((tmp_path / "hf" / "hub" / "models--org--tiny" / "trees" / (hub.commit + ".json")).read_text())
    assert tree["format_version"] == 1 and sorted(tree["files"]) == sorted(FILES)  # the commit's files, all of them
    assert tree["files"]["model.safetensors"] == {
        "size": len(WEIGHTS),
        "blob_id": git_blob_id(WEIGHTS),
        "lfs_sha256": hp.hashlib.sha256(WEIGHTS).hexdigest(),
        "lfs_size": len(WEIGHTS),
    }


def test_lock_is_bounded(tmp_path):
    lock = str(tmp_path / "x.lock")
    with hp.fs.BoundedLock(lock, 5, "another prefetch", hp.PrefetchError):
        with pytest.raises(hp.PrefetchError, match=r"^another prefetch has held .*x\.lock for more than 0 s"):
            with hp.fs.BoundedLock(lock, 0, "another prefetch", hp.PrefetchError, sleep=lambda s: None):
                pass


# The module (rlinfra.verl.hf_prefetch): the Hub's address is an http(s) URL without credentials or query (a file://
# endpoint read the node's own files), the cache is an absolute path; refused before any request or file ---------

URL = "endpoint must be an https:// or http:// URL"
MODULE_REFUSED = [
    ("file_endpoint", {"endpoint": "file:///etc/passwd"}, URL + ", got a value that is not a URL (not shown)"),
    ("file_host_endpoint", {"endpoint": "file://localhost/etc"}, URL + ", got file://localhost/..."),
    ("ftp_endpoint", {"endpoint": "ftp://mirror.example/hf"}, URL + ", got ftp://mirror.example/..."),
    (
        "token_in_endpoint",
        {"endpoint": "https://hf_s3cr3t@hf-mirror.example"},
        URL + " without credentials before '@' (give a token through its own secret option), got "
        "https://********@hf-mirror.example",
    ),
    (
        "password_in_endpoint",
        {"endpoint": "https://user:s3cr3t@hf-mirror.example/"},
        URL + " without credentials before '@' (give a token through its own secret option), got "
        "https://********@hf-mirror.example",
    ),
    (
        "query_in_endpoint",
        {"endpoint": "https://hf-mirror.example/?token=hf_s3cr3t"},
        URL
        + " without a query string or fragment (a token does not belong in a URL), got https://hf-mirror.example/...",
    ),
    (
        "relative_hf_home",
        {"hf_home": "data/hf_home"},
        "hf_home must be an absolute path (starting with /), got 'data/hf_home'",
    ),
    (
        "dotdot_hf_home",
        {"hf_home": "/data/../etc"},
        "hf_home must be an absolute path without '..', got '/data/../etc'",
    ),
    ("relative_hub_cache", {"hub_cache": "hub"}, "hub_cache must be an absolute path (starting with /), got 'hub'"),
    (
        "token_newline",
        {"token": TOKEN + "\nX-Evil: 1"},
        "token must be the secret alone, without spaces, line breaks or "
        "other characters a token cannot have (the value is not shown)",
    ),
    ("timeout_zero", {"timeout": 0}, "timeout must be a whole number of seconds from 1 to 3600, got 0"),
    (
        "lock_timeout_negative",
        {"lock_timeout": -1},
        "lock_timeout must be a whole number of seconds from 0 to 604800, got -1",
    ),
    ("retries_zero", {"retries": 0}, "retries must be a whole number from 1 to 100, got 0"),
    (
        "bad_repo",
        {"models": ["../../etc"]},
        "models[0]: repo '../../etc' is not a Hugging Face repository id (org/name: "
        "letters, digits, '_', '-', '.'; no '--' or '..')",
    ),
]


@pytest.mark.parametrize("label,args,expected", MODULE_REFUSED, ids=[r[0] for r in MODULE_REFUSED])
def test_the_module_refuses_before_any_request(label, args, expected, hub, tmp_path, module_runner):
    from ansible_collections.rlinfra.verl.plugins.modules import hf_prefetch as module

    params = dict(models=["org/tiny"], hf_home=str(tmp_path / "hf"), endpoint=hub.url, token=TOKEN)
    params.update(args)
    out = module_runner(module.main, params)
    assert out["failed"] is True and out["msg"] == expected and not out.get("changed")
    assert hub.requests == [] and not (tmp_path / "hf").exists()
    assert TOKEN not in json.dumps(out) and "s3cr3t" not in json.dumps(out)


def test_the_module_fetches_into_the_cache(hub, tmp_path, module_runner):
    from ansible_collections.rlinfra.verl.plugins.modules import hf_prefetch as module

    params = dict(
        models=[{"repo": "org/tiny", "allow_patterns": "*.json"}],
        hf_home=str(tmp_path / "hf"),
        endpoint=hub.url,
        token=TOKEN,
    )
    out = module_runner(module.main, params)
    assert out["changed"] is True and out["items"][0]["status"] == "downloaded", out
    assert module_runner(module.main, params)["changed"] is False and TOKEN not in json.dumps(out)


def test_hf_home_off_the_shared_volume_is_refused(tmp_path):
    """The prefetch runs on the head: a cache on a disk of the head alone helps no other node. Same file system as
    the checkpoints, or a network file system: fine. /proc stands for a different, local file system here."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.verl import hf_prefetch as HP

    mounts = tmp_path / "mounts"
    mounts.write_text("/dev/vda / ext4 rw 0 0\nproc /proc proc rw 0 0\n")
    shared = tmp_path / "data" / "checkpoints"
    assert HP.not_shared(str(tmp_path / "data" / "hf_home"), str(shared), str(mounts)) is None
    assert HP.not_shared("/proc/hf_home", str(shared), str(mounts)) == (
        "prefetch: HF_HOME /proc/hf_home is on proc (/proc), not on the shared volume (%s is on ext4 at /): the job's "
        "other nodes would not find the files; set env.HF_HOME under / (e.g. /hf_home)" % shared
    )
    mounts.write_text("/dev/vda / ext4 rw 0 0\nnfs-1:/hf /proc nfs4 rw 0 0\n")
    assert HP.not_shared("/proc/hf_home", str(shared), str(mounts)) is None


def test_a_redirects_signed_url_is_not_repeated():
    """urllib's refusal of a redirect repeats its URL, whose query (a CDN signature) is a credential for the file."""
    from urllib.error import HTTPError

    e = HTTPError(
        "https://cdn.example/f",
        302,
        "Found - Redirection to url 'ftp://cdn.example/f?Expires=1&Signature=s3cr3tSig&Key-Pair-Id=K' is not allowed",
        {},
        None,
    )
    hub = hp.Hub("https://huggingface.co", "")
    line = hub._http_line({"kind": "model", "repo": "org/m", "revision": "main"}, e)
    assert "s3cr3tSig" not in line and "ftp://cdn.example/f?********" in line, line
