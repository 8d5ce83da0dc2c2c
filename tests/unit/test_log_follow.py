"""A poll costs the same at hour 1 and at hour 72: the driver log read from an offset on the head
(module_utils/ray/_log_follow.py, job_poll.result), the metrics followed line by line (verl_metrics.Follow) and the
controller's copy appended to (plugin_utils/log_copy.py, ray_job_wait)."""

from __future__ import annotations

import os
import random

import pytest

from ansible_collections.rlinfra.verl.plugins.action import ray_job_wait as W
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import _log_follow as log_follow
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import job_poll
from ansible_collections.rlinfra.verl.plugins.module_utils.ray.client import tail_lines
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.log import last_progress
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "verl_log_sample.txt")


def sample_log(steps=60, seed=1):
    """A verl-like driver log: the fixture's real lines, then numbered steps with noise between them."""
    rng = random.Random(seed)
    with open(FIXTURE, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if not line.startswith("#")]
    for step in range(3, steps):
        lines.append("(WorkerDict pid=%d) INFO vllm: gen %d tokens \u00e9t\u00e9 \u2713" % (rng.randint(1, 9999), step))
        if step == 10:
            lines.append("(TaskRunner pid=16292) step:%d - val-core/acc/mean@1:0.5" % step)  # a column appears late
        metrics = [
            "critic/score/mean:%.3f" % rng.random(),
            "actor/pg_loss:%r" % rng.uniform(-1, 1),
            "response_length/mean:%d" % rng.randint(100, 900),
            "timing_s/step:np.float64(%.2f)" % rng.uniform(1, 9),
        ]
        lines.append("(TaskRunner pid=16292) step:%d - %s" % (step, " - ".join(metrics)))
        if step % 7 == 0:  # a step printed twice keeps its last line
            lines.append("(TaskRunner pid=16292) step:%d - critic/score/mean:0.25 - actor/pg_loss:nan" % step)
    return "\n".join(lines) + "\n"


# Reading from an offset ----------------------------------------------------------------------------------


def test_growth_reads_only_new_whole_lines(tmp_path):
    path = tmp_path / "job-driver-x.log"
    path.write_bytes(b"one\ntwo\nthr")
    got = log_follow.read_new(str(path), 0)
    assert (got["text"], got["offset"], got["size"], got["reset"], got["source"]) == (
        "one\ntwo\n",
        8,
        11,
        False,
        "file",
    )
    with open(path, "ab") as f:
        f.write(b"ee\nfour\n")
    again = log_follow.read_new(str(path), got["offset"], got["file_id"])
    assert (again["text"], again["offset"], again["reset"]) == ("three\nfour\n", 19, False)
    assert log_follow.read_new(str(path), again["offset"], again["file_id"])["text"] == ""
    assert log_follow.read_new(str(tmp_path / "absent.log"), 0) is None


