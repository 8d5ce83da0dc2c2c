"""rlinfra.verl.ray_node_logs and module_utils/ray/node_logs.py: which files of a node belong to a job,
bounded tails, secrets masked in the bytes before they are packed, the bundle's modes."""

from __future__ import annotations

import http.server
import io
import json
import os
import stat
import tarfile
import threading

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import node_logs as N
from ansible_collections.rlinfra.verl.plugins.modules import ray_node_logs

SID = "rlinfra-smoke-default"
JOB = "02000000"
OTHER_JOB = "03000000"
W1, W2, W3 = "a1" * 28, "b2" * 28, "c3" * 28  # worker ids (56 hex)
SECRET = "hf_FAKE_unit_5b1d9f0c2e"
TOKEN = "rayTOKENunit0123456789abcdefABCDEF0123"
ENV_SECRET = "wandb_FAKE_unit_77aa"


def write(path, data, mtime=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())
    if mtime:
        os.utime(path, (mtime, mtime))


@pytest.fixture
def node(tmp_path):
    """A node's Ray temp dir with an older session (the job ran there too) and the newest one."""
    temp = tmp_path / "ray"
    old = temp / "session_2026-01-01_00-00-00_000000_1"
    new = temp / "session_2026-01-02_00-00-00_000000_2"
    for name in ("raylet.out", "raylet.err", "gcs_server.out"):
        write(str(old / "logs" / name), "old %s\n" % name, mtime=1000)
        write(str(new / "logs" / name), "new %s\n" % name, mtime=2000)
    logs = new / "logs"
    write(str(logs / ("job-driver-%s.log" % SID)), "step:1 - reward:0.1\nHF_TOKEN=%s leaked by the job\n" % SECRET)
    write(str(logs / ("job-driver-%s-a2.log" % SID)), "another attempt\n")
    write(str(logs / ("worker-%s-%s-11.out" % (W1, JOB))), "actor says %s\n" % json.dumps({"tok": TOKEN}))
    write(str(logs / ("worker-%s-%s-11.err" % (W1, JOB))), "")
    write(str(logs / ("python-core-worker-%s_11.log" % W1)), "core worker of the job\n")
    write(str(logs / "old" / ("worker-%s-%s-12.out" % (W2, JOB))), "a dead worker of the job (moved to old/)\n")
    write(str(logs / ("worker-%s-%s-13.out" % (W3, OTHER_JOB))), "another job's worker\n")
    write(str(logs / ("python-core-worker-%s_13.log" % W3)), "another job's core worker\n")
    write(
        str(logs / ("python-core-driver-%sffffffffffffffffffffffffffffffffffffffffffffffff_9.log" % JOB)), "drv core\n"
    )
    write(
        str(logs / ("runtime_env_setup-%s.log" % JOB)),
        'runtime_env {"env_vars": {"WANDB_API_KEY": "%s"}}\n' % ENV_SECRET,
    )
    write(str(logs / "runtime_env_agent.log"), "every job's env: %s\n" % SECRET)
    write(str(logs / "dashboard.log"), "dashboard\n")
    os.symlink(str(logs / "raylet.out"), str(logs / ("worker-%s-%s-14.out" % (W1, JOB))))
    write(str(old / "logs" / ("job-driver-%s.log" % SID)), "the run before the node restarted\n", mtime=1000)
    os.symlink(str(new), str(temp / "session_latest"))
    conf = tmp_path / "etc"
    write(str(conf / "auth_token"), TOKEN + "\n")
    write(str(conf / "ray-secrets.env"), "# managed\nWANDB_API_KEY=%s\n" % json.dumps(ENV_SECRET))
    return dict(temp=str(temp), new=str(new), old=str(old), token=str(conf / "auth_token"), tmp=tmp_path)


def members(bundle):
    with tarfile.open(bundle) as tar:
        return {m.name: m for m in tar.getmembers()}, {
            m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()
        }


# --- module_utils --------------------------------------------------------------------------------


def test_secret_variants_add_the_json_escaped_form_longest_first():
    out = N.secret_variants(['a"b\\c', "", None, "  ", "xyz"])
    assert out[0] == b'a\\"b\\\\c' and b'a"b\\c' in out and b"xyz" in out and b"" not in out


