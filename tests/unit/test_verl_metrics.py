"""Every step's metrics as CSV and the key ones as a PNG (module_utils/verl/metrics.py), from real verl log lines.

The sample (tests/unit/fixtures/verl_log_sample.txt) is verl's console output as quoted in public issue threads:
Ray's ``(TaskRunner pid=N)`` prefixes, ``{v:.3f}`` and full-precision pprint values, e-notation, a validation-only
step 0, tqdm lines in between. The PNG is decoded here (zlib, PNG filters) to check what each panel holds.
"""

from __future__ import annotations

import csv
import io
import os
import stat
import struct
import zlib

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics

SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "verl_log_sample.txt")


def sample():
    with open(SAMPLE) as f:
        return f.read()


def decode_png(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB PNG, checking its structure on the way."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks.append((kind, body))
        pos += 12 + length
    assert [k for k, dummy in chunks][0] == b"IHDR" and chunks[-1][0] == b"IEND"
    width, height, depth, color, dummy, dummy2, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, color, interlace) == (8, 2, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    stride = 3 * width + 1
    assert len(raw) == stride * height
    rows = []
    for y in range(height):
        line = raw[y * stride : (y + 1) * stride]
        assert line[0] == 0  # no filter: what plot() writes
        rows.append([tuple(line[1 + 3 * x : 4 + 3 * x]) for x in range(width)])
    return width, height, rows


def test_the_sample_is_read_step_by_step():
    rows = verl_metrics.steps(sample())
    assert [s for s, dummy in rows] == [0, 2, 5, 34, 83]
    by_step = dict(rows)
    assert by_step[0] == {
        "val-aux/openai/gsm8k/reward/mean@1": 0.565,
        "val-aux/openai/gsm8k/score/mean@1": 0.565,
        "val-core/openai/gsm8k/acc/mean@1": 0.508,
    }
    assert by_step[2]["timing_s/step"] == 96.551 and by_step[2]["critic/score/mean"] == 0.011
    assert by_step[34]["actor/ppo_kl"] == -8.163164312320433e-06
    assert by_step[34]["critic/score/mean"] == -0.0182796623557806
    assert by_step[5]["val/test_score/openai/gsm8k"] == 0.171
    assert len(by_step[83]) == 45


def test_csv_has_every_step_and_every_key(tmp_path):
    text = sample()
    result = verl_metrics.write(str(tmp_path / "rlinfra-x-default"), text)
    assert result["csv"] == str(tmp_path / "rlinfra-x-default.metrics.csv") and result["steps"] == 5
    table = list(csv.reader(open(result["csv"])))
    header, body = table[0], table[1:]
    assert header[0] == "step" and header[1] == "val-aux/openai/gsm8k/reward/mean@1"
    assert len(header) == 1 + len(set().union(*(m for dummy, m in verl_metrics.steps(text))))
    assert [r[0] for r in body] == ["0", "2", "5", "34", "83"]
    rows = list(csv.DictReader(io.StringIO(open(result["csv"]).read())))
    assert float(rows[3]["actor/ppo_kl"]) == -8.163164312320433e-06  # full precision kept
    assert rows[0]["critic/score/mean"] == "" and rows[1]["timing_s/step"] == "96.551"
    assert rows[3]["global_seqlen/min"] == "419336"  # whole numbers stay whole
    for path in (result["csv"], result["png"]):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == [
        "rlinfra-x-default.metrics.csv",
        "rlinfra-x-default.metrics.png",
    ]  # no temp files


def test_a_step_printed_twice_keeps_its_last_line():
    text = "step:1 - a:1.0\nstep:2 - a:2.0\nstep:1 - a:1.5 - b:3\n"
    assert verl_metrics.steps(text) == [(1, {"a": 1.5, "b": 3.0}), (2, {"a": 2.0})]


def ink(rows, box):
    x0, y0, x1, y1 = box
    return sum(1 for y in range(y0 + 1, y1) for x in range(x0 + 1, x1) if rows[y][x] != verl_metrics.WHITE)


def test_the_plot_has_one_panel_per_key_metric_with_its_line(tmp_path):
    result = verl_metrics.write(str(tmp_path / "r"), sample())
    assert result["panels"] == ["critic/score/mean", "actor/pg_loss", "response_length/mean", "timing_s/step"]
    width, height, rows = decode_png(open(result["png"], "rb").read())
    assert (width, height) == (verl_metrics.WIDTH, 4 * verl_metrics.PANEL_HEIGHT)

    def line_pixels(box):
        return [
            (x, y) for y in range(box[1], box[3]) for x in range(box[0] + 1, box[2]) if rows[y][x] == verl_metrics.LINE
        ]

    for index in range(3):  # reward, loss, response length: a line across the panel, first step to last
        xs = [x for x, dummy in line_pixels(verl_metrics.plot_area(index))]
        assert (
            len(xs) > 100
            and min(xs) <= verl_metrics.LEFT + 4
            and max(xs) >= verl_metrics.WIDTH - verl_metrics.RIGHT - 4
        ), "panel %d" % index
    # timing_s/step is in one line of the sample only (step 2): one point, drawn as a 5x5 dot at the left.
    dot = line_pixels(verl_metrics.plot_area(3))
    assert 16 <= len(dot) <= 25 and max(x for x, dummy in dot) < verl_metrics.LEFT + 8
    # The reward rises from step 34 (-0.018) to step 83 (0.906): the line's right end is higher (smaller y).
    reward = line_pixels(verl_metrics.plot_area(0))
    right = [y for x, y in reward if x >= max(x for x, dummy in reward) - 1]
    assert min(right) < min(y for x, y in reward if x <= verl_metrics.LEFT + 4) + 1


def test_missing_metrics_leave_their_panel_out_and_no_steps_no_files(tmp_path):
    only_reward = (
        "(TaskRunner pid=1) step:1 - critic/score/mean:0.1\n(TaskRunner pid=1) step:2 - critic/score/mean:0.3\n"
    )
    result = verl_metrics.write(str(tmp_path / "a"), only_reward)
    assert result["panels"] == ["critic/score/mean"]
    width, height, rows = decode_png(open(result["png"], "rb").read())
    assert height == verl_metrics.PANEL_HEIGHT
    # Metrics but none of the plotted ones: the CSV, no PNG.
    result = verl_metrics.write(str(tmp_path / "b"), "step:1 - perf/mfu/actor:0.3\n")
    assert result["csv"] and result["png"] is None and not os.path.exists(str(tmp_path / "b.metrics.png"))
    # No step yet: nothing written, nothing to name.
    result = verl_metrics.write(str(tmp_path / "c"), "Training Progress: 0%|\nstarting\n")
    assert result == dict(csv=None, png=None, steps=0, panels=[])
    assert verl_metrics.describe(result) == [] and not os.path.exists(str(tmp_path / "c.metrics.csv"))


def test_nan_and_a_flat_line_are_drawn_without_error(tmp_path):
    text = (
        "step:1 - actor/pg_loss:nan - critic/score/mean:0.5\nstep:2 - actor/pg_loss:0.2 - critic/score/mean:0.5\n"
        "step:3 - actor/pg_loss:inf - critic/score/mean:0.5\n"
    )
    result = verl_metrics.write(str(tmp_path / "n"), text)
    assert result["panels"] == ["critic/score/mean", "actor/pg_loss"]
    rows = list(csv.DictReader(open(result["csv"])))
    assert rows[0]["actor/pg_loss"] == "nan" and rows[2]["actor/pg_loss"] == "inf"
    decode_png(open(result["png"], "rb").read())


def test_the_summary_names_both_files():
    lines = verl_metrics.describe(
        dict(
            csv="/p/artifacts/x/id.metrics.csv",
            png="/p/artifacts/x/id.metrics.png",
            steps=30,
            panels=["reward/mean", "pg_loss"],
        )
    )
    assert lines == [
        "metrics:       /p/artifacts/x/id.metrics.csv (30 steps)",
        "plot:          /p/artifacts/x/id.metrics.png (reward/mean, pg_loss)",
    ]


def test_follow_keeps_the_first_step_of_the_log_as_well_as_the_last():
    # The watchdog's proof of a resume: the attempt's first logged step, however late the poll that reads it.
    follow = verl_metrics.Follow()
    follow.feed("smoke_rl: resumed from /ckpt/global_step_5 (step 5)\nstep:6 - reward/mean:0.5\nstep:")
    assert follow.first == 6 and follow.last[0] == 6
    follow.feed("7 - reward/mean:0.6\nstep:8 - reward/mean:0.7\n")
    assert follow.first == 6 and follow.last[0] == 8