def test_partial_last_line_goes_out_once_the_job_ended(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a\nno newline at the end")
    assert log_follow.read_new(str(path), 2)["text"] == ""
    final = log_follow.read_new(str(path), 2, final=True)
    assert (final["text"], final["offset"]) == ("no newline at the end", 23)


def test_truncation_and_another_file_start_again_from_zero(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"x" * 50 + b"\n")
    first = log_follow.read_new(str(path), 0)
    path.write_bytes(b"short\n")  # rewritten shorter, same inode
    shrunk = log_follow.read_new(str(path), first["offset"], first["file_id"])
    assert (shrunk["text"], shrunk["reset"], shrunk["offset"]) == ("short\n", True, 6)
    os.unlink(path)
    path.write_bytes(b"new session, new file, long enough to pass the old offset\n" * 3)  # a new inode
    other = log_follow.read_new(str(path), shrunk["offset"], "0:1")
    assert other["reset"] and other["text"].startswith("new session") and other["offset"] == other["size"]


def test_a_new_submission_id_is_another_file_through_the_api_too():
    log = "first line\nsecond\n"
    got = log_follow.slice_new(log, 0, name="run-a1")
    assert (got["text"], got["file_id"], got["source"]) == (log, "ray-api:run-a1", "ray_api")
    other = log_follow.slice_new("a2 line\n", 5, got["file_id"], name="run-a2")
    assert (other["reset"], other["text"]) == (True, "a2 line\n")


def test_cap_cuts_at_a_line_and_a_long_line_at_a_character(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"aaaa\nbbbb\ncccc\n")
    got = log_follow.read_new(str(path), 0, cap=12)
    assert (got["text"], got["offset"], got["size"]) == ("aaaa\nbbbb\n", 10, 15)
    rest = log_follow.read_new(str(path), got["offset"], got["file_id"], cap=12)
    assert (rest["text"], rest["offset"]) == ("cccc\n", 15)
    # One line longer than the cap: cut where a character ends, never inside the UTF-8 sequence of "\u00e9" or "\u20ac".
    long_line = ("\u00e9\u20ac" * 10 + "\n").encode("utf-8")
    path.write_bytes(long_line)
    text, offset = "", 0
    while offset < len(long_line):
        piece = log_follow.read_new(str(path), offset, cap=4)
        assert "\ufffd" not in piece["text"] and piece["offset"] > offset
        text, offset = text + piece["text"], piece["offset"]
    assert text.encode("utf-8") == long_line


@pytest.mark.parametrize("seed", range(5))
def test_utf8_split_across_the_boundary_random_caps(tmp_path, seed):
    rng = random.Random(seed)
    data = sample_log(30, seed).encode("utf-8")
    path = tmp_path / "log"
    path.write_bytes(data)
    out, offset, fid = [], 0, ""
    while offset < len(data):
        got = log_follow.read_new(str(path), offset, fid, cap=rng.randint(3, 300), final=True)
        out.append(got["text"])
        offset, fid = got["offset"], got["file_id"]
    assert "".join(out).encode("utf-8") == data
    assert log_follow.utf8_cut("\u00e9".encode("utf-8")[:1]) == 0 and log_follow.utf8_cut(b"ab") == 2


def test_tail_from_the_end_is_the_tail_of_the_whole_text(tmp_path):
    text = sample_log(200)
    path = tmp_path / "log"
    path.write_text(text, encoding="utf-8")
    for n in (0, 1, 5, 50, 10000):
        assert log_follow.read_tail(str(path), n) == tail_lines(text, n)
    bounded = log_follow.read_tail(
        str(path), 3, limit=200
    )  # fewer lines when they are longer than the limit: whole ones
    assert bounded and tail_lines(text, 3).endswith("\n" + bounded)
    path.write_text(text.rstrip("\n"), encoding="utf-8")
    assert log_follow.read_tail(str(path), 4) == tail_lines(text, 4)


class FakeClient:
    address = "http://10.0.0.5:8265"

    def __init__(self, fact, logs=""):
        self.fact, self.logs, self.asked = fact, logs, 0

    def get_logs(self, sid):
        self.asked += 1
        return self.logs

    def job_url(self, sid):
        return "%s/#/jobs/%s" % (self.address, sid)


def test_poll_result_reads_the_file_on_the_head_else_the_api(tmp_path):
    text = sample_log(40)
    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "job-driver-run1.log").write_text(text, encoding="utf-8")
    job = dict(status="RUNNING", start_time=1000)
    client = FakeClient(dict(temp_dir=str(tmp_path), dashboard_url="10.0.0.5:8265"))
    size = len(text.encode("utf-8"))
    res = job_poll.result(client, "run1", job, [], None, 5, offset=size - 300)
    assert (res["log_source"], res["log_size"], res["log_offset"], client.asked) == ("file", size, size, 0)
    assert text.endswith(res["log_chunk"]) and res["logs_tail"] == tail_lines(text, 5)
    assert res["last_step"] == last_progress(res["log_chunk"])[0]
    # Another cluster's dashboard (or no fact): Ray's API, only the new part returned.
    other = FakeClient(dict(temp_dir=str(tmp_path), dashboard_url="http://10.9.9.9:8265"), logs=text)
    res = job_poll.result(other, "run1", job, [], None, 5, offset=size - 300)
    assert (res["log_source"], res["log_offset"], other.asked) == ("ray_api", size, 1)
    # No offset: the tail of the whole log as before, and no log_* keys.
    old = job_poll.result(other, "run1", job, [], None, 5)
    assert "log_offset" not in old and old["logs_tail"] == tail_lines(text, 5)
    assert (old["last_step"], old["last_metrics"]) == last_progress(text)