def test_redact_known_values_and_values_named_like_secrets():
    data = (
        b'plain hf_S3CRET, json {"HF_TOKEN": "hf_S3CRET", "OTHER_API_KEY": "unknown-value", "x": "y"}\n'
        b"env MY_PASSWORD=pw123 sorted(key=lambda k: k) Authorization: Bearer abcdefgh12345\n"
    )
    out, count = masking.redact_bytes(data, N.secret_variants(["hf_S3CRET"]), N.name_maskers())
    assert (
        b"hf_S3CRET" not in out and b"unknown-value" not in out and b"pw123" not in out and b"abcdefgh12345" not in out
    )
    assert b'"x": "y"' in out and b"sorted(key=lambda k: k)" in out
    assert count == 5
    again, count2 = masking.redact_bytes(out, N.secret_variants(["hf_S3CRET"]), N.name_maskers())
    assert again == out and count2 == 0
    assert masking.redact_bytes(data, [], N.name_maskers(""))[1] == 0


def test_partial_secret_at_the_end_of_a_growing_file_is_masked():
    variants = N.secret_variants(["hf_ABCDEF"])
    assert masking.mask_partial_tail(b"line\nvalue hf_AB", variants) == (b"line\nvalue ********", 1)
    assert masking.mask_partial_tail(b"line\nvalue hf_AB\n", variants)[1] == 0
    assert masking.mask_partial_tail(b"nothing here", variants)[1] == 0


def test_a_cut_never_leaves_a_piece_of_a_secret(tmp_path):
    secret = "hf_CUTCUTCUT_0123456789"
    path = str(tmp_path / "log")
    body = ("x" * 50 + "\n") + ("token=%s tail of the line\n" % secret) + ("y" * 40 + "\n")
    write(path, body)
    variants = N.secret_variants([secret])
    for limit in range(1, len(body) + 1):
        raw, size, truncated = N.read_tail(path, limit)
        assert size == len(body) and truncated == (limit < len(body))
        if truncated:
            raw = N.cut_to_line(raw, max(len(v) for v in variants))
        out, _ = masking.redact_bytes(raw, variants)
        out, _ = masking.mask_partial_tail(out, variants)
        pieces = {secret[i : i + 6] for i in range(len(secret) - 5)}
        assert not [p for p in pieces if p.encode() in out], (limit, out)


def test_a_cut_without_newline_drops_as_much_as_the_longest_secret():
    assert N.cut_to_line(b"abcdefgh", 4) == b"defgh"
    assert N.cut_to_line(b"ab\ncd", 4) == b"cd"


def test_env_file_values(tmp_path):
    path = str(tmp_path / "ray-secrets.env")
    write(path, '# x\nA="one"\nB=two\nC=""\nbroken line\nD="with \\"quote\\""\n')
    assert N.read_env_file_values(path) == ["one", "two", 'with "quote"']
    assert N.read_env_file_values(str(tmp_path / "missing")) == []


def test_job_files_are_told_apart_by_submission_id_and_job_id():
    names = [
        "job-driver-%s.log" % SID,
        "job-driver-%s-a2.log" % SID,
        "worker-%s-%s-1.out" % (W1, JOB),
        "worker-%s-%s-1.err" % (W1, JOB),
        "worker-%s-%s-2.out" % (W3, OTHER_JOB),
        "python-core-worker-%s_1.log" % W1,
        "python-core-worker-%s_2.log" % W3,
        "python-core-driver-%sffffffff_5.log" % JOB,
        "python-core-driver-%sffffffff_6.log" % OTHER_JOB,
        "runtime_env_setup-%s.log" % JOB,
        "runtime_env_setup-%s.log" % OTHER_JOB,
        "raylet.out",
    ]
    assert sorted(N.job_file_names(names, SID, JOB)) == sorted(
        [
            "job-driver-%s.log" % SID,
            "worker-%s-%s-1.out" % (W1, JOB),
            "worker-%s-%s-1.err" % (W1, JOB),
            "python-core-worker-%s_1.log" % W1,
            "python-core-driver-%sffffffff_5.log" % JOB,
            "runtime_env_setup-%s.log" % JOB,
        ]
    )
    assert N.job_file_names(names, SID + "-a2", None) == ["job-driver-%s-a2.log" % SID]


