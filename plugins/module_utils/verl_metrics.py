# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Every step's metrics of a driver log as a CSV table and a PNG plot, beside the log in artifacts/.

The input is what verl prints (``step:N - key:value - ...``, read by :mod:`verl_log`), one row per step
(a step printed twice keeps its last line). The plot shows the metrics people look at first - reward,
loss, response length, step time - each against the step in a panel of its own; a panel whose metric
the log does not have is left out. It is drawn here, with the standard library only (zlib), so the
controller needs nothing beyond ansible-core.
"""

from __future__ import annotations

import csv
import io
import math
import os
import struct
import zlib

from ansible_collections.rlinfra.verl.plugins.module_utils import files
from ansible_collections.rlinfra.verl.plugins.module_utils.verl_log import parse_progress_line

# (panel title, the metric keys it may show, first found wins): verl's names, then the smoke program's.
PANELS = (
    ("reward", ("critic/score/mean", "critic/rewards/mean", "reward/mean")),
    ("loss", ("actor/pg_loss", "actor/loss", "pg_loss", "critic/vf_loss")),
    ("response length", ("response_length/mean",)),
    ("step time (s)", ("timing_s/step",)),
)
MODE = 0o600


def steps(text):
    """[(step, {key: value})] in step order, from a log's text."""
    by_step = {}
    for line in (text or "").splitlines():
        if "step:" in line:
            parsed = parse_progress_line(line)
            if parsed:
                by_step[parsed[0]] = parsed[1]
    return sorted(by_step.items())


def columns(rows):
    """``step`` then every key, in the order the log first printed it."""
    seen = {}
    for dummy, metrics in rows:
        for key in metrics:
            seen.setdefault(key, None)
    return ["step"] + list(seen)


def csv_text(rows):
    out = io.StringIO()
    names = columns(rows)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    for step, metrics in rows:
        writer.writerow([step] + [_cell(metrics.get(k)) for k in names[1:]])
    return out.getvalue()


def _cell(value):
    if value is None:
        return ""
    return repr(float(value)) if not float(value).is_integer() or abs(value) >= 1e16 else str(int(value))


def panels(rows):
    """[(title, key, [(step, value)])] for the plot: the key metrics the log has (finite values only)."""
    out = []
    for title, keys in PANELS:
        for key in keys:
            points = [(s, m[key]) for s, m in rows if key in m and math.isfinite(m[key])]
            if points:
                out.append((title, key, points))
                break
    return out


def write(base, text):
    """Write ``<base>.metrics.csv`` and ``<base>.metrics.png`` (0600, whole or not at all) from a log's text.

    Returns dict(csv, png, steps, panels): ``csv`` is None when the log has no step line yet, ``png`` when it
    has none of the plotted metrics either.
    """
    rows = steps(text)
    out = dict(csv=None, png=None, steps=len(rows), panels=[])
    if not rows:
        return out
    out["csv"] = base + ".metrics.csv"
    files.write_if_changed(out["csv"], csv_text(rows), MODE)
    shown = panels(rows)
    if shown:
        out["png"] = base + ".metrics.png"
        files.write_atomic(out["png"], plot(shown), MODE)
        out["panels"] = [key for dummy, key, dummy2 in shown]
    return out


# --- drawing ----------------------------------------------------------------------------------

WIDTH, PANEL_HEIGHT, SCALE = 720, 176, 2
LEFT, RIGHT, TOP, BOTTOM = 112, 20, 30, 24
WHITE, INK, GRID, LINE = (255, 255, 255), (30, 30, 30), (190, 190, 190), (31, 119, 180)

