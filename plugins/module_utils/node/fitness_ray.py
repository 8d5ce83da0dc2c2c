# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The parts of fitness.yml that run through the cluster itself, as one Ray job (the Jobs API, the cluster's own
environment): an object moved between nodes through Ray's object store, and, where torch is in the environment, an
all-reduce (NCCL on GPUs, Gloo on CPUs) reported the way nccl-tests' ``all_reduce_perf`` reports it.

``entrypoint(...)`` is the job's command line (the script travels base64-encoded in it: no file to ship, nothing for
a shell to interpret); ``parse(logs)`` reads the one result line the script prints. ``allreduce_rank`` is the
measurement each rank runs, importable on its own so that it can be tested with Gloo on a CPU.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any, Iterable, Mapping, Sequence

MARK = "RLINFRA-FITNESS-RAY "

# nccl-tests' all_reduce_perf: algbw = size / time, busbw = algbw * 2 (n - 1) / n (its doc/PERFORMANCE.md).
SIZES_MIB = (8, 64, 256)


def bus_factor(world: int) -> float:
    return 2.0 * (world - 1) / world if world > 1 else 1.0


# One rank of the all-reduce measurement, as text: it runs on the cluster (torch is the cluster's, never the
# controller's), and the tests run the same text with Gloo on a CPU.
ALLREDUCE_CODE = r'''
def bus_factor(world):
    return 2.0 * (world - 1) / world if world > 1 else 1.0


def allreduce_rank(rank, world, init_method, backend, sizes_mib=(8, 64, 256), warmup=2, iters=5, device=None):
    """[{"bytes", "count", "time_us", "algbw", "busbw"}] (GB/s, as nccl-tests) for each size; rank 0's are the result."""
    import time
    import torch
    import torch.distributed as dist
    dist.init_process_group(backend=backend, init_method=init_method, rank=rank, world_size=world)
    rows = []
    try:
        for mib in sizes_mib:
            count = mib * 1024 * 1024 // 4
            tensor = torch.ones(count, dtype=torch.float32, device=device)
            for dummy in range(warmup):
                dist.all_reduce(tensor)
            if device is not None and str(device).startswith("cuda"):
                torch.cuda.synchronize()
            dist.barrier()
            start = time.perf_counter()
            for dummy in range(iters):
                dist.all_reduce(tensor)
            if device is not None and str(device).startswith("cuda"):
                torch.cuda.synchronize()
            elapsed = (time.perf_counter() - start) / iters
            size = count * 4
            algbw = size / elapsed / 1e9
            rows.append(dict(bytes=size, count=count, time_us=round(elapsed * 1e6, 1), algbw=round(algbw, 3),
                             busbw=round(algbw * bus_factor(world), 3)))
    finally:
        dist.destroy_process_group()
    return rows
'''


def table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """nccl-tests' all_reduce_perf table for ``rows``: its columns and widths, the out-of-place half (``#wrong`` is
    N/A: nothing is validated), and its ``# Avg bus bandwidth`` line."""
    lines = [
        "#       size         count      type   redop    root     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)       ",
    ]
    for r in rows:
        lines.append(
            "%12d  %12d  %8s  %6s  %6d  %7.1f  %6.2f  %6.2f  %5s"
            % (r["bytes"], r["count"], "float", "sum", -1, r["time_us"], r["algbw"], r["busbw"], "N/A")
        )
    if rows:
        lines.append("# Avg bus bandwidth    : %g " % round(sum(r["busbw"] for r in rows) / len(rows), 3))
    return lines


