"""fitness.yml's all-reduce measurement for real: the exact text the cluster runs (fitness_ray.ALLREDUCE_CODE), two
ranks with torch's Gloo backend on loopback in the merge test's CPU torch environment, reported as nccl-tests reports
it (algbw = bytes / time, busbw = algbw * 2(n-1)/n)."""

from __future__ import annotations

import json
import os
import socket
import subprocess

from ansible_collections.rlinfra.verl.plugins.module_utils.node import fitness_ray
from tests.integration.test_merge import merge_venv  # noqa: F401  (the fixture)

RANK = """
import json, sys
ns = {}
exec(compile(open(sys.argv[1]).read(), "<allreduce>", "exec"), ns)
rows = ns["allreduce_rank"](int(sys.argv[2]), 2, "tcp://127.0.0.1:%s" % sys.argv[3], "gloo", sizes_mib=(1, 4),
                            warmup=1, iters=3)
print("ROWS " + json.dumps(rows))
"""


def test_two_gloo_ranks_measure_and_report_as_nccl_tests(merge_venv, tmp_path):  # noqa: F811
    code = tmp_path / "allreduce.py"
    code.write_text(fitness_ray.ALLREDUCE_CODE)
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen(
            [str(merge_venv / "bin" / "python"), str(script), str(code), str(rank), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in (0, 1)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    rows = json.loads(next(l for l in outs[0][0].splitlines() if l.startswith("ROWS "))[5:])
    assert [(r["bytes"], r["count"]) for r in rows] == [(1 << 20, 1 << 18), (4 << 20, 1 << 20)]
    for r in rows:
        assert r["time_us"] > 0 and r["algbw"] > 0
        assert abs(r["algbw"] - r["bytes"] / (r["time_us"] / 1e6) / 1e9) <= 0.01 * r["algbw"] + 0.002
        assert r["busbw"] == round(r["algbw"] * fitness_ray.bus_factor(2), 3) == r["algbw"]
    table = fitness_ray.table(rows)
    assert table[2].split()[:5] == ["1048576", "262144", "float", "sum", "-1"] and table[-1].startswith(
        "# Avg bus bandwidth"
    )