def test_a_look_without_an_offset_on_the_head_reads_only_the_files_end(tmp_path):
    """status.yml's look: the newest step and the tail from the file's last TAIL_BYTES, never the whole log (a 124 MB
    log cost 13.6 s and 301 MB on the head when it was read whole); the API only off the head."""
    text = sample_log(400)
    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "job-driver-run1.log").write_text(text, encoding="utf-8")
    job = dict(status="RUNNING", start_time=1000)
    client = FakeClient(dict(temp_dir=str(tmp_path), dashboard_url="10.0.0.5:8265"), logs="step:1 - wrong:1\n")
    res = job_poll.result(client, "run1", job, [], None, 5)
    assert client.asked == 0 and res["logs_tail"] == tail_lines(text, 5)
    assert repr((res["last_step"], res["last_metrics"])) == repr(last_progress(text))
    end = log_follow.read_end(str(logs / "job-driver-run1.log"), limit=1000)
    assert len(end.encode("utf-8")) < 1000 and text.endswith(end) and text[-len(end) - 1] == "\n"
    assert log_follow.read_end(str(tmp_path / "none")) is None
    # the whole log when asked for it at the end (full_log_at_end), from the API as before
    done = job_poll.result(client, "run1", dict(job, status="SUCCEEDED"), [], None, 5, full_at_end=True)
    assert client.asked == 1 and done["full_log"] == client.logs


# The metrics followed line by line --------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_follow_equals_the_whole_file_parser_in_random_chunks(tmp_path, seed):
    rng = random.Random(seed)
    text = sample_log(2500 if seed == 0 else 80, seed)  # 2500 steps: the plot is thinned
    whole = verl_metrics.write(str(tmp_path / "whole"), text)
    follow = verl_metrics.Follow(str(tmp_path / "inc"))
    at = 0
    while at < len(text):
        size = rng.choice((1, 7, 100, 5000, 100000))
        follow.feed(text[at : at + size])
        at += size
        if rng.random() < 0.2:
            follow.write()
        ended = text[:at].rpartition("\n")[0]  # the line being written waits
        assert repr(follow.last) == repr(last_progress(ended))  # nan is not nan
    follow.finish()
    assert repr(follow.last) == repr(last_progress(text))
    inc = follow.write()
    assert (inc["steps"], inc["panels"]) == (whole["steps"], whole["panels"])
    with open(whole["csv"]) as a, open(inc["csv"]) as b:
        assert a.read() == b.read()
    with open(whole["png"], "rb") as a, open(inc["png"], "rb") as b:
        assert a.read() == b.read()
    assert os.stat(inc["csv"]).st_mode & 0o777 == 0o600


def test_follow_appends_rows_and_rewrites_only_for_a_step_out_of_order(tmp_path):
    follow = verl_metrics.Follow(str(tmp_path / "m"))
    follow.feed("step:1 - a:1\nstep:2 - a:2\n")
    follow.write()
    csv_path = str(tmp_path / "m.metrics.csv")
    inode = os.stat(csv_path).st_ino
    follow.feed("step:3 - a:3\n")
    follow.write()
    assert os.stat(csv_path).st_ino == inode  # appended in place
    follow.feed("step:3 - a:4\nstep:2 - a:9 - b:1\n")  # the last row again, an earlier one with a new metric
    follow.write()
    text = "step:1 - a:1\nstep:2 - a:2\nstep:3 - a:3\nstep:3 - a:4\nstep:2 - a:9 - b:1\n"
    with open(csv_path) as f:
        assert f.read() == verl_metrics.csv_text(verl_metrics.steps(text))


