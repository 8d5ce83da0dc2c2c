#!/usr/bin/env python3
"""Benchmark: one poll (on the head) and one metrics refresh (on the controller) with a 124 MB driver log against
a 1 MB one - the goal is within 1.2x in time and memory (issue 38 point 8: a poll at hour 72 costs what it costs at
hour 1).

Generates two verl-like driver logs (Ray-prefixed worker lines, a tqdm line and one ``step:N - key:value - ...``
line with 40 metrics per step, ~4.5 kB a step): 1 MB (~230 steps) and 124 MB (~28,000 steps, ~390,000 lines; a
multi-day run's order). Each measurement is a fresh ``python`` process, the two sizes alternating:

* ``head poll``: ``job_poll.result`` - what ``rlinfra.verl.ray_job_poll`` returns, without the two dashboard reads
  (job and nodes, the same for any log) - with ``log_offset`` 64 kB before the log's end (the bytes of about one
  progress interval at hour 72) and ``logs_tail_lines: 50``, the driver log read from the head's Ray session
  directory; then the result masked (one secret value) and serialized as the plain script prints it.
* ``controller refresh``: ray_job_wait's side of that poll - ``LogCopy.take`` (the 64 kB appended to the
  controller's copy, its lines fed to ``verl_metrics.Follow``) and the metrics files written (CSV rows appended,
  the PNG drawn). The state a wait holds at that point (offset, columns, the plotted points) is built beforehand by
  feeding the rest of the log, not timed, and loaded by the measured process.
* ``before`` rows (reference, fewer rounds): the same two with the whole log, as the code did until this change -
  ``job_poll.result`` without ``log_offset`` (the whole log, as Ray's ``/api/jobs/<id>/logs`` reads it, for its last
  step and tail) and ``verl_metrics.write`` of the whole log.

``call`` is the measured call's time in the process, ``process`` the whole process's wall time (Python's start and
the imports included), ``max RSS`` the process's peak resident memory (``os.wait4``). The dashboard's HTTP answers
are left out: they do not depend on the log (no loopback Ray job is run here).

Prints a table and rewrites the ``<!-- bench:poll -->`` section of docs/BENCHMARKS.md.
Run from the repository root:  .venv/bin/python bench/bench_poll.py [--rounds 5] [--before-rounds 3] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from _report import write_section  # noqa: E402

COLLECTIONS = str(ROOT / "collections")
SID = "rlinfra-bench-poll"
NEW_BYTES = 64 * 1024
SIZES = (("1MB", 1 << 20), ("124MB", 124 << 20))
FOLLOW_PIECE = 256 * 1024  # what a verl run writes between two of the supervisor's polls, about
SECRET = "hf_benchsecret_1234567890"

METRICS = (
    [
        "actor/entropy",
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/grad_norm",
        "actor/lr",
        "critic/score/mean",
        "critic/score/max",
        "critic/score/min",
        "critic/rewards/mean",
        "critic/advantages/mean",
        "critic/returns/mean",
        "response_length/mean",
        "response_length/max",
        "response_length/clip_ratio",
        "prompt_length/mean",
        "timing_s/gen",
        "timing_s/ref",
        "timing_s/adv",
        "timing_s/update_actor",
        "timing_s/step",
        "perf/mfu/actor",
        "perf/max_memory_allocated_gb",
        "perf/cpu_memory_used_gb",
        "perf/throughput",
        "perf/time_per_step",
        "perf/total_num_tokens",
    ]
    + ["global_seqlen/%s" % k for k in ("min", "max", "minmax_diff", "balanced_min", "balanced_max", "mean")]
    + [
        "training/global_step",
        "training/epoch",
        "actor/kl_loss",
        "actor/kl_coef",
        "actor/entropy_loss",
        "critic/vf_loss",
    ]
)


def generate(path, size, seed=7):
    """A verl-like driver log of about ``size`` bytes, ending with a whole line."""
    rng = random.Random(seed)
    out, written, step = [], 0, 0
    with open(path, "w", encoding="utf-8") as f:
        while written < size:
            step += 1
            lines = [
                "(WorkerDict pid=%d, ip=10.0.0.%d) INFO %s vllm/worker.py:%d] Processed prompts: %d%% |%s| "
                "%d/%d [00:%02d<00:00, %.2fit/s, est. speed input: %.2f toks/s, output: %.2f toks/s]"
                % (
                    rng.randint(1000, 99999),
                    rng.randint(2, 9),
                    "11-26 %02d:%02d:%02d" % (step % 24, i, step % 60),
                    rng.randint(10, 999),
                    100,
                    "#" * 20,
                    512,
                    512,
                    i,
                    rng.uniform(1, 9),
                    rng.uniform(1e3, 9e3),
                    rng.uniform(1e3, 9e3),
                )
                for i in range(12)
            ]
            lines.append(
                "Training Progress:  %d%%|          | %d/100000 [%d:00:00<99:00:00, 60.0s/it]"
                % (step // 1000, step, step // 60)
            )
            metrics = " - ".join(
                "%s:%s" % (k, "np.float64(%r)" % rng.uniform(-1, 1) if i % 3 else "%.3f" % rng.random())
                for i, k in enumerate(METRICS)
            )
            lines.append("(TaskRunner pid=16292) step:%d - %s" % (step, metrics))
            block = "\n".join(lines) + "\n"
            f.write(block)
            written += len(block.encode("utf-8"))
            out.append(step)
    return step


HEAD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import job_poll
from ansible_collections.rlinfra.verl.plugins.module_utils.common.plain_module import PlainModule
temp_dir, sid, mode, secret = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
path = os.path.join(temp_dir, "session_latest", "logs", "job-driver-%s.log" % sid)

class Client:
    address = "http://127.0.0.1:8265"
    # "before": the module off the head (or the code before the status change), Ray's API read whole
    fact = dict(temp_dir=temp_dir, dashboard_url=address) if mode != "before" else {}
    def get_logs(self, sid):  # what /api/jobs/<id>/logs does on the head: the whole file
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    def job_url(self, sid):
        return "%s/#/jobs/%s" % (self.address, sid)

job = dict(status="RUNNING", start_time=(time.time() - 72 * 3600) * 1000, job_id="02000000", metadata={})
c0, t0 = time.process_time(), time.perf_counter()
if mode == "new":
    res = job_poll.result(Client(), sid, job, [], None, 50, offset=os.path.getsize(path) - NEW_BYTES)
else:  # "status": status.yml's look (no offset), the file's end; "before": the whole log
    res = job_poll.result(Client(), sid, job, [], None, 50)
line = json.dumps(PlainModule({}, [secret]).reply(res))
took, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps(dict(call=took, cpu=cpu, last_step=res["last_step"], out=len(line))))
""".replace("NEW_BYTES", str(NEW_BYTES))