# A 5x7 font for the characters metric names and numbers use (upper case is drawn as lower case).
_FONT_ROWS = {
    "0": ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.", "1": "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
    "2": ".###.|#...#|....#|...#.|..#..|.#...|#####", "3": "#####|...#.|..#..|...#.|....#|#...#|.###.",
    "4": "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.", "5": "#####|#....|####.|....#|....#|#...#|.###.",
    "6": "..##.|.#...|#....|####.|#...#|#...#|.###.", "7": "#####|....#|...#.|..#..|.#...|.#...|.#...",
    "8": ".###.|#...#|#...#|.###.|#...#|#...#|.###.", "9": ".###.|#...#|#...#|.####|....#|...#.|.##..",
    "a": ".....|.....|.###.|....#|.####|#...#|.####", "b": "#....|#....|#.##.|##..#|#...#|#...#|####.",
    "c": ".....|.....|.###.|#....|#....|#...#|.###.", "d": "....#|....#|.##.#|#..##|#...#|#...#|.####",
    "e": ".....|.....|.###.|#...#|#####|#....|.###.", "f": "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
    "g": ".....|.####|#...#|#...#|.####|....#|.###.", "h": "#....|#....|#.##.|##..#|#...#|#...#|#...#",
    "i": "..#..|.....|.##..|..#..|..#..|..#..|.###.", "j": "...#.|.....|..##.|...#.|...#.|#..#.|.##..",
    "k": "#....|#....|#..#.|#.#..|##...|#.#..|#..#.", "l": ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
    "m": ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#", "n": ".....|.....|#.##.|##..#|#...#|#...#|#...#",
    "o": ".....|.....|.###.|#...#|#...#|#...#|.###.", "p": ".....|.....|####.|#...#|####.|#....|#....",
    "q": ".....|.....|.##.#|#..##|.####|....#|....#", "r": ".....|.....|#.##.|##..#|#....|#....|#....",
    "s": ".....|.....|.###.|#....|.###.|....#|####.", "t": ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
    "u": ".....|.....|#...#|#...#|#...#|#..##|.##.#", "v": ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
    "w": ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.", "x": ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
    "y": ".....|.....|#...#|#...#|.####|....#|.###.", "z": ".....|.....|#####|...#.|..#..|.#...|#####",
    ".": ".....|.....|.....|.....|.....|.##..|.##..", "-": ".....|.....|.....|#####|.....|.....|.....",
    "_": ".....|.....|.....|.....|.....|.....|#####", "/": ".....|....#|...#.|..#..|.#...|#....|.....",
    ":": ".....|.##..|.##..|.....|.##..|.##..|.....", "(": "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
    ")": ".#...|..#..|...#.|...#.|...#.|..#..|.#...", "+": ".....|..#..|..#..|#####|..#..|..#..|.....",
    "=": ".....|.....|#####|.....|#####|.....|.....", "@": ".###.|#...#|#.###|#.#.#|#.##.|#....|.###.",
    " ": ".....|.....|.....|.....|.....|.....|.....", "?": ".###.|#...#|....#|...#.|..#..|.....|..#..",
}
FONT = {ch: rows.split("|") for ch, rows in _FONT_ROWS.items()}
GLYPH_W = 6 * SCALE  # 5 columns and a space


class Canvas:
    def __init__(self, width, height):
        self.width, self.height = width, height
        self.px = [bytearray(WHITE * width) for dummy in range(height)]

    def dot(self, x, y, color):
        if 0 <= x < self.width and 0 <= y < self.height:
            self.px[y][3 * x:3 * x + 3] = bytes(color)

    def rect(self, x0, y0, x1, y1, color):
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            for x in range(max(0, x0), min(self.width, x1 + 1)):
                self.px[y][3 * x:3 * x + 3] = bytes(color)

    def line(self, x0, y0, x1, y1, color, thick=1):
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        while True:
            self.rect(x0, y0, x0 + thick - 1, y0 + thick - 1, color)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x, y, text, color=INK):
        for ch in str(text).lower():
            rows = FONT.get(ch, FONT["?"])
            for r, row in enumerate(rows):
                for c, bit in enumerate(row):
                    if bit == "#":
                        self.rect(x + c * SCALE, y + r * SCALE, x + c * SCALE + SCALE - 1, y + r * SCALE + SCALE - 1, color)
            x += GLYPH_W
        return x

    def png(self):
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def fmt(value):
    return "%.4g" % value


def plot_area(index):
    """(x0, y0, x1, y1) of panel ``index``'s plotting area."""
    top = index * PANEL_HEIGHT
    return LEFT, top + TOP, WIDTH - RIGHT, top + PANEL_HEIGHT - BOTTOM


def plot(shown):
    """The PNG bytes of the panels ``shown`` (from :func:`panels`)."""
    canvas = Canvas(WIDTH, PANEL_HEIGHT * len(shown))
    for index, (title, key, points) in enumerate(shown):
        x0, y0, x1, y1 = plot_area(index)
        lo, hi = min(v for dummy, v in points), max(v for dummy, v in points)
        first, last = points[0][0], points[-1][0]
        canvas.text(8, y0 - 22, "%s  %s   last %s" % (title, key, fmt(points[-1][1])))
        canvas.line(x0, y0, x0, y1, GRID)
        canvas.line(x0, y1, x1, y1, GRID)
        canvas.text(4, y0, fmt(hi))
        canvas.text(4, y1 - 14, fmt(lo))
        canvas.text(x0, y1 + 6, "step %d" % first)
        label = "step %d" % last
        canvas.text(x1 - len(label) * GLYPH_W, y1 + 6, label)
        span_v = (hi - lo) or 1.0
        span_s = (last - first) or 1
        xy = [(x0 + 2 + int(round((s - first) * (x1 - x0 - 4) / span_s)),
               y1 - 2 - int(round((v - lo) * (y1 - y0 - 4) / span_v)) if hi != lo else (y0 + y1) // 2) for s, v in points]
        if len(xy) == 1:
            canvas.rect(xy[0][0] - 2, xy[0][1] - 2, xy[0][0] + 2, xy[0][1] + 2, LINE)
        for (ax, ay), (bx, by) in zip(xy, xy[1:]):
            canvas.line(ax, ay, bx, by, LINE, thick=2)
    return canvas.png()


def describe(result):
    """The summary's lines for a :func:`write` result."""
    if not result or not result.get("csv"):
        return []
    lines = ["metrics:       %s (%d steps)" % (result["csv"], result["steps"])]
    if result.get("png"):
        lines.append("plot:          %s (%s)" % (result["png"], ", ".join(result["panels"])))
    return lines


def base_of(log_path):
    return os.path.splitext(log_path)[0]
