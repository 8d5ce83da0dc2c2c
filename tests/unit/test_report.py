"""The run report (module_utils/observe/report.py): one self-contained HTML page per run, written by ray_job_wait.

The curves come from real verl log lines (tests/unit/fixtures/verl_log_sample.txt) followed as the wait follows them
(verl/metrics.py's Follow); the page is read back with html.parser and its embedded JSON with json."""

from __future__ import annotations

import csv
import errno
import html.parser
import itertools
import json
import os
import random
import re
import stat
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.action import ray_job_wait as W
from ansible_collections.rlinfra.verl.plugins.module_utils.observe import report as R
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics
from ansible_collections.rlinfra.verl.plugins.plugin_utils import log_copy

SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "verl_log_sample.txt")
HOSTILE = "</script><img src=x onerror=alert(1)>"
T0 = 1700000000.0


class Page(html.parser.HTMLParser):
    """Tags, their attributes, and the text of each script and style element."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.scripts, self.styles, self.text, self.open = [], [], [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self.open = (tag, dict(attrs), [])

    def handle_endtag(self, tag):
        if self.open and tag == self.open[0]:
            (self.scripts if tag == "script" else self.styles).append((self.open[1], "".join(self.open[2])))
            self.open = None

    def handle_data(self, data):
        if self.open:
            self.open[2].append(data)
        else:
            self.text.append(data)


def parse(text):
    page = Page()
    page.feed(text)
    page.close()
    assert page.open is None
    return page


def followed(tmp_path, text, sid="rlinfra-gsm8k-default"):
    ticks = itertools.count(T0, 5)
    follow = verl_metrics.Follow(str(tmp_path / sid), clock=lambda: next(ticks))
    for line in text.splitlines(True):  # line by line: each step read at its own time
        follow.feed(line)
    follow.finish()
    follow.write()
    return follow


def sample_run(tmp_path, **extra):
    with open(SAMPLE) as f:
        follow = followed(tmp_path, f.read())
    events = [
        dict(event="node_lost", node="gpu-1 (10.0.0.6)", at_s=20.0),
        dict(
            event="resubmitted",
            after="node_lost",
            detected_s=25.0,
            submitted_s=90.5,
            attempt=2,
            resume_step=34,
            first_step_s=200.0,
        ),
    ]
    marks = [dict(event="node_back", node="gpu-1 (10.0.0.6)", at_s=80.0)]
    rows = [
        dict(
            attempt=1,
            submission_id="rlinfra-gsm8k-default",
            status="STOPPED",
            why="node_lost",
            last_step=83,
            start_time="2023-11-14T22:13:10.000Z",
            end_time="2023-11-14T22:14:00.000Z",
        )
    ]
    util = {
        kind: {
            "gpu-0": [(T0 + 15 * i, 10.0 + i) for i in range(20)],
            "gpu-1": [(T0 + 15 * i, None if i == 3 else 50.0) for i in range(20)],
        }
        for kind in ("cpu", "memory", "gpu", "gpu_memory")
    }
    run = dict(
        experiment="gsm8k",
        submission_id="rlinfra-gsm8k-default",
        status="SUCCEEDED",
        attempts=rows,
        code=dict(repo="https://github.com/volcengine/verl", ref="main", commit="0123abcd"),
        fingerprint="sha256:feed",
        image=None,
        nodes=["gpu-0", "gpu-1"],
        gpus="16 (2 node(s) x 8)",
        cost=dict(seconds=3600.0, gpu_hours=16.0, cost=51.04, cost_per_hour=51.04, nodes=2, priced=2),
        curves=[R.attempt_curves(1, "rlinfra-gsm8k-default", follow)],
        utilisation=util,
        events=R.events_from_watch(events, marks, T0, rows),
        logs=[("rlinfra-gsm8k-default.log", "rlinfra-gsm8k-default.log")],
        node_logs=[("gpu-0", "nodes/gpu-0/")],
        watch_started=T0,
        generated_at=T0 + 4000,
        final=True,
    )
    run.update(extra)
    return run, follow


def page_data(page):
    data = [body for attrs, body in page.scripts if attrs.get("type") == "application/json"]
    assert len(data) == 1
    return json.loads(data[0])


def test_the_page_holds_every_metric_node_and_event(tmp_path):
    run, follow = sample_run(tmp_path)
    text = R.build(run)
    page = parse(text)
    data = page_data(page)
    with open(str(tmp_path / "rlinfra-gsm8k-default.metrics.csv")) as f:
        header = next(csv.reader(f))[1:]
    assert sorted(data["metrics"]) == sorted(header) and len(header) > 30
    # The plot's panels first, in PANELS order: reward, then loss.
    assert data["metrics"][:2] == ["critic/score/mean", "actor/pg_loss"]
    steps, times, values = data["curves"][0]["series"]["critic/score/mean"]
    assert steps == [2, 5, 34, 83] and values[0] == 0.011
    assert times == [follow.seen_at[s] for s in steps] and times == sorted(times) and times[0] > T0
    # One line per node in each utilisation chart; a NaN is a gap (null).
    assert [u["kind"] for u in data["util"]] == ["cpu", "memory", "gpu", "gpu_memory"]
    for chart in data["util"]:
        assert chart["nodes"] == ["gpu-0", "gpu-1"] and len(chart["series"]) == 2
        assert chart["series"][1][1][3] is None and chart["series"][0][0][0] == T0
    # Events at absolute times: the watch began at T0; the attempt's own times are Ray's.
    got = [(e["t"], e["kind"]) for e in data["events"]]
    assert (T0 + 20, "node_lost") in got and (T0 + 25, "recovery") in got and (T0 + 80, "node_back") in got
    assert (T0 + 90.5, "resubmitted") in got and (T0 + 200, "first_step") in got
    assert (R.epoch("2023-11-14T22:13:10.000Z"), "attempt_start") in got
    assert [t for t, dummy in got] == sorted(t for t, dummy in got)
    assert "attempt 2 submitted, resumes from checkpoint step 34" in text
    # node_lost at T0 + 20, in the events table
    assert "<td>2023-11-14 22:13:40 UTC</td><td>node gpu-1 (10.0.0.6) left the cluster</td>" in text
    # The header: known values only, never "None".
    assert "None" not in "".join(page.text) and "GPU-hours" in text and "$51.04" in text
    assert "https://github.com/volcengine/verl@0123abcd (ref main)" in text
    # Links are relative: the driver log and the per-node logs.
    hrefs = [a.get("href") for tag, a in page.tags if tag == "a"]
    assert hrefs == ["rlinfra-gsm8k-default.log", "nodes/gpu-0/"]


def test_nothing_is_fetched_from_anywhere(tmp_path):
    text = R.build(sample_run(tmp_path)[0])
    page = parse(text)
    for tag, attrs in page.tags:
        for name in ("src", "href", "action", "data", "poster", "srcset"):
            value = (attrs.get(name) or "").strip().lower()
            assert not re.match(r"^([a-z][a-z0-9+.-]*:|//)", value), (tag, name, value)
    assert not [
        t for t, a in page.tags if t in ("link", "img", "iframe", "object", "embed") or (t == "script" and "src" in a)
    ]
    for _dummy, css in page.styles:
        assert not re.search(r"url\(|@import", css)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and csp[0].startswith("default-src 'none'")


def test_a_hostile_name_is_text_everywhere(tmp_path):
    run, follow = sample_run(tmp_path, experiment=HOSTILE, nodes=[HOSTILE], status=HOSTILE)
    run["utilisation"] = {"cpu": {HOSTILE: [(T0, 1.0)]}}
    run["events"] = [dict(at=T0, kind="node_lost", text="node %s left the cluster" % HOSTILE)]
    run["curves"][0]["metrics"].append((HOSTILE, [(1, T0, 1.0)]))
    text = R.build(run)
    assert HOSTILE not in text and "<img" not in text
    page = parse(text)
    assert [t for t, a in page.tags if t == "img"] == []
    assert HOSTILE in "".join(page.text)  # shown, as text
    data = page_data(page)  # the script element ended where the page meant it to
    assert HOSTILE in data["metrics"] and data["util"][0]["nodes"] == [HOSTILE]
    assert len([a for a, body in page.scripts]) == 3


def test_written_0600_and_never_through_a_link(tmp_path):
    run = sample_run(tmp_path)[0]
    path = R.write(str(tmp_path), run)
    assert path == str(tmp_path / "report.html")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o644)
    R.write(str(tmp_path), run)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    os.unlink(path)
    os.symlink(str(target), path)
    with pytest.raises(OSError) as e:
        R.write(str(tmp_path), run)
    assert "symbolic link" in str(e.value)
    assert target.read_text() == "keep me" and os.path.islink(path)


def test_without_prometheus_one_line_says_why(tmp_path):
    run = sample_run(tmp_path, utilisation={}, utilisation_note="ray_metrics is false")[0]
    page = parse(R.build(run))
    assert "Node utilisation is not available: ray_metrics is false." in "".join(page.text)
    assert page_data(page)["util"] == []


def test_a_running_report_and_an_empty_one(tmp_path):
    run = sample_run(tmp_path, final=False, status="RUNNING", cost=None)[0]
    text = R.build(run)
    assert "still running" in text and "None" not in "".join(parse(text).text)
    empty = R.build(dict(experiment="x", submission_id="rlinfra-x-default", final=True, generated_at=T0))
    page = parse(empty)
    assert "No step printed yet." in "".join(page.text) and "None" not in "".join(page.text)
    assert page_data(page)["curves"] == []


def test_a_run_of_days_stays_a_few_megabytes(tmp_path):
    """20000 steps of 40 metrics (noise, so that thinning has to keep each column's extremes)."""
    rng = random.Random(7)
    keys = ["critic/score/mean", "actor/pg_loss"] + ["group%d/metric_%02d/mean" % (i % 5, i) for i in range(38)]
    lines = [
        "step:%d - %s\n" % (s, " - ".join("%s:%.6f" % (k, rng.gauss(0, 1) + s * 1e-4) for k in keys))
        for s in range(1, 20001)
    ]
    ticks = itertools.count(T0, 30)
    follow = verl_metrics.Follow(str(tmp_path / "long"), clock=lambda: next(ticks))
    for at in range(0, len(lines), 500):
        follow.feed("".join(lines[at : at + 500]))
    follow.write()
    util = {"gpu": dict(("node-%d" % n, [(T0 + 600 * i, 50.0) for i in range(1000)]) for n in range(16))}
    run = dict(
        experiment="long",
        submission_id="rlinfra-long-default",
        final=True,
        generated_at=T0 + 600000,
        curves=[R.attempt_curves(1, "rlinfra-long-default", follow)],
        utilisation=util,
    )
    text = R.build(run)
    data = page_data(parse(text))
    assert len(data["metrics"]) == 40
    assert all(len(s[0]) <= 4 * R.CURVE_WIDTH for s in data["curves"][0]["series"].values())
    # The last step is kept, and the extremes of the noise.
    steps, dummy, values = data["curves"][0]["series"]["actor/pg_loss"]
    assert steps[0] == 1 and steps[-1] == 20000
    assert len(text.encode("utf-8")) < 4 * 1024 * 1024, len(text)


def test_the_vendored_library_is_the_release():
    for name, digest in R.VENDOR_SHA256.items():
        assert R.checksum(name) == digest, name
    with open(os.path.join(R.VENDOR, "LICENSE")) as f:
        assert "MIT License" in f.read()
    with open(os.path.join(R.VENDOR, "README.md")) as f:
        readme = f.read()
    assert "1.6.32" in readme and all(d in readme for d in R.VENDOR_SHA256.values())


# --- through ray_job_wait ---------------------------------------------------------------------------------------


class FakeAction:
    class _connection:
        has_pipelining = False
        become = None

    def __init__(self, answers, metrics=None):
        self.answers = iter(answers)
        self.metrics = metrics
        self.queries = []

    def _execute_module(self, module_name, module_args, task_vars):
        if module_name == "rlinfra.verl.ray_metrics":  # the head's Prometheus, read for the report
            self.queries.append(dict(module_args))
            return self.metrics or {"failed": True, "msg": "no Prometheus on this node"}
        return next(self.answers)


def test_the_wait_writes_the_report_and_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(W.time, "sleep", lambda s: None)
    with open(SAMPLE) as f:
        log = f.read()
    half = log.index("(TaskRunner pid=16292) step:2")
    base = dict(
        reachable=True,
        found=True,
        address="http://10.0.0.5:8265",
        nodes=[],
        submission_id="rlinfra-x-default",
        start_time="2023-11-14T22:13:10.000Z",
        log_file_id="f1",
    )
    answers = [
        dict(base, status="RUNNING", log_offset=half, log_chunk=log[:half], log_size=half),
        dict(
            base,
            status="SUCCEEDED",
            log_offset=len(log),
            log_chunk=log[half:],
            log_size=len(log),
            end_time="2023-11-14T22:20:00.000Z",
            duration_s=410.0,
        ),
    ]
    spec = {k: v.get("default") for k, v in W.ARGUMENT_SPEC.items()}
    spec.update(
        submission_id="rlinfra-x-default",
        poll_interval=0.1,
        log_dir=str(tmp_path / "run"),
        label="x",
        progress_interval=1,
        hosts=["gpu-0"],
        left_out=[
            "left out:      gpu-1 (fitness.yml, 20231114T221000Z): gpu-1 GPU 3: Xid 79 (GPU has fallen off the bus)"
        ],
    )
    series = {
        "cpu": {"gpu-0": [[1700000000.0, 12.5], [1700000015.0, 80.0]]},
        "memory": {"gpu-0": [[1700000000.0, 40.0], [1700000015.0, 41.0]]},
    }
    action = FakeAction(answers, metrics={"changed": False, "lines": [], "problems": [], "series": series})
    w = W.Watch(action, spec, {"hostvars": {"gpu-0": {"hyperbolic_gpu_count": 8, "hyperbolic_cost_per_hour": 20.0}}})
    ticks = itertools.count(0, 10)
    w.clock = lambda: float(next(ticks))
    w.t0 = w.clock()
    w.run()
    result = w.result("succeeded", None)
    # artifacts/<exp>/<submission>/report.html: the run's own directory, where logs.yml puts the nodes' logs.
    path = str(tmp_path / "run" / "rlinfra-x-default" / "report.html")
    assert result["report_path"] == path and os.path.isfile(path)
    assert result["summary"][-1] == "report:        %s" % path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        page = parse(f.read())
    data = page_data(page)
    assert "critic/score/mean" in data["metrics"] and data["curves"][0]["series"]["critic/score/mean"][0][-1] == 83
    text = "".join(page.text)
    assert "SUCCEEDED" in text and "rlinfra-x-default.log" in text and "$2.28" in text  # 410 s of 1 node at $20/h
    # The worker fitness.yml left out, named in the header (its line without the summary's label).
    assert (
        "<th>left out</th><td>gpu-1 (fitness.yml, 20231114T221000Z): gpu-1 GPU 3: Xid 79 (GPU has fallen off the "
        "bus)</td>" in open(path).read()
    )
    hrefs = [a.get("href") for tag, a in page.tags if tag == "a"]
    assert hrefs == ["../rlinfra-x-default.log"], hrefs
    # The nodes' utilisation over the run, as the head's Prometheus gave it: read from the run's start (Ray's).
    assert [u["kind"] for u in data["util"]] == ["cpu", "memory"] and data["util"][0]["nodes"] == ["gpu-0"]
    assert action.queries and action.queries[-1]["state"] == "query"
    assert action.queries[-1]["start"] == R.epoch("2023-11-14T22:13:10.000Z")


def _short_run(tmp_path, monkeypatch, log_dir):
    """A job that runs then succeeds, watched with ``log_dir``; (the watch, its result, the lines it said)."""
    monkeypatch.setattr(W.time, "sleep", lambda s: None)
    with open(SAMPLE) as f:
        log = f.read()
    base = dict(
        reachable=True,
        found=True,
        address="http://10.0.0.5:8265",
        nodes=[],
        submission_id="rlinfra-x-default",
        start_time="2023-11-14T22:13:10.000Z",
        log_file_id="f1",
    )
    answers = [
        dict(base, status="RUNNING", log_offset=100, log_chunk=log[:100], log_size=100),
        dict(
            base,
            status="SUCCEEDED",
            log_offset=len(log),
            log_chunk=log[100:],
            log_size=len(log),
            end_time="2023-11-14T22:20:00.000Z",
            duration_s=410.0,
        ),
    ]
    spec = {k: v.get("default") for k, v in W.ARGUMENT_SPEC.items()}
    spec.update(submission_id="rlinfra-x-default", poll_interval=0.1, log_dir=log_dir, label="x", progress_interval=1)
    w = W.Watch(FakeAction(answers), spec, {})
    said = []
    w.say = said.append
    ticks = itertools.count(0, 10)
    w.clock = lambda: float(next(ticks))
    w.t0 = w.clock()
    w.run()
    return w, w.result("succeeded", None), said


def _errno_raiser(real, err, suffix):
    def fake(path, *args, **kwargs):
        if str(path).endswith(suffix):
            raise OSError(err, os.strerror(err), str(path))
        return real(path, *args, **kwargs)

    return fake


ON_RAY = "; the job's status above is Ray's own"


def test_artifacts_the_wait_cannot_write_name_the_variable_and_the_job_goes_on(tmp_path, monkeypatch):
    """Under /proc (which fails for root too) the wait said a bare '[Errno 2] ...' naming no setting."""
    w, result, said = _short_run(tmp_path, monkeypatch, "/proc/1/rlinfra-artifacts/x")
    line = (
        "verl_job_artifacts_dir /proc/1/rlinfra-artifacts/x: cannot write the driver log and metrics (No such file "
        "or directory): set verl_job_artifacts_dir to another directory" + ON_RAY
    )
    assert result["status"] == "SUCCEEDED" and result["artifacts_error"] == line and said.count(line) == 1
    assert "artifacts:     NOT SAVED - " + line in result["summary"]


def test_a_full_disk_under_the_driver_log_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(log_copy.os, "open", _errno_raiser(os.open, errno.ENOSPC, "rlinfra-x-default.log"))
    w, result, said = _short_run(tmp_path, monkeypatch, str(tmp_path / "run"))
    line = (
        "verl_job_artifacts_dir %s: cannot write the driver log (No space left on device): free space or set "
        "verl_job_artifacts_dir to another directory" % (tmp_path / "run")
    ) + ON_RAY
    assert result["status"] == "SUCCEEDED" and result["artifacts_error"] == line and said == [line]
    assert not os.path.exists(tmp_path / "run" / "rlinfra-x-default.log")


def test_a_run_report_the_wait_cannot_write_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(R.files, "write_atomic", _errno_raiser(R.files.write_atomic, errno.EROFS, "report.json"))
    w, result, said = _short_run(tmp_path, monkeypatch, str(tmp_path / "run"))
    line = (
        "verl_job_artifacts_dir %s: cannot write the run report (Read-only file system): set "
        "verl_job_artifacts_dir to another directory" % (tmp_path / "run" / "rlinfra-x-default")
    )
    assert result["status"] == "SUCCEEDED" and line in said and not result["report_path"]
    assert all("Errno" not in s for s in said)


def test_the_report_says_why_prometheus_gave_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(W.time, "sleep", lambda s: None)
    spec = {k: v.get("default") for k, v in W.ARGUMENT_SPEC.items()}
    spec.update(submission_id="rlinfra-x-default", log_dir=str(tmp_path / "run"), label="x", hosts=["gpu-0"])
    w = W.Watch(FakeAction([]), spec, {})
    assert w.utilisation() == ({}, "the head's Prometheus could not be read: no Prometheus on this node")
    w = W.Watch(FakeAction([]), spec, {"ray_metrics": False})
    assert w.utilisation() == ({}, "ray_metrics is false, so the cluster keeps no metrics")


# --- what the nodes' logs say, added after the wait (rlinfra.verl.run_report) -----------------------------------

XID_EVENT = dict(
    kind="xid",
    time="2023-11-14T22:13:50+00:00",
    code=79,
    meaning="GPU has fallen off the bus",
    device="0000:3b:00",
    line="...",
    epoch=R.epoch("2023-11-14T22:13:50.000Z"),
)


def test_report_json_is_the_data_and_kernel_events_in_the_window_become_events(tmp_path):
    run = sample_run(tmp_path)[0]
    R.write(str(tmp_path), run)
    data = tmp_path / "report.json"
    assert stat.S_IMODE(os.stat(str(data)).st_mode) == 0o600
    assert R.load(str(tmp_path))["submission_id"] == "rlinfra-gsm8k-default"
    # the run: 22:13:10 to 22:14:00; kernel events from its start to 5 minutes after its end are its own
    before = dict(XID_EVENT, epoch=R.epoch("2023-11-14T22:13:09.000Z"), device="0000:5e:00")
    after = dict(XID_EVENT, epoch=R.epoch("2023-11-14T22:19:01.000Z"), device="0000:86:00")
    late_oom = dict(
        kind="oom",
        time="x",
        code=None,
        meaning="killed python (pid 7)",
        device=None,
        line="...",
        epoch=R.epoch("2023-11-14T22:18:59.000Z"),
    )
    unplaced = dict(XID_EVENT, epoch=None)
    rows = R.kernel_rows(run, "gpu-1", [before, XID_EVENT, after, late_oom, unplaced, "junk"])
    assert [(r["at"], r["kind"], r["text"]) for r in rows] == [
        (R.epoch("2023-11-14T22:13:50.000Z"), "kernel", "gpu-1: Xid 79 (GPU has fallen off the bus) on 0000:3b:00"),
        (R.epoch("2023-11-14T22:18:59.000Z"), "kernel", "gpu-1: the OOM killer killed python (pid 7)"),
    ]


def test_amend_adds_events_causes_and_links_once(tmp_path):
    run = sample_run(tmp_path)[0]
    path = R.write(str(tmp_path), run)
    rows = R.kernel_rows(run, "gpu-1", [XID_EVENT])
    os.makedirs(str(tmp_path / "nodes" / "gpu-1"))
    links = R.node_log_rows(str(tmp_path.parent), str(tmp_path), [tmp_path.name])
    assert links == [("gpu-1", "nodes/gpu-1/")]
    cause = "gpu-1: Xid 79 (GPU has fallen off the bus) on 0000:3b:00 at 2023-11-14T22:13:50+00:00"
    assert R.amend(str(tmp_path), rows, [cause], links) == (path, True)
    with open(path) as f:
        text = f.read()
    page = parse(text)
    data = page_data(page)
    assert (R.epoch("2023-11-14T22:13:50.000Z"), "kernel") in [(e["t"], e["kind"]) for e in data["events"]]
    assert [e["t"] for e in data["events"]] == sorted(e["t"] for e in data["events"])
    assert "<td>2023-11-14 22:13:50 UTC</td><td>gpu-1: Xid 79 (GPU has fallen off the bus) on 0000:3b:00</td>" in text
    assert "<th>what the logs say</th><td>%s</td>" % cause in text
    assert [a.get("href") for tag, a in page.tags if tag == "a"] == ["rlinfra-gsm8k-default.log", "nodes/gpu-1/"]
    # The same again changes nothing, and rewrites nothing.
    stamp = os.stat(path).st_mtime_ns
    assert R.amend(str(tmp_path), rows, [cause], links) == (path, False)
    assert os.stat(path).st_mtime_ns == stamp
    assert sum(e["kind"] == "kernel" for e in R.load(str(tmp_path))["events"]) == 1


def test_amend_without_a_report_or_with_a_link_in_its_place(tmp_path):
    assert R.amend(str(tmp_path), [], ["x"], []) == ("", False)
    assert not os.listdir(str(tmp_path))
    run = sample_run(tmp_path)[0]
    R.write(str(tmp_path), run)
    target = tmp_path / "elsewhere.json"
    target.write_text("keep me")
    os.unlink(str(tmp_path / "report.json"))
    os.symlink(str(target), str(tmp_path / "report.json"))
    with pytest.raises(OSError) as e:
        R.amend(str(tmp_path), [], ["x"], [])
    assert "symbolic link" in str(e.value) and target.read_text() == "keep me"
    os.unlink(str(tmp_path / "report.json"))
    (tmp_path / "report.json").write_text("[1, 2]")
    with pytest.raises(ValueError) as e:
        R.load(str(tmp_path))
    assert "is not the run report's data" in str(e.value)


def test_run_report_action_through_ansible(tmp_path):
    """The action as a play runs it: the registered loop of ray_node_logs in, the report amended, then changed=0."""
    run_dir = tmp_path / "artifacts" / "gsm8k" / "rlinfra-gsm8k-default"
    run_dir.mkdir(parents=True)
    run = sample_run(run_dir)[0]
    R.write(str(run_dir), run)
    os.makedirs(str(run_dir / "nodes" / "gpu-1"))
    nodes = [
        dict(item="gpu-0", kernel_events=[], changed=False),
        dict(item="gpu-1", kernel_events=[XID_EVENT]),
        dict(item="gpu-2", unreachable=True, kernel_events=[XID_EVENT]),
    ]
    task = {
        "rlinfra.verl.run_report": {
            "report_dir": "artifacts/gsm8k/rlinfra-gsm8k-default",
            "nodes": nodes,
            "causes": ["gpu-1: Xid 79"],
        }
    }
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                dict(task, register="first"),
                dict(task, register="second"),
                dict(task, register="checked", check_mode=True),
                {
                    "ansible.builtin.copy": {
                        "content": "{{ [first, second, checked] | to_json }}",
                        "dest": str(tmp_path / "out.json"),
                        "mode": "0600",
                    }
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + sys.executable,
            str(tmp_path / "play.yml"),
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first, second, checked = json.loads((tmp_path / "out.json").read_text())
    assert first["changed"] is True and first["path"] == str(run_dir / "report.html"), first
    assert first["events"] == ["gpu-1: Xid 79 (GPU has fallen off the bus) on 0000:3b:00"]  # not the unreachable one
    assert second["changed"] is False and "already up to date" in second["msg"], second
    assert checked["changed"] is False and checked["path"] == "", checked
    saved = R.load(str(run_dir))
    assert saved["causes"] == ["gpu-1: Xid 79"] and saved["node_logs"] == [["gpu-1", "nodes/gpu-1/"]]


def test_a_report_the_nodes_logs_cannot_amend_names_the_variable(tmp_path, monkeypatch):
    """A full disk gave 'could not amend the run report in DIR: No space left on device', naming no setting."""
    from ansible_collections.rlinfra.verl.plugins.action import run_report as action

    run_dir = tmp_path / "artifacts" / "gsm8k" / "rlinfra-gsm8k-default"
    run_dir.mkdir(parents=True)
    R.write(str(run_dir), sample_run(run_dir)[0])
    before = (run_dir / "report.html").read_text()
    monkeypatch.setattr(R.files, "write_atomic", _errno_raiser(R.files.write_atomic, errno.ENOSPC, ""))
    act = object.__new__(action.ActionModule)
    act._task = type("Task", (), {"check_mode": False})()
    res = act.act({}, dict(report_dir=str(run_dir), nodes=[], causes=["gpu-1: Xid 79"]), {})
    assert res["failed"] and res["msg"] == (
        "verl_job_artifacts_dir %s: cannot write the run report (No space left on device): free space or set "
        "verl_job_artifacts_dir to another directory" % run_dir
    )
    assert (run_dir / "report.html").read_text() == before


def test_the_waits_next_rewrite_keeps_what_the_nodes_logs_added(tmp_path):
    run = sample_run(tmp_path, final=False)[0]
    R.write(str(tmp_path), run)
    rows = R.kernel_rows(run, "gpu-1", [XID_EVENT])
    R.amend(str(tmp_path), rows, ["gpu-1: Xid 79"], [])
    again = R.carried(R.load(str(tmp_path)), dict(run, final=True))
    assert [e for e in again["events"] if e["kind"] == "kernel"] == rows and again["causes"] == ["gpu-1: Xid 79"]
    assert [e["at"] for e in again["events"]] == sorted(e["at"] for e in again["events"])
    assert R.carried(None, run) is run


def test_the_events_say_whether_a_resume_was_proven():
    events = [
        dict(
            event="resubmitted",
            after="node_lost",
            detected_s=5.0,
            submitted_s=10.0,
            attempt=2,
            resume_step=5,
            first_step_s=20.0,
            first_logged_step=6,
            resume_proven=True,
        ),
        dict(
            event="resubmitted",
            after="stalled",
            detected_s=30.0,
            submitted_s=35.0,
            attempt=3,
            resume_step=10,
            first_step_s=40.0,
            first_logged_step=1,
            resume_proven=False,
        ),
        dict(event="not_resumed", at_s=41.0, attempt=3, first_step=1, resume_step=10),
    ]
    texts = [e["text"] for e in R.events_from_watch(events, [], 1000.0)]
    assert "attempt 2 printed its first step (step 6: resumed from step 5)" in texts
    assert "attempt 3 printed its first step (step 1: started over)" in texts
    assert texts[-1] == "attempt 3 started over at step 1 instead of resuming from step 10: stopped, no further attempt"


def test_a_head_that_does_not_answer_gets_one_line_with_what_this_controller_last_saw(tmp_path):
    """submit/status/stop on a cluster whose head is down or gone: the run's status, step and newest checkpoint step
    (the supervisor's, carried into report.json by the follow) and the commands; without a report, says so."""
    run_dir = tmp_path / "rlinfra-gsm8k-default"
    run_dir.mkdir()
    run = sample_run(run_dir, checkpoint=dict(step=80, dir="/data/checkpoints/p/default/gsm8k", at=T0 + 3900))[0]
    R.write(str(run_dir), run)
    before = (run_dir / "report.json").read_bytes()
    error = "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.5 port 22: Connection refused\nmore"
    line = R.head_gone_line(R.load(str(run_dir)), "gpu-0", "default", "gsm8k", error, str(run_dir / "report.html"))
    assert line == (
        "the head gpu-0 of Ray cluster default does not answer (Failed to connect to the host via ssh: ssh: connect to "
        "host 10.0.0.5 port 22: Connection refused): the cluster is down or gone; run rlinfra-gsm8k-default (attempt 1) "
        "was last seen SUCCEEDED at 2023-11-14 23:20:00 UTC, at step 83; its newest checkpoint: step 80 in "
        "/data/checkpoints/p/default/gsm8k; report: %s; bring the machines back (provision.yml when they were rented, "
        "then site.yml); then submit.yml -e exp=gsm8k resumes from the checkpoints on the shared volume"
        % (run_dir / "report.html")
    )
    assert "\n" not in line and (run_dir / "report.json").read_bytes() == before
    none = R.head_gone_line(None, "gpu-0", "default", "gsm8k", "", str(tmp_path / "other"))
    assert "(no answer)" in none and "this controller has no report of the run (%s)" % (tmp_path / "other") in none
    unknown = R.head_gone_line(dict(run, checkpoint=None), "gpu-0", "default", "gsm8k", "x", "r")
    assert "its newest checkpoint: not known here (the run's supervisor keeps it in .rlinfra-run.json" in unknown