def test_plan_takes_the_newest_session_and_older_ones_where_the_job_ran(node):
    entries = N.plan(node["temp"], SID, JOB)
    names = [e["name"] for e in entries]
    old = os.path.basename(node["old"]) + "/"
    assert set(names) == {
        "raylet.out",
        "raylet.err",
        "gcs_server.out",
        "job-driver-%s.log" % SID,
        "runtime_env_setup-%s.log" % JOB,
        "worker-%s-%s-11.out" % (W1, JOB),
        "worker-%s-%s-11.err" % (W1, JOB),
        "python-core-worker-%s_11.log" % W1,
        "worker-%s-%s-12.out" % (W2, JOB),
        "python-core-driver-%s%s_9.log" % (JOB, "f" * 48),
        old + "raylet.out",
        old + "raylet.err",
        old + "gcs_server.out",
        old + "job-driver-%s.log" % SID,
    }
    # Daemon logs, driver and runtime_env first; the older session last; the symlink never followed.
    assert names.index("job-driver-%s.log" % SID) < names.index("worker-%s-%s-11.out" % (W1, JOB))
    assert all(n.startswith(old) for n in names[-4:])
    assert not [n for n in names if n.endswith("-14.out")]
    # Without the job id: no worker logs; an older session without the job is left out.
    bare = [e["name"] for e in N.plan(node["temp"], SID + "-a2", None)]
    assert set(bare) == {"raylet.out", "raylet.err", "gcs_server.out", "job-driver-%s-a2.log" % SID}


def test_plan_of_a_node_where_ray_never_ran(tmp_path):
    assert N.plan(str(tmp_path / "none"), SID, JOB) == []
    assert N.sessions(str(tmp_path / "none")) == (None, [])


def test_collect_keeps_within_the_budgets_and_masks(node):
    entries = N.plan(node["temp"], SID, JOB)
    variants = N.secret_variants([SECRET, TOKEN, ENV_SECRET])
    files, skipped, blobs = N.collect(
        entries, variants, max_file_bytes=20, max_total_bytes=10**6, kernel="kernel line\n", maskers=N.name_maskers()
    )
    assert files[0]["name"] == N.KERNEL_FILE and blobs[N.KERNEL_FILE] == b"kernel line\n"
    assert all(len(b) <= 20 for b in blobs.values()) and not skipped
    assert [f for f in files if f["truncated"]]
    files, skipped, blobs = N.collect(entries, variants, max_file_bytes=10**6, max_total_bytes=300)
    assert skipped and all(s["reason"] == "node budget reached" for s in skipped)
    assert sum(len(b) for b in blobs.values()) <= 300
    for data in blobs.values():
        assert SECRET.encode() not in data and TOKEN.encode() not in data and ENV_SECRET.encode() not in data


def test_pack_modes_root_and_manifest(tmp_path):
    bundle = str(tmp_path / "b.tar.gz")
    N.pack(bundle, {"raylet.out": b"r\n", "session_x/raylet.out": b"o\n"}, {"files": []}, root="node-1")
    assert oct(os.stat(bundle).st_mode & 0o777) == "0o600"
    info, data = members(bundle)
    assert set(info) == {
        "node-1",
        "node-1/session_x",
        "node-1/raylet.out",
        "node-1/session_x/raylet.out",
        "node-1/MANIFEST.json",
    }
    assert all(m.mode == (0o700 if m.isdir() else 0o600) and (m.isdir() or m.isfile()) for m in info.values())
    assert json.loads(data["node-1/MANIFEST.json"]) == {"files": []}


def _runner(responses):
    calls = []

    def run(argv):
        calls.append(os.path.basename(argv[0]) + (" -T" if "-T" in argv else ""))
        return responses[calls[-1]]

    return run, calls