CONTROLLER = r"""
import json, os, pickle, sys, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import _log_follow as log_follow
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy
state, log, mode = sys.argv[2], sys.argv[3], sys.argv[4]
if mode == "new":
    with open(state, "rb") as f:
        copy = pickle.load(f)
    copy.mask = lambda text: text.replace("hf_benchsecret_1234567890", "********")  # ray_job_wait's mask_log
    got = log_follow.read_new(log, copy.offset, copy.file_id)  # the poll's answer (made on the head; not timed)
    res = dict(found=True, status="RUNNING", log_chunk=got["text"], log_offset=got["offset"], log_size=got["size"],
               log_file_id=got["file_id"], log_reset=got["reset"])
    c0, t0 = time.process_time(), time.perf_counter()
    copy.take(res)
    written = copy.metrics.write()
else:
    c0, t0 = time.process_time(), time.perf_counter()
    with open(log, encoding="utf-8") as f:  # the whole log, as the last poll brought it
        text = f.read()
    written = verl_metrics.write(os.path.join(os.path.dirname(state), "before"), text)
took, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps(dict(call=took, cpu=cpu, steps=written["steps"], png=bool(written["png"]))))
"""

# The run's supervisor (module_utils/ray/supervisor.py) come to a run whose log is already this long (started late,
# or its state lost): it catches up from 0 in CHUNK_BYTES reads, then polls; its state written after each poll.
SUPERVISOR = r"""
import json, os, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import job_poll, supervisor
temp_dir, sid, secret, mode = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
source = os.path.join(temp_dir, "session_latest", "logs", "job-driver-%s.log" % sid)
work = tempfile.mkdtemp()
if mode == "follow":  # the log written as the supervisor follows it: a fresh file, PIECE bytes between two polls
    temp_dir = os.path.join(work, "ray")
    os.makedirs(os.path.join(temp_dir, "session_latest", "logs"))
path = os.path.join(temp_dir, "session_latest", "logs", "job-driver-%s.log" % sid)

class Client:
    address = "http://127.0.0.1:8265"
    fact = dict(temp_dir=temp_dir, dashboard_url=address)
    def job_url(self, sid):
        return "%s/#/jobs/%s" % (self.address, sid)

job = dict(status="RUNNING", start_time=(time.time() - 72 * 3600) * 1000, job_id="02000000", metadata={})
def poll(params, module):
    return job_poll.result(Client(), params["submission_id"], job, [], None, params["logs_tail_lines"],
                           offset=params["log_offset"], file_id=params["log_file_id"])
config = dict(args=dict(submission_id=sid, base_submission_id=sid, timeout=3600, progress_interval=5, poll_interval=5,
                        stall_timeout=0, outage_grace=60, checkpoint_dir=None, recovery={"max_restarts": 2},
                        job={"job_template": {}, "metadata": {}, "resources": None, "package": None}),
              secret_values=[secret], logs_tail_lines=50)
sup = supervisor.Supervisor(config, work, functions=dict(poll=poll), systemctl=lambda *a: (0, "", ""))
c0, t0 = time.process_time(), time.perf_counter()
polls = 0
if mode == "follow":
    with open(source, "rb") as src, open(path, "ab") as out:
        for piece in iter(lambda: src.read(PIECE), b""):
            out.write(piece)
            out.flush()
            sup.poll(0)
            sup.save()
            polls += 1
while True:
    res = sup.poll(0)
    sup.save()
    polls += 1
    if sup.log["offset"] >= os.path.getsize(path):
        break
caught = time.perf_counter() - t0
res = sup.poll(0)  # and one poll after, at the end
sup.save()
took, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps(dict(call=took, cpu=cpu, last_step=res["last_step"], polls=polls, caught=caught,
                      state=os.path.getsize(os.path.join(work, "state.json")))))
""".replace("PIECE", str(FOLLOW_PIECE))