def test_a_metrics_table_replaced_by_a_link_is_replaced_not_appended_through(tmp_path):
    """The table is appended to while its size is the one written: a link put in its place to a file of that size
    (here a copy, so the rows read back are the same) had the next rows added to that file."""
    follow = verl_metrics.Follow(str(tmp_path / "m"))
    follow.feed("step:1 - a:1\nstep:2 - a:2\n")
    follow.write()
    csv_path = tmp_path / "m.metrics.csv"
    victim = tmp_path / "users-table.csv"
    victim.write_bytes(csv_path.read_bytes())
    before = victim.read_bytes()
    csv_path.unlink()
    os.symlink(victim, csv_path)
    follow.feed("step:3 - a:3\n")
    follow.write()
    assert victim.read_bytes() == before and not csv_path.is_symlink()
    assert csv_path.read_text() == verl_metrics.csv_text(
        verl_metrics.steps("step:1 - a:1\nstep:2 - a:2\nstep:3 - a:3\n")
    )


# The controller's copy, appended to --------------------------------------------------------------------


def polls_of(text, cap, status="RUNNING"):
    """ray_job_poll answers for ``text`` read from the start in pieces of at most ``cap`` bytes."""
    data = text.encode("utf-8")
    offset, out = 0, []
    while True:
        got = log_follow.slice_new(data, offset, cap=cap, final=status != "RUNNING", name="x")
        out.append(
            dict(
                found=True,
                status=status,
                log_chunk=got["text"],
                log_offset=got["offset"],
                log_size=got["size"],
                log_file_id=got["file_id"],
                log_reset=got["reset"],
            )
        )
        offset = got["offset"]
        if offset >= len(data):
            return out


def test_copy_appends_only_new_bytes_and_restarts_on_reset(tmp_path):
    copy = LogCopy("run1", str(tmp_path), mask=lambda t: t.replace("hf_secret", "********"))
    (tmp_path / "run1.log").write_text("an earlier wait's copy\n")
    for res in polls_of("a hf_secret\nb\n", 12):
        copy.take(res)
    assert (tmp_path / "run1.log").read_text() == "a ********\nb\n"
    res = dict(
        found=True,
        status="RUNNING",
        log_chunk="c\n",
        log_offset=16,
        log_size=16,
        log_file_id="ray-api:x",
        log_reset=False,
    )
    copy.take(res)
    assert (tmp_path / "run1.log").read_text() == "a ********\nb\nc\n"
    copy.take(dict(res, log_chunk="new file\n", log_offset=9, log_size=9, log_reset=True))
    assert (tmp_path / "run1.log").read_text() == "new file\n"
    copy.take(dict(res, log_chunk="no newline", log_offset=19, log_size=19, status="FAILED"))
    assert copy.finish() == str(tmp_path / "run1.log")
    assert (tmp_path / "run1.log").read_text() == "new file\nno newline\n"
    assert os.stat(tmp_path / "run1.log").st_mode & 0o777 == 0o600


def test_the_wait_passes_offsets_catches_up_and_saves_the_copy(tmp_path, monkeypatch):
    from tests.unit.test_ray_job_wait import poll, watch

    monkeypatch.setattr(W.time, "sleep", lambda s: None)
    text = sample_log(50)
    running = text[: len(text) // 2].rsplit("\n", 1)[0] + "\n"
    first = polls_of(running, 2000)  # the first call, and the calls that catch up
    done = len(running.encode("utf-8"))
    ended = [
        dict(r, log_offset=r["log_offset"] + done, log_size=r["log_size"] + done)
        for r in polls_of(text[len(running) :], 10**6, status="SUCCEEDED")
    ]
    answers = [poll(**dict(r, status="RUNNING")) for r in first] + [poll(**dict(r, driver_exit_code=0)) for r in ended]
    w, action = watch(answers, log_dir=str(tmp_path))
    w.run()
    # The first call from 0, the calls that catch up from where each stopped, then the next poll from the end.
    assert [c[1]["log_offset"] for c in action.calls] == [0] + [r["log_offset"] for r in first]
    assert all(c[1]["logs_tail_lines"] == 0 for c in action.calls[1 : len(first)])  # catching up: no tail
    assert (tmp_path / "rlinfra-gsm8k-default.log").read_text() == text
    assert w.log_paths == [str(tmp_path / "rlinfra-gsm8k-default.log")]
    assert repr((w.res["last_step"], w.res["last_metrics"])) == repr(last_progress(text))
    with open(tmp_path / "rlinfra-gsm8k-default.metrics.csv") as f:
        assert f.read() == verl_metrics.csv_text(verl_metrics.steps(text))