def test_kernel_log_falls_back_to_journalctl_and_tolerates_nothing():
    which = {"dmesg": "/bin/dmesg", "journalctl": "/bin/journalctl"}.get
    run, calls = _runner(
        {
            "dmesg -T": (1, "", "dmesg: read kernel buffer failed: Operation not permitted"),
            "journalctl": (0, "a\nb\nOOM killed process 12\n", ""),
        }
    )
    text, source, notes = N.kernel_log(run, 2, which)
    assert text == "b\nOOM killed process 12\n" and source == "journalctl -k"
    assert calls == ["dmesg -T", "journalctl"]  # plain dmesg is not tried after a permission error
    assert notes == ["dmesg: read kernel buffer failed: Operation not permitted"]
    run, calls = _runner(
        {
            "dmesg -T": (1, "", "dmesg: invalid option -- 'T'"),
            "dmesg": (0, "-- No entries --\n", ""),
            "journalctl": (0, "-- No entries --\n", ""),
        }
    )
    text, source, notes = N.kernel_log(run, 10, which)
    assert text is None and source is None and calls == ["dmesg -T", "dmesg", "journalctl"]
    assert N.kernel_log(run, 10, lambda name: None) == (None, None, ["neither dmesg nor journalctl is installed"])


# --- the module ----------------------------------------------------------------------------------


@pytest.fixture
def run_logs(node, module_runner, monkeypatch):
    monkeypatch.setattr(N, "FACT_PATH", str(node["tmp"] / "no-fact"))

    def run(check_mode=False, **options):
        args = dict(
            submission_id=SID,
            temp_dir=node["temp"],
            token_path=node["token"],
            kernel_lines=0,
            secret_values=[SECRET],
            dest_dir=str(node["tmp"] / "out"),
        )
        args.update(options)
        return module_runner(ray_node_logs.main, args, check_mode=check_mode)

    return run


def test_module_packs_the_job_with_every_secret_masked(node, run_logs):
    res = run_logs(job_id=JOB, bundle_root="rlinfra-sbx-1")
    assert res.get("failed") is not True, res
    assert res["changed"] is False and res["job_id"] == JOB and res["job_id_source"] == "given"
    assert res["driver_log"] == "job-driver-%s.log" % SID and res["session"] == os.path.realpath(node["new"])
    assert oct(os.stat(res["bundle_dir"]).st_mode & 0o777) == "0o700"
    info, data = members(res["bundle"])
    assert "rlinfra-sbx-1/raylet.out" in info and "rlinfra-sbx-1/worker-%s-%s-12.out" % (W2, JOB) in info
    assert not [n for n in info if "runtime_env_agent" in n or "dashboard" in n or OTHER_JOB in n]
    blob = b"".join(data.values())
    for value in (SECRET, TOKEN, ENV_SECRET):  # given, the node's token file, the node's secret env file
        assert value.encode() not in blob
    assert b"HF_TOKEN=******** leaked by the job" in data["rlinfra-sbx-1/job-driver-%s.log" % SID]
    manifest = json.loads(data["rlinfra-sbx-1/MANIFEST.json"])
    assert manifest["job_id"] == JOB and res["redactions"] >= 3
    text = json.dumps(res)
    assert SECRET not in text and TOKEN not in text and ENV_SECRET not in text


def test_module_check_mode_lists_and_writes_nothing(node, run_logs):
    res = run_logs(check_mode=True, job_id=JOB)
    assert res.get("failed") is not True, res
    assert "bundle" not in res and not (node["tmp"] / "out").exists()
    assert "worker-%s-%s-11.out" % (W1, JOB) in [f["name"] for f in res["files"]]


def test_module_without_job_id_leaves_worker_logs_out(run_logs):
    res = run_logs()
    assert res.get("failed") is not True, res
    assert res["job_id"] is None and any("worker logs left out" in n for n in res["notes"])
    assert not [f for f in res["files"] if f["name"].startswith("worker-")]


@pytest.mark.parametrize(
    "options, message",
    [
        (
            dict(job_id="02;rm"),
            "job_id must be a hex Ray job id (e.g. 02000000, the job_id of GET /api/jobs/<id>), got '02;rm'",
        ),
        (
            dict(submission_id="../etc"),
            "submission_id must be a Ray submission id (letters, digits, '_', '.', ':', '-', "
            "starting with a letter or digit), got '../etc'",
        ),
        (
            dict(bundle_root="../x"),
            "bundle_root must be a plain directory name (letters, digits, '.', '_', '-'; not . or ..), got '../x'",
        ),
        (dict(max_file_mib=0), "max_file_mib must be a number of MiB from 0.001 to 1024, got 0.0"),
        (dict(kernel_lines=-1), "kernel_lines must be a whole number from 0 to 1000000, got -1"),
        (
            dict(extra_patterns=["("]),
            "extra_patterns[0] must be a regular expression Python compiles (missing ), "
            "unterminated subpattern at position 0), got '('",
        ),
        # Valid alone, not inside the masking expressions it is embedded in.
        (
            dict(secret_name_pattern="(?i)TOKEN"),
            "secret_name_pattern must be a regular expression that still works inside "
            "another (global flags not at the start of the expression), got '(?i)TOKEN'",
        ),
    ],
)
def test_module_rejects_bad_options_in_one_line(run_logs, options, message):
    res = run_logs(**options)
    assert res["failed"] is True and res["msg"] == message


