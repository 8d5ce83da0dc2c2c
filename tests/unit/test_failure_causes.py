"""Causes of a failed training run (module_utils/verl/failure_causes.py): each real driver-log line of
tests/unit/fixtures/gpu/training_failures.txt and nccl_connection_lines.txt (CUDA out of memory in every torch
wording, NCCL watchdog timeouts, NCCL losing a peer, a full volume during torch.save or a safetensors save) read into
its exact cause line, newest first and once each; the full volume put on the checkpoint volume that holds it;
secrets masked and echoes clipped; and the kernel events of kernel_lines.txt as lines naming the node.

The log lines are real, each with its public source in the fixture files and tests/unit/fixtures/gpu/SOURCES.md;
where a test changes one (a path appended, a secret added), it says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.node import kernel_log
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import failure_causes

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gpu"


def log_lines(name):
    """The log lines of a fixture, without its ``#`` comment and source lines."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def blocks(name):
    """The blank-line separated blocks of a fixture, without comments."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return ["\n".join(line for line in block.splitlines() if not line.startswith("#")) for block in text.split("\n\n")]


OOM_ADVICE = (
    "lower the micro-batch size (e.g. actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu) or the rollout's "
    "gpu_memory_utilization"
)
TIMEOUT_ADVICE = "(a node or its network stopped answering; check the nodes' kernel logs and fitness.yml)"
FULL = "free space on it, or lower trainer.max_actor_ckpt_to_keep if it holds the checkpoints"

# Each line of training_failures.txt, in file order, with its cause ([] for the lines that name none).
LINE_CAUSES = [
    "CUDA out of memory (tried to allocate 22.00 MiB on GPU 0): " + OOM_ADVICE,
    "CUDA out of memory (tried to allocate 22.78 GiB on GPU 0): " + OOM_ADVICE,  # torch.OutOfMemoryError (>= 2.4)
    "CUDA out of memory (tried to allocate 55.88 GiB on GPU 0): " + OOM_ADVICE,
    "CUDA out of memory (tried to allocate 1.70 GiB on GPU 0): " + OOM_ADVICE,  # torch 2.1 wording
    "CUDA out of memory (tried to allocate 1.69 GiB on GPU 0): " + OOM_ADVICE,  # torch 2.0: "(GPU 0; ..."
    "CUDA out of memory (tried to allocate 12.50 MiB on GPU 0): " + OOM_ADVICE,  # RuntimeError, torch 1.0
    "an NCCL ALLREDUCE timed out after 1800 s " + TIMEOUT_ADVICE,  # ran for 1802212 ms
    "an NCCL ALLREDUCE timed out after 1800 s " + TIMEOUT_ADVICE,  # "NCCL communicator was aborted ..."
    "an NCCL ALLREDUCE timed out after 1800 s " + TIMEOUT_ADVICE,  # ran for 25625613 ms
    "an NCCL ALLREDUCE timed out after 600 s " + TIMEOUT_ADVICE,  # torch 2.4 prefix, NumelIn/NumelOut
    None,  # "Exception ... detected by watchdog"
    "an NCCL ALLREDUCE timed out after 600 s " + TIMEOUT_ADVICE,
    "an NCCL REDUCE_SCATTER_BASE timed out after 600 s " + TIMEOUT_ADVICE,
    "an NCCL ALLREDUCE timed out after 8 s " + TIMEOUT_ADVICE,
    None,  # File ".../torch/serialization.py"
    None,  # zip_file.write_record(...)
    "a volume is full (No space left on device): " + FULL,
    None,
    "a volume is full (No space left on device): " + FULL,  # Metaflow-prefixed
    "a volume is full (No space left on device writing safetensors): " + FULL,
    "a volume is full (No space left on device): " + FULL,
    None,  # EIO on a full disk: not told apart
]


def test_each_real_line_gives_its_cause():
    lines = log_lines("training_failures.txt")
    assert len(lines) == len(LINE_CAUSES)
    for line, cause in zip(lines, LINE_CAUSES):
        expected = [cause] if cause else []
        assert failure_causes.driver_log_causes(line) == expected, line


def test_the_whole_log_newest_first_each_once():
    assert failure_causes.driver_log_causes("\n".join(log_lines("training_failures.txt"))) == [
        "a volume is full (No space left on device): " + FULL,
        "an NCCL ALLREDUCE timed out after 8 s " + TIMEOUT_ADVICE,
        "an NCCL REDUCE_SCATTER_BASE timed out after 600 s " + TIMEOUT_ADVICE,
        "CUDA out of memory (tried to allocate 12.50 MiB on GPU 0): " + OOM_ADVICE,
    ]
    assert not failure_causes.driver_log_causes("")
    assert not failure_causes.driver_log_causes(None)


def test_every_rank_running_out_of_memory_is_one_cause():
    line = log_lines("training_failures.txt")[0]
    ranks = "\n".join(
        "[rank%d]: %s" % (rank, line.replace("GPU 0", "GPU %d" % rank)) for rank in range(8)
    )  # ranks built here
    assert failure_causes.driver_log_causes(ranks) == [
        "CUDA out of memory (tried to allocate 22.00 MiB on GPU 7): " + OOM_ADVICE
    ]


ENOSPC = "OSError: [Errno 28] No space left on device"  # the real line (torch.save); the tests below append a path
VOLUMES = [{"path": "/data", "free_bytes": 5 << 40}, {"path": "/data/checkpoints", "free_bytes": 0}]


def test_full_volume_named_by_the_path_of_the_line():
    line = ENOSPC + ": '/data/checkpoints/global_step_100/actor/model_world_size_8_rank_0.pt'"  # CPython's format
    assert failure_causes.driver_log_causes(line, volumes=VOLUMES) == [
        "the checkpoint volume /data/checkpoints is full (0 B free): free space or lower trainer.max_actor_ckpt_to_keep"
    ]
    assert failure_causes.driver_log_causes(line) == [
        "a volume is full (No space left on device at /data/checkpoints/global_step_100/actor/model_world_size_8_rank_0.pt): "
        + FULL
    ]
    elsewhere = ENOSPC + ": '/tmp/ray/session_latest/logs/raylet.out'"
    assert failure_causes.driver_log_causes(elsewhere, volumes=[VOLUMES[1]]) == [
        "a volume is full (No space left on device at /tmp/ray/session_latest/logs/raylet.out): " + FULL
    ]
    # /data/checkpoints-old is not inside /data/checkpoints
    assert failure_causes.driver_log_causes(ENOSPC + ": '/data/checkpoints-old/f'", volumes=[VOLUMES[1]]) == [
        "a volume is full (No space left on device at /data/checkpoints-old/f): " + FULL
    ]


def test_full_volume_without_a_path_is_the_nearly_full_checkpoint_volume():
    safetensors = log_lines("training_failures.txt")[-3]
    assert "StorageFull" in safetensors
    volumes = [{"path": "/data/checkpoints", "free_bytes": 512 << 20}, {"path": "/scratch", "free_bytes": 3 << 30}]
    assert failure_causes.driver_log_causes(safetensors, volumes=volumes) == [
        "the checkpoint volume /data/checkpoints is full (512 MiB free): free space or lower trainer.max_actor_ckpt_to_keep"
    ]
    assert failure_causes.driver_log_causes(ENOSPC, volumes=[{"path": "/scratch", "free_bytes": 3 << 30}]) == [
        "a volume is full (No space left on device): " + FULL
    ]


NCCL_CAUSES = [
    "NCCL lost a connection between nodes (socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host)",
    "NCCL lost a connection between nodes (socketProgressOpt: Call to recv from 172....<33759> failed : Connection reset by peer)",
    "NCCL lost a connection between nodes (Net : Connection closed by remote peer user<50260>)",
    "NCCL lost a connection between nodes (socketProgress: Connection closed by remote peer node1<57557>)",
    "NCCL lost a connection between nodes (unhandled system error)",
]


def test_nccl_losing_a_peer():
    assert [failure_causes.driver_log_causes(block) for block in blocks("nccl_connection_lines.txt")] == [
        [cause] for cause in NCCL_CAUSES
    ]


def test_connection_errors_outside_nccl_are_not_nccl_causes():
    # torch's TCPStore (pytorch/pytorch#74146), not NCCL
    assert not failure_causes.driver_log_causes("RuntimeError: Connection reset by peer")


def test_secrets_are_masked():
    # real lines with a secret added (built here)
    path = ENOSPC + ": '/mnt/s3/ckpt?X-Amz-Security-Token=FwoGZXIvYXdzEJr&sig=1'"
    causes = failure_causes.driver_log_causes(path)
    assert len(causes) == 1
    cause = causes[0]
    assert "FwoGZXIvYXdzEJr" not in cause and "X-Amz-Security-Token=********" in cause
    nccl = "ubuntu:39964:40044 [0] misc/socket.cc:49 NCCL WARN socketProgress: Connection closed by remote peer hf_token=hf_AbCdEf123456"
    assert failure_causes.driver_log_causes(nccl) == [
        "NCCL lost a connection between nodes (socketProgress: Connection closed by remote peer hf_token=********)"
    ]
    assert masking.mask_patterns(
        "HF_TOKEN=hf_abc api_key: 'zzz' Authorization: Bearer abcdefghijkl https://user:pw@host/x tokenizer=gpt2"
    ) == (
        "HF_TOKEN=******** api_key: '********' Authorization: Bearer ******** https://user:********@host/x tokenizer=gpt2"
    )
    # Fresh forms: a token as a URL's user (any case, git+), a password after an empty user, a signed URL's query.
    assert masking.mask_patterns(
        "HTTPS://ghp_s3cr3t@github.com/x git+https://tok@host/y https://:pw@host/z "
        "'https://cdn.example/f?Expires=1&Signature=s3cr3t'"
    ) == (
        "HTTPS://********@github.com/x git+https://********@host/y https://:********@host/z "
        "'https://cdn.example/f?********'"
    )
    assert masking.holds_credentials("HTTPS://tok@host/x") and masking.holds_credentials("Bearer abcdefghij")
    assert not masking.holds_credentials("ssh://git@host/x") and not masking.holds_credentials("/data/keys:/opt/x")


def test_echoes_are_clipped():
    line = ENOSPC + ": '/data/" + "a" * 300 + "'"  # a long path, built here
    causes = failure_causes.driver_log_causes(line)
    assert len(causes) == 1
    echoed = causes[0].split("No space left on device at ", 1)[1].split("): ", 1)[0]
    assert len(echoed) == 120 and echoed.endswith("...")


@pytest.mark.parametrize(
    "count, text", [(0, "0 B"), (1023, "1023 B"), (512 << 10, "512 KiB"), (3 << 29, "1.5 GiB"), (5 << 40, "5 TiB")]
)
def test_sizes(count, text):
    assert failure_causes._size(count) == text  # pylint: disable=protected-access


KERNEL_CAUSES = [
    "gpu-2: Xid 13 (Graphics Engine Exception) on 0000:cb:00 at Fri Aug 30 11:43:09 2024",
    "gpu-2: Xid 13 (Graphics Engine Exception) on 0000:38:00 at 2025-01-21T04:41:44+00:00",
    "gpu-2: Xid 13 (Graphics Engine Exception) on 0000:01:00 31609 s after boot",
    "gpu-2: Xid 31 (GPU memory page fault) on 0000:01:00 2 times, first 22859 s after boot",
    "gpu-2: Xid 31 (GPU memory page fault) on 0000:0a:00 14328 s after boot",
    "gpu-2: Xid 43 (GPU stopped processing) on 0000:38:00 at 2025-01-21T04:41:44+00:00",
    "gpu-2: Xid 45 (Preemptive cleanup, due to previous errors) on 0000:dc:00",
    "gpu-2: Xid 45 (Preemptive cleanup, due to previous errors) on 0000:ed:00",
    "gpu-2: Xid 45 (Preemptive cleanup, due to previous errors) on 0000:0a:00 14370 s after boot",
    "gpu-2: Xid 48 (Double Bit ECC Error) on 0000:07:00 at Dec 2 11:38:47",
    "gpu-2: Xid 62 (Internal micro-controller halt) on 0000:0a:00 14370 s after boot",
    "gpu-2: Xid 63 (GPU memory remapping event) on 0000:10:1c",
    "gpu-2: Xid 64 (GPU memory remapping failure) on 0000:07:00 at Dec 2 11:38:47",
    "gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:02:00 74889 s after boot",
    "gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:2b:00 at May 18 19:02:39",  # the Xid line and its companion
    "gpu-2: Xid 79 (GPU has fallen off the bus) on 0000:b3:00 1843 s after boot",
    "gpu-2: Xid 94 (Contained memory error) on 0000:01:00",
    "gpu-2: Xid 95 (Uncontained memory error) on 0000:01:00",
    "gpu-2: Xid 109 (Context Switch Timeout Error) on 0000:cb:00 at Fri Aug 30 11:43:14 2024",
    "gpu-2: Xid 119 (GSP RPC Timeout) on 0000:9b:00 2 times, first at Sun Feb 23 16:24:18 2025",
    "gpu-2: Xid 119 (GSP RPC Timeout) on 0001:6c:00 at Sun Apr 26 23:12:26 2026",
    "gpu-2: Xid 145 (NVLINK: RLW Error) on 0018:01:00",
    "gpu-2: Xid 149 (NVLINK: NETIR Error) on 0019:01:00",
    "gpu-2: Xid 149 (NVLINK: NETIR Error) on 0000:00:00",
    "gpu-2: the OOM killer killed python3 (pid 15784) at May 15 23:09:30",
    "gpu-2: the OOM killer killed python (pid 7899) at Sun Mar 30 08:24:00 2025",
    "gpu-2: the OOM killer killed python (pid 89746) at Thu Mar 14 01:57:54 2019",
    "gpu-2: eth0 link down 28432 s after boot",
    "gpu-2: eth11 link down at Nov 17 13:16:56",
    "gpu-2: eth5 link down at Sun Jun 11 23:02:41 2023",
    "gpu-2: uncorrected PCIe error (AER) on 0000:00:02.0 74889 s after boot",  # "received" and "PCIe Bus Error" lines
    "gpu-2: uncorrected PCIe error (AER) on 0000:00:03.0",
    "gpu-2: uncorrectable memory error (EDAC MC3) 11189 s after boot",
]


def test_kernel_causes_of_the_real_lines():
    events = kernel_log.kernel_events(log_lines("kernel_lines.txt"))
    assert failure_causes.kernel_causes(events, "gpu-2") == KERNEL_CAUSES
    assert failure_causes.kernel_causes(events[:1], "") == [
        "Xid 13 (Graphics Engine Exception) on 0000:cb:00 at Fri Aug 30 11:43:09 2024"
    ]
    assert not failure_causes.kernel_causes([], "gpu-2")