SCRIPT = r"""
import json, socket, sys, time
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as Pin
P = json.loads(%(params)r)
ray.init()
nodes = sorted([n for n in ray.nodes() if n.get("Alive")], key=lambda n: n["NodeManagerAddress"])
ip_of = {n["NodeID"]: n["NodeManagerAddress"] for n in nodes}
head_ip = P["head_ip"]

@ray.remote(num_cpus=0)
def make(size):
    return b"\0" * size

@ray.remote(num_cpus=0)
def fetch(refs):
    t = time.perf_counter()
    data = ray.get(refs[0])
    return time.perf_counter() - t, len(data)

size = int(P["object_mib"]) * 1024 * 1024
ids = [n["NodeID"] for n in nodes]
if len(ids) <= int(P["pairs_max"]):
    pairs = [(a, b) for a in ids for b in ids if a != b]
else:
    head = next(i for i in ids if ip_of[i] == head_ip)
    pairs = [(a, head) for a in ids if a != head] + [(head, b) for b in ids if b != head]
out = {"nodes": [ip_of[i] for i in ids], "objects": [], "allreduce": None}
for a, b in pairs:
    try:
        ref = make.options(scheduling_strategy=Pin(a, soft=False)).remote(size)
        ray.wait([ref], fetch_local=False)
        dt, got = ray.get(fetch.options(scheduling_strategy=Pin(b, soft=False)).remote([ref]), timeout=120)
        out["objects"].append({"from": ip_of[a], "to": ip_of[b], "bytes": got, "seconds": round(dt, 4),
                               "gbit": round(got * 8 / max(dt, 1e-6) / 1e9, 4)})
    except Exception as exc:
        out["objects"].append({"from": ip_of[a], "to": ip_of[b], "error": str(exc).splitlines()[0][:200]})

try:
    import torch
    have_torch = True
except Exception:
    have_torch = False
if not have_torch:
    out["allreduce"] = {"skipped": "torch is not in the cluster's environment"}
elif P["allreduce"] != "off":
    sys.path.insert(0, ".")
    gpus = int(sum(n.get("Resources", {}).get("GPU", 0) for n in nodes))
    backend = "nccl" if gpus else "gloo"
    if gpus and P["allreduce"] == "gloo":
        backend = "gloo"
    code = P["rank_code"]
    ns = {}
    exec(compile(code, "<allreduce>", "exec"), ns)
    Rank = ray.remote(ns["Rank"])
    # rank 0 holds the rendezvous store at the head's address: the head's ranks come first
    order = sorted(ids, key=lambda i: ip_of[i] != head_ip)
    if backend == "nccl":
        workers = [Rank.options(num_gpus=1, scheduling_strategy=Pin(i, soft=False)).remote()
                   for i in order for dummy in range(int(next(n for n in nodes if n["NodeID"] == i).get("Resources", {}).get("GPU", 0)))]
    else:
        workers = [Rank.options(num_cpus=0, scheduling_strategy=Pin(i, soft=False)).remote() for i in order]
    world = len(workers)
    init = "tcp://%%s:%%d" %% (head_ip, int(P["store_port"]))
    try:
        rows = ray.get([w.run.remote(r, world, init, backend, P["sizes_mib"]) for r, w in enumerate(workers)],
                       timeout=float(P["allreduce_timeout"]))
        out["allreduce"] = {"backend": backend, "world": world, "rows": rows[0]}
    except Exception as exc:
        out["allreduce"] = {"backend": backend, "world": world, "error": str(exc).splitlines()[0][:300]}
print(%(mark)r + json.dumps(out), flush=True)
"""

RANK = r"""
class Rank:
    def run(self, rank, world, init, backend, sizes):
        import os
        device = None
        if backend == "nccl":
            import torch
            torch.cuda.set_device(0)
            device = "cuda:0"
        ns = {}
        exec(compile(%(fn)r, "<allreduce_rank>", "exec"), ns)
        return ns["allreduce_rank"](rank, world, init, backend, sizes_mib=sizes, device=device)
"""


def _rank_code() -> str:
    return RANK % dict(fn=ALLREDUCE_CODE)


def entrypoint(
    head_ip: str,
    object_mib: int = 16,
    pairs_max: int = 8,
    allreduce: str = "auto",
    store_port: int = 6386,
    sizes_mib: Iterable[int] = SIZES_MIB,
    allreduce_timeout: float = 300,
) -> str:
    """The Ray job's command line: ``python -c`` of the script above, its parameters inside it."""
    params = json.dumps(
        dict(
            head_ip=head_ip,
            object_mib=object_mib,
            pairs_max=pairs_max,
            allreduce=allreduce,
            store_port=store_port,
            sizes_mib=list(sizes_mib),
            allreduce_timeout=allreduce_timeout,
            rank_code=_rank_code(),
        )
    )
    code = SCRIPT % dict(params=params, mark=MARK)
    encoded = base64.b64encode(code.encode()).decode()
    return "python -c \"import base64; exec(base64.b64decode('%s'))\"" % encoded


def parse(logs: str | None) -> dict[str, Any]:
    """The script's result from the job's logs; ValueError (one line) when it printed none."""
    for line in reversed((logs or "").splitlines()):
        if line.startswith(MARK):
            try:
                value = json.loads(line[len(MARK) :])
            except ValueError as exc:
                raise ValueError("the Ray check's result line is not JSON (%s)" % exc) from None
            if isinstance(value, dict):
                return value
    tail = [line for line in (logs or "").strip().splitlines() if line.strip()][-1:] or ["no output"]
    raise ValueError("the Ray check printed no result (its log ends: %s)" % tail[0][:200])


def slowest(objects: Iterable[Mapping[str, Any]] | None) -> float | None:
    """The slowest transfer (Gbit/s), for the table; None when none was measured."""
    rates = [o["gbit"] for o in objects or [] if isinstance(o.get("gbit"), (int, float)) and math.isfinite(o["gbit"])]
    return min(rates) if rates else None
