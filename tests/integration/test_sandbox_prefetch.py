"""An experiment's ``prefetch``: a private model and a dataset fetched once into HF_HOME on the shared volume.

A stand-in for the Hub's download endpoints (tests/fake_hf_hub/server.py, its "CDN" on a second port) runs on one
worker's container; the experiment names it in env.HF_ENDPOINT, its HF_TOKEN comes from the controller's
environment. submit.yml runs as users run it, on the real sandbox cluster:

0. a dry run lists what would be fetched and asks the Hub nothing;
1. the head downloads each file once (the fake Hub's log: one download per file, the token on every Hub request
   and on none to the CDN), and the job, started by Ray, reads the files through the cache path its HF_HOME names;
2. a second run downloads nothing ("already in the cache");
3. a refused token stops the run with one line before anything is submitted (the head's job list is unchanged);
4. with the Hub gone, the cached commit is used, said in one line, and the job runs.
No token value reaches Ansible's output.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import subprocess
import time
import urllib.request

import yaml

from tests.integration.conftest import ROOT, sandbox_nodes, sandbox_playbook

TAG = secrets.token_hex(4)
TOKEN = "hf_FAKE_prefetch_" + secrets.token_hex(12)
HF_HOME = "/data/hf-prefetch-" + TAG
PORT, CDN_PORT = 18080, 18081
WEIGHTS = bytes(range(256)) * 2048
MODEL = {
    "config.json": '{"model_type": "qwen2", "tag": "%s"}' % TAG,
    "tokenizer.json": '{"v": 1}',
    "model.safetensors": WEIGHTS,
}
DATA = {"main/train.parquet": "P" * 4000, "README.md": "# tiny"}
READ = (
    "d=$HF_HOME/hub/models--rlinfra-test--tiny; c=$(cat $d/refs/main); cat $d/snapshots/$c/config.json; echo; "
    "sha256sum $d/snapshots/$c/model.safetensors; "
    "wc -c < $HF_HOME/hub/datasets--rlinfra-test--gsm/snapshots/$(cat $HF_HOME/hub/datasets--rlinfra-test--gsm/refs/main)/main/train.parquet"
)


def on_node(node, script, check=True):
    proc = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert not check or proc.returncode == 0, proc.stderr
    return proc.stdout


def playbook(name, *extra, token=TOKEN):
    return sandbox_playbook(name, *extra, env={"HF_TOKEN": token})


def hub_log(url):
    with urllib.request.urlopen(url + "/_fake/requests", timeout=10) as resp:
        return json.load(resp)


def downloads(log):
    hub = [
        r for r in log["requests"] if r["method"] == "GET" and "/resolve/" in r["path"] and r["status"] in (200, 206)
    ]
    return hub + [r for r in log["cdn"] if r["method"] == "GET"]


def shown(text, output):
    return text in " ".join(output.split())


def test_prefetch_once_then_from_the_cache(sandbox, tmp_path):
    nodes = sandbox_nodes()
    head = next(n["name"] for n in nodes if n["role"] == "head")
    hub_node = next(n for n in nodes if n["role"] == "worker")
    if on_node(head, "systemctl is-active ray-head", check=False).strip() != "active":
        site = playbook("site.yml")
        assert site.returncode == 0, site.output[-4000:]
    url = "http://%s:%d" % (hub_node["ip"], PORT)

    spec = {
        "token": TOKEN,
        "repos": [
            {
                "kind": "model",
                "repo": "rlinfra-test/tiny",
                "private": True,
                "files": {
                    p: ("b64:" + __import__("base64").b64encode(v).decode()) if isinstance(v, bytes) else v
                    for p, v in MODEL.items()
                },
            },
            {"kind": "dataset", "repo": "rlinfra-test/gsm", "files": DATA},
        ],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    on_node(hub_node["name"], "mkdir -p /tmp/fakehub-%s" % TAG)
    for f in (ROOT / "tests" / "fake_hf_hub" / "server.py", tmp_path / "spec.json"):
        subprocess.run(["docker", "cp", str(f), "%s:/tmp/fakehub-%s/" % (hub_node["name"], TAG)], check=True)
    subprocess.run(
        [
            "docker",
            "exec",
            "-d",
            hub_node["name"],
            "python3",
            "/tmp/fakehub-%s/server.py" % TAG,
            "--host",
            "0.0.0.0",
            "--port",
            str(PORT),
            "--cdn-port",
            str(CDN_PORT),
            "--public-host",
            hub_node["ip"],
            "--spec",
            "/tmp/fakehub-%s/spec.json" % TAG,
        ],
        check=True,
    )

    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    (exp_dir / "prefetch_probe.yml").write_text(
        yaml.safe_dump(
            {
                "framework": "custom",
                "entrypoint": {"command": READ},
                "env": {"HF_HOME": HF_HOME, "HF_ENDPOINT": url},
                "secrets": ["HF_TOKEN"],
                "prefetch": {"models": ["rlinfra-test/tiny"], "datasets": ["rlinfra-test/gsm"]},
                "wait": {"timeout": 300, "poll_interval": 1},
            }
        )
    )
    common = (
        "exp=prefetch_probe",
        "verl_job_experiments_dir=" + str(exp_dir),
        "verl_job_artifacts_dir=" + str(tmp_path / "artifacts"),
    )
    try:
        for _ in range(50):
            try:
                hub_log(url)
                break
            except OSError:
                time.sleep(0.2)

        # 0. A dry run lists what would be fetched and asks the Hub nothing.
        dry = playbook("submit.yml", *common, "run=0-" + TAG, "dry_run=true")
        assert shown("- model rlinfra-test/tiny@main into %s/hub" % HF_HOME, dry.output), dry.output[-3000:]
        asked = hub_log(url)
        assert all(r["path"] == "/_fake/requests" for r in asked["requests"]) and not asked["cdn"], asked

        # 1. Downloaded once, by the head; the job reads it through its HF_HOME.
        first = playbook("submit.yml", *common, "run=1-" + TAG)
        assert first.returncode == 0, first.output[-4000:]
        assert shown("model rlinfra-test/tiny@main (commit ", first.output) and shown(
            "3 files): downloaded 3 files", first.output
        )
        assert shown("dataset rlinfra-test/gsm@main (commit ", first.output), first.output[-3000:]
        log = hub_log(url)
        got = sorted(r["file"] for r in downloads(log))
        assert got == sorted(list(MODEL) + list(DATA)), got  # each file once
        assert all(r["token_ok"] for r in log["requests"] if "/rlinfra-test/tiny" in r["path"])
        assert log["cdn"] and not any(r["auth"] for r in log["cdn"])
        driver = (tmp_path / "artifacts" / "prefetch_probe").glob("*.log")
        text = "\n".join(p.read_text() for p in driver)
        assert MODEL["config.json"] in text and hashlib.sha256(WEIGHTS).hexdigest() in text and "4000" in text, text[
            -2000:
        ]
        files = on_node(head, "find %s -type f -o -type l | sort" % HF_HOME)
        assert TOKEN not in on_node(head, "grep -rl '%s' %s || true" % (TOKEN, HF_HOME)) and files

        # 2. Already there: nothing downloaded.
        second = playbook("submit.yml", *common, "run=2-" + TAG)
        assert second.returncode == 0, second.output[-4000:]
        assert shown("already in the cache, nothing downloaded", second.output)
        assert len(downloads(hub_log(url))) == len(got)

        # 3. A refused token: one line, nothing submitted.
        jobs_before = on_node(head, "ls /tmp/ray/session_latest/logs | grep -c job-driver || true")
        refused = playbook("submit.yml", *common, "run=3-" + TAG, token="hf_FAKE_wrong")
        assert refused.returncode != 0
        assert shown("prefetch: model rlinfra-test/tiny@main: the Hub at %s answered 401" % url, refused.output), (
            refused.output[-3000:]
        )
        assert shown("token was refused", refused.output) and "Traceback" not in refused.output
        assert "rlinfra-prefetch_probe-default-3-" + TAG not in refused.output.split("prefetch:")[-1]
        assert on_node(head, "ls /tmp/ray/session_latest/logs | grep -c job-driver || true") == jobs_before

        # 4. The Hub gone: the cached commit is used and said so; the job runs.
        on_node(hub_node["name"], "pkill -f fakehub-%s" % TAG, check=False)
        offline = playbook("submit.yml", *common, "run=4-" + TAG)
        assert offline.returncode == 0, offline.output[-4000:]
        assert shown("could not reach the Hub at %s" % url, offline.output) and shown(
            "using the cached commit", offline.output
        )
        for proc in (first, second, refused, offline):
            assert TOKEN not in proc.output
    finally:
        on_node(hub_node["name"], "pkill -f fakehub-%s; rm -rf /tmp/fakehub-%s" % (TAG, TAG), check=False)
        on_node(head, "rm -rf %s" % HF_HOME, check=False)