class _Jobs(http.server.BaseHTTPRequestHandler):
    answers = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        status, body = self.answers.get(self.path, (404, {"detail": "not found"}))
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def jobs_api():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Jobs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Jobs.answers = {"/api/jobs/" + SID: (200, {"submission_id": SID, "job_id": JOB, "status": "FAILED"})}
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_module_reads_the_job_id_from_the_jobs_api(run_logs, jobs_api):
    res = run_logs(address=jobs_api)
    assert res.get("failed") is not True, res
    assert res["job_id"] == JOB and res["job_id_source"] == "jobs_api"
    assert "worker-%s-%s-11.out" % (W1, JOB) in [f["name"] for f in res["files"]]
    res = run_logs(address=jobs_api, submission_id=SID + "-a9")
    assert res["job_id"] is None and any("does not know" in n for n in res["notes"])


def test_module_notes_a_kernel_log_it_cannot_read(run_logs, monkeypatch):
    monkeypatch.setattr(N, "kernel_log", lambda run, lines, which: (None, None, ["dmesg: Operation not permitted"]))
    res = run_logs(kernel_lines=10, job_id=JOB)
    assert res.get("failed") is not True and res["kernel_source"] is None
    assert "kernel log unavailable (dmesg: Operation not permitted)" in res["notes"]
    monkeypatch.setattr(
        N, "kernel_log", lambda run, lines, which: ("Out of memory: Killed process 7 (%s)\n" % SECRET, "dmesg -T", [])
    )
    res = run_logs(kernel_lines=10, job_id=JOB)
    info, data = members(res["bundle"])
    assert data[N.KERNEL_FILE] == b"Out of memory: Killed process 7 (********)\n"


def test_module_on_a_node_without_ray(tmp_path, module_runner, monkeypatch):
    monkeypatch.setattr(N, "FACT_PATH", str(tmp_path / "no-fact"))
    res = module_runner(
        ray_node_logs.main,
        dict(
            submission_id=SID,
            temp_dir=str(tmp_path / "gone"),
            kernel_lines=0,
            token_path=str(tmp_path / "no-token"),
            dest_dir=str(tmp_path / "o"),
        ),
    )
    assert res.get("failed") is not True, res
    assert res["files"] == [] and res["session"] is None and any("no Ray session" in n for n in res["notes"])
    info, _ = members(res["bundle"])
    assert set(info) == {N.MANIFEST_FILE}


def test_module_takes_temp_dir_and_token_from_the_local_fact(node, module_runner, monkeypatch):
    fact = node["tmp"] / "rlinfra_ray.fact"
    fact.write_text(json.dumps({"temp_dir": node["temp"], "token_path": node["token"]}))
    monkeypatch.setattr(N, "FACT_PATH", str(fact))
    res = module_runner(
        ray_node_logs.main, dict(submission_id=SID, job_id=JOB, kernel_lines=0, dest_dir=str(node["tmp"] / "o"))
    )
    assert res.get("failed") is not True, res
    assert res["temp_dir"] == node["temp"]
    _, data = members(res["bundle"])
    assert not [n for n, d in data.items() if TOKEN.encode() in d or ENV_SECRET.encode() in d]