PREPARE = r"""
import os, pickle, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import _log_follow as log_follow
from ansible_collections.rlinfra.verl.plugins.plugin_utils.log_copy import LogCopy
state, log, copy_dir, sid, new = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])
copy = LogCopy(sid, copy_dir)
stop = os.path.getsize(log) - new
while copy.offset < stop:
    got = log_follow.read_new(log, copy.offset, copy.file_id, cap=min(log_follow.CHUNK_BYTES, stop - copy.offset))
    copy.take(dict(found=True, status="RUNNING", log_chunk=got["text"], log_offset=got["offset"], log_size=stop,
                   log_file_id=got["file_id"], log_reset=got["reset"]))
copy.metrics.write()
copy.mask = None
with open(state, "wb") as f:
    pickle.dump(copy, f)
print(copy.offset, copy.metrics.size, os.path.getsize(copy.path))
"""


def run(code, *args):
    """(wall seconds, CPU seconds, max RSS MB, the JSON line the process printed) of a fresh python process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, COLLECTIONS, *args], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    dummy, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit("benchmark process failed (%s): %s" % (status, out))
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, json.loads(out.strip().splitlines()[-1])


def prepare(work, name, size):
    temp_dir = work / name / "ray"
    logs = temp_dir / "session_latest" / "logs"
    log = logs / ("job-driver-%s.log" % SID)
    if not log.exists() or abs(log.stat().st_size - size) > 64 * 1024:
        logs.mkdir(parents=True, exist_ok=True)
        print("generating %s (%d bytes)..." % (log, size), flush=True)
        generate(log, size)
    copy_dir = work / name / "artifacts"
    copy_dir.mkdir(parents=True, exist_ok=True)
    state = work / name / "state.pickle"
    subprocess.run(
        [sys.executable, "-c", PREPARE, COLLECTIONS, str(state), str(log), str(copy_dir), SID, str(NEW_BYTES)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    sizes = dict(
        copy=(copy_dir / ("%s.log" % SID)).stat().st_size, csv=(copy_dir / ("%s.metrics.csv" % SID)).stat().st_size
    )
    return dict(temp_dir=temp_dir, log=log, state=state, copy_dir=copy_dir, sizes=sizes, lines=None)


def restore(case):
    """The controller's files as the state has them (a measured refresh appended to them)."""
    for suffix, key in ((".log", "copy"), (".metrics.csv", "csv")):
        os.truncate(case["copy_dir"] / (SID + suffix), case["sizes"][key])