def _tar(entries):
    """A tar.gz built by hand: (name, kind, payload) with kind file/dir/symlink/hardlink/fifo."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, kind, payload in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
            }[kind]
            info.linkname = payload or ""
            tar.addfile(info)
    return buf.getvalue()


def test_unpack_keeps_everything_inside_dest_and_private(tmp_path):
    dest = tmp_path / "exp" / "run" / "nodes"
    outside = tmp_path / "outside"
    outside.mkdir()
    data = _tar(
        [
            ("h1", "dir", None),
            ("h1/raylet.out", "file", b"ok\n"),
            ("h1/sub/gcs.log", "file", b"gcs\n"),
            ("../escape.txt", "file", b"x"),
            ("/etc/evil", "file", b"x"),
            ("h1/../../up.txt", "file", b"x"),
            ("h1/link", "symlink", str(outside)),
            ("h1/hard", "hardlink", "/etc/passwd"),
            ("h1/pipe", "fifo", None),
            ("h1/link/through.txt", "file", b"x"),
        ]
    )
    files, refused = N.unpack(data, str(dest))
    # The link itself is left out, so h1/link is a plain directory of dest when a file is put under it.
    assert sorted(files) == ["h1/link/through.txt", "h1/raylet.out", "h1/sub/gcs.log"]
    assert sorted(refused) == sorted(["../escape.txt", "/etc/evil", "h1/../../up.txt", "h1/link", "h1/hard", "h1/pipe"])
    assert (dest / "h1" / "raylet.out").read_bytes() == b"ok\n"
    assert (
        list(outside.iterdir()) == []
        and not (dest.parent / "escape.txt").exists()
        and not (dest.parent / "up.txt").exists()
    )
    for path in [tmp_path / "exp", dest.parent, dest, dest / "h1", dest / "h1" / "sub"]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
    for path in [dest / "h1" / "raylet.out", dest / "h1" / "sub" / "gcs.log"]:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_unpack_never_writes_through_a_link_left_in_dest(tmp_path):
    dest, outside = tmp_path / "nodes", tmp_path / "outside"
    (dest / "h1").mkdir(parents=True)
    outside.mkdir()
    os.symlink(str(outside / "stolen"), str(dest / "h1" / "raylet.out"))  # planted between two gatherings
    os.symlink(str(outside), str(dest / "h2"))
    files, refused = N.unpack(_tar([("h1/raylet.out", "file", b"new\n"), ("h2/x.log", "file", b"x")]), str(dest))
    assert files == ["h1/raylet.out"] and refused == ["h2/x.log"]
    assert not (outside / "stolen").exists() and not (outside / "x.log").exists()
    assert not os.path.islink(dest / "h1" / "raylet.out") and (dest / "h1" / "raylet.out").read_bytes() == b"new\n"


def test_node_logs_the_controller_cannot_keep_name_the_variable(tmp_path):
    """Under /proc (which fails for root too) the node's line was a bare 'the bundle could not be brought back:
    No such file or directory', naming no setting."""
    import base64

    from ansible_collections.rlinfra.verl.plugins.action import ray_node_logs as action

    calls = []

    def execute(module_name, module_args, task_vars):
        calls.append(module_name)
        if module_name == "ansible.legacy.slurp":
            return dict(content=base64.b64encode(_tar([("h1/raylet.out", "file", b"ok\n")])).decode())
        return {}

    act = object.__new__(action.ActionModule)
    act._execute_module = execute
    dest = "/proc/1/rlinfra-artifacts/gsm8k/rlinfra-gsm8k-default/nodes"
    out = act._bring(dict(bundle="/tmp/b.tgz", bundle_dir="/tmp/b"), dest, {})
    assert out == dict(
        fetched=False,
        fetch_error=(
            "verl_job_artifacts_dir %s: cannot write the node's logs (No such file or directory): set "
            "verl_job_artifacts_dir to another directory" % dest
        ),
    )
    assert calls == ["ansible.legacy.slurp", "ansible.legacy.file"]  # the node's bundle is removed all the same
    # A damaged bundle is still the bundle's fault, not the directory's.

    def damaged(module_name, module_args, task_vars):
        if module_name == "ansible.legacy.slurp":
            return dict(content=base64.b64encode(b"\x1f\x8b" + b"\x00" * 40).decode())
        return execute(module_name, module_args, task_vars)

    act._execute_module = damaged
    out = act._bring(dict(bundle="/tmp/b.tgz", bundle_dir="/tmp/b"), str(tmp_path / "nodes"), {})
    assert out["fetch_error"].startswith("the bundle could not be brought back: ")