def measure(kind, mode, case):
    if kind == "head":
        return run(HEAD, str(case["temp_dir"]), SID, mode, SECRET)
    if kind == "supervisor":
        return run(SUPERVISOR, str(case["temp_dir"]), SID, SECRET, mode)
    restore(case)
    return run(CONTROLLER, str(case["state"]), str(case["log"]), mode)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before-rounds", type=int, default=3, help="rounds of the whole-log reference (0: none)")
    ap.add_argument("--work", default="/tmp/rlinfra-bench-poll", help="where the logs are generated (kept)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = ap.parse_args()
    work = Path(args.work)
    cases = {name: prepare(work, name, size) for name, size in SIZES}
    for case in cases.values():
        with open(case["log"], "rb") as f:
            case["lines"] = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    load_before = os.getloadavg()[0]
    results = {}
    plan = [(kind, "new", args.rounds) for kind in ("head", "controller")]
    plan += [("head", "status", args.rounds), ("supervisor", "follow", args.rounds), ("supervisor", "new", args.rounds)]
    plan += [(kind, "before", args.before_rounds) for kind in ("head", "controller")]
    for kind, mode, rounds in plan:
        for r in range(rounds):
            order = [n for n, dummy in SIZES] if r % 2 == 0 else [n for n, dummy in reversed(SIZES)]
            for name in order:
                wall, cpu, rss, out = measure(kind, mode, cases[name])
                results.setdefault((kind, mode, name), []).append((out["cpu"], cpu, rss, out["call"], wall))
                print(
                    "%-10s %-6s %-6s round %d: call %.4fs (CPU %.4fs) process %.3fs (CPU %.3fs) max RSS %.1f MB"
                    % (kind, mode, name, r + 1, out["call"], out["cpu"], wall, cpu, rss),
                    flush=True,
                )
    load_after = os.getloadavg()[0]

    def med(key, i):
        return statistics.median(v[i] for v in results[key])

    rows = []
    for kind, mode, label in (
        ("head", "new", "head: one poll from an offset"),
        ("controller", "new", "controller: one metrics refresh"),
        ("head", "status", "head: status.yml's look (no offset)"),
        ("supervisor", "follow", "supervisor: the whole run followed, 256 kB a poll"),
        ("supervisor", "new", "supervisor: catch up from 0, then one poll"),
        ("head", "before", "before - head: one poll, whole log"),
        ("controller", "before", "before - controller: metrics from the whole log"),
    ):
        if (kind, mode, "1MB") not in results:
            continue
        small, big = (kind, mode, "1MB"), (kind, mode, "124MB")
        ratio = [med(big, i) / med(small, i) for i in range(5)]
        bold = "%.2fx" if mode == "before" or kind == "supervisor" else "**%.2fx**"
        rows.append(
            "| %s | %d | %.1f / %.1f ms | %s | %.3f / %.3f s | %s | %.1f / %.1f MB | %s | %.1f / %.1f ms | %.2fx |"
            % (
                label,
                len(results[small]),
                med(small, 0) * 1000,
                med(big, 0) * 1000,
                bold % ratio[0],
                med(small, 1),
                med(big, 1),
                bold % ratio[1],
                med(small, 2),
                med(big, 2),
                bold % ratio[2],
                med(small, 3) * 1000,
                med(big, 3) * 1000,
                ratio[3],
            )
        )
    c1, c2 = cases["1MB"], cases["124MB"]
    markdown = "\n".join(
        [
            "## One poll and one metrics refresh: a 124 MB driver log against a 1 MB one",
            "",
            "Goal: within **1.2x** in time and memory (issue 38 point 8). Logs generated by bench/bench_poll.py (verl-like: "
            "12 Ray-prefixed vLLM lines, a tqdm line and one `step:N` line with %d metrics per step): 1 MB = %d lines, "
            "124 MB = %d lines. Each figure is a fresh `python` process (%s, Python %s), the sizes alternating, medians of "
            "the rounds, each cell 1 MB / 124 MB. `call CPU`: the measured call's CPU time in the process; `process CPU`: "
            "the whole process's user+sys time (Python's start and the imports included); max RSS from `os.wait4`; `call "
            "wall`: the call's wall time, which the other jobs on the machine blur (CPU time is the steadier measure "
            "here). Load average (1 min) at start/end: %.1f / %.1f (%d cores)."
            % (
                len(METRICS),
                c1["lines"],
                c2["lines"],
                platform.machine(),
                platform.python_version(),
                load_before,
                load_after,
                os.cpu_count(),
            ),
            "",
            "The functions are measured directly, without a Ray head: the head's figure is `job_poll.result` (what "
            "`ray_job_poll` returns, minus the two dashboard reads of the job and the nodes, which do not depend on the "
            "log) with `log_offset` %d kB before the end of the log in the head's Ray session directory and "
            "`logs_tail_lines: 50`, masked and serialized as the plain script prints it; the controller's is "
            "`LogCopy.take` of that piece (appended to the copy, fed to `verl_metrics.Follow`) and the metrics CSV and "
            "PNG written, from the state a wait holds at hour 72 (loaded, built beforehand). The `before` rows are the "
            "same work as the code did it until this change: the whole log for each poll and each refresh (and what "
            "`status.yml` did until issue 49: the whole log, through Ray's API, for its newest step and its tail). "
            "`status.yml's look` is `job_poll.result` without an offset on the head: the log's last 4 MiB. The supervisor "
            "rows are the run's supervisor (`module_utils/ray/supervisor.py`, its polls and its state saved after each): "
            "`followed` is a whole run, the log written %d kB between two polls (the time includes writing the log and "
            "grows with the number of polls by design; the memory is the figure: what the unit holds at the run's end); "
            "`catch up` is a supervisor come to a log already that long (started late, or its state lost): it reads it "
            "from 0 in 8 MiB pieces (its peak is those pieces' copies, not the log: 55 MB at 16 MB, 63 MB at 40 MB)."
            % (NEW_BYTES // 1024, FOLLOW_PIECE // 1024),
            "",
            "| what | rounds | call CPU | ratio | process CPU | ratio | max RSS | ratio | call wall | ratio |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        + rows
    )
    print()
    print(markdown)
    if not args.no_write:
        write_section("poll", markdown)
        print("\nwrote docs/BENCHMARKS.md (section bench:poll)")


if __name__ == "__main__":
    main()
