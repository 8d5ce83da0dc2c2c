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

import array
import csv
import io
import math
import os
import stat
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.verl.log import parse_progress_line

# (panel title, the metric keys it may show, first found wins): verl's names, then the smoke program's.
PANELS = (
    ("reward", ("critic/score/mean", "critic/rewards/mean", "reward/mean")),
    ("loss", ("actor/pg_loss", "actor/loss", "pg_loss", "critic/vf_loss")),
    ("response length", ("response_length/mean",)),
    ("step time (s)", ("timing_s/step",)),
)
MODE = 0o600


def steps(text: str | None) -> list[tuple[int, dict[str, float]]]:
    """[(step, {key: value})] in step order, from a log's text."""
    by_step = {}
    for line in (text or "").splitlines():
        if "step:" in line:
            parsed = parse_progress_line(line)
            if parsed:
                by_step[parsed[0]] = parsed[1]
    return sorted(by_step.items())


def columns(rows: Iterable[tuple[Any, Mapping[str, Any]]]) -> list[str]:
    """``step`` then every key, in the order the log first printed it."""
    seen: dict[str, None] = {}
    for _dummy, metrics in rows:
        for key in metrics:
            seen.setdefault(key, None)
    return ["step"] + list(seen)


def csv_text(rows: Sequence[tuple[int, Mapping[str, float]]]) -> str:
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


def panels(rows: Sequence[tuple[int, Mapping[str, float]]]) -> list[tuple[str, str, list[tuple[int, float]]]]:
    """[(title, key, [(step, value)])] for the plot: the key metrics the log has (finite values only)."""
    out = []
    for title, keys in PANELS:
        for key in keys:
            points = [(s, m[key]) for s, m in rows if key in m and math.isfinite(m[key])]
            if points:
                out.append((title, key, points))
                break
    return out


def write(base: str, text: str | None) -> dict[str, Any]:
    """Write ``<base>.metrics.csv`` and ``<base>.metrics.png`` (0600, whole or not at all) from a log's text.

    Returns dict(csv, png, steps, panels): ``csv`` is None when the log has no step line yet, ``png`` when it
    has none of the plotted metrics either.
    """
    rows = steps(text)
    out: dict[str, Any] = dict(csv=None, png=None, steps=len(rows), panels=[])
    if not rows:
        return out
    out["csv"] = base + ".metrics.csv"
    files.write_if_changed(out["csv"], csv_text(rows), MODE)
    shown = [(title, key, kept(points)) for title, key, points in panels(rows)]
    if shown:
        out["png"] = base + ".metrics.png"
        files.write_atomic(out["png"], plot(shown), MODE)
        out["panels"] = [key for dummy, key, dummy2 in shown]
    return out


class Follow:
    """The metrics of a log given a piece at a time (:meth:`feed`), written by :meth:`write` to the same CSV and
    PNG as :func:`write` writes from the whole text, at a cost that does not grow with the log: the rows go to the
    end of the CSV (the file is only rewritten, from itself, when a step comes again or out of order, or a metric
    appears that the CSV has no column for), and only the plotted metrics' points are kept, as numbers.

    ``last`` is ``(step, metrics)`` of the newest progress line fed (:func:`verl_log.last_progress` of the text so
    far), ``first`` the step of the first one (where a resumed attempt began: the watchdog's proof of a resume); a line
    not yet ended waits for the next piece or :meth:`finish`. ``base`` None: only ``last`` and ``first`` are kept.

    Every column's points are kept too (bounded, :class:`Series`), for the run report's curves (:meth:`curves`), with
    ``seen_at``: the wall-clock time (epoch seconds, ``clock``) at which each step was first read, so that the curves
    can also be drawn against the time the controller saw them (a wait that catches up on a long log sees many steps at
    once: they share its time)."""

    def __init__(self, base: str | None = None, clock: Callable[[], float] = time.time):
        self.base = base
        self.clock = clock
        self.seen_at: dict[int, float] = {}  # step -> epoch seconds of its first line read here
        self.carry = ""
        self.last: tuple[int | None, dict[str, float]] = (None, {})
        self.first: int | None = None
        self.pending: dict[int, dict[str, float]] = {}  # step -> metrics not yet in the CSV
        self.columns: list[str] = []  # the CSV's, "step" left out
        self.steps = 0  # rows in the CSV
        self.tail_step: int | None = None  # the CSV's last row's step
        self.size = 0  # the CSV's length
        self.points = {key: Series() for dummy, keys in PANELS for key in keys}

    def feed(self, text: str | None) -> None:
        text = self.carry + (text or "")
        end = len(text)
        while end and text[end - 1] not in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
            end -= 1
        self.carry = text[end:]
        self._lines(text[:end])

    def finish(self) -> None:
        """The last line, ended or not (the log is whole)."""
        carry, self.carry = self.carry, ""
        self._lines(carry)

    def _lines(self, text):
        if "step:" not in text:
            return
        now = self.clock() if self.base is not None else None
        for line in text.splitlines():
            if "step:" in line:
                parsed = parse_progress_line(line)
                if parsed:
                    self.last = parsed
                    if self.first is None:
                        self.first = parsed[0]
                    if self.base is not None:
                        self.seen_at.setdefault(parsed[0], now)
                        self.pending.pop(parsed[0], None)
                        self.pending[parsed[0]] = parsed[1]

    # -- writing ---------------------------------------------------------------------------------------
    def write(self) -> dict[str, Any]:
        """Write what was fed since the last call; the same answer as :func:`write`."""
        out: dict[str, Any] = dict(csv=None, png=None, steps=self.steps, panels=[])
        if self.base is None or (not self.steps and not self.pending):
            return out
        path = self.base + ".metrics.csv"
        rows = sorted(self.pending.items())
        self.pending = {}
        if rows:
            self._write_rows(path, rows)
        out.update(csv=path, steps=self.steps)
        shown = self.panels()
        if shown:
            out["png"] = self.base + ".metrics.png"
            files.write_atomic(out["png"], plot(shown), MODE)
            out["panels"] = [key for dummy, key, dummy2 in shown]
        return out

    def _write_rows(self, path, rows):
        known = set(self.columns)
        if (
            self.steps
            and rows[0][0] > self.tail_step
            and self._intact(path)
            and all(k in known for dummy, metrics in rows for k in metrics)
        ):
            with files.open_writing(path, append=True, mode=MODE) as f:
                self._append(f, rows)
            return
        # A step again, a step before the last, a new metric: the table again, from the file and the new rows (the
        # columns in the order the log first printed them, as columns() gives them from the whole log).
        merged = self._read(path) if self.steps else {}
        for step, metrics in rows:
            merged[step] = dict((k, _cell(v)) for k, v in metrics.items())
        merged = sorted(merged.items())
        self.columns = columns(merged)[1:]
        self.points = {key: Series() for key in self.points}
        self.steps = 0
        body = io.BytesIO()
        body.write(self._line(["step"] + self.columns))
        self.size = body.tell()
        self._append(
            body, [(step, dict((k, float(v)) for k, v in cells.items())) for step, cells in merged], cells=dict(merged)
        )
        files.write_atomic(path, body.getvalue(), MODE)

    def _append(self, f, rows, cells=None):
        for step, metrics in rows:
            self.tail_step = step
            row = cells[step] if cells is not None else dict((k, _cell(v)) for k, v in metrics.items())
            line = self._line([step] + [row.get(k, "") for k in self.columns])
            f.write(line)
            self.size += len(line)
            self.steps += 1
            for key, value in metrics.items():
                if value is not None and math.isfinite(value):
                    series = self.points.get(key)
                    if series is None:
                        series = self.points[key] = Series()
                    series.add(step, value)

    @staticmethod
    def _line(cells):
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(cells)
        return out.getvalue().encode("utf-8")

    def _intact(self, path):
        """The CSV is still the one written here (a file of its size, not a link put in its place), else it is written
        again whole (atomically: a link there is replaced, never written through)."""
        try:
            st = os.lstat(path)
            return stat.S_ISREG(st.st_mode) and st.st_size == self.size
        except OSError:
            return False

    def _read(self, path):
        """step -> {key: cell} of the CSV as written (the rows are rewritten from it)."""
        try:
            with open(path, newline="") as f:
                table = list(csv.reader(f))
        except OSError:
            table = []
        if not table or table[0][1:] != self.columns:
            raise ValueError("%s changed under the wait; it is written again from the next log" % path)
        return dict((int(r[0]), dict((k, v) for k, v in zip(self.columns, r[1:]) if v != "")) for r in table[1:] if r)

    def panels(self) -> list[tuple[str, str, list[tuple[int, float]]]]:
        """:func:`panels` of the rows written."""
        out = []
        for title, keys in PANELS:
            for key in keys:
                series = self.points[key]
                if series:
                    out.append((title, key, thin(series.points())))
                    break
        return out

    def curves(self, width: int | None = None) -> list[tuple[str, list[tuple[int, float]]]]:
        """``[(key, [(step, value)])]`` of every metric column written that has a finite value, the plot's panels'
        first (in :data:`PANELS` order), then the CSV's order; each thinned to ``width`` columns (:func:`thin`)."""
        first = [key for dummy, key, dummy2 in self.panels()]
        order = first + [key for key in self.columns if key not in first]
        return [(key, thin(self.points[key].points(), width)) for key in order if self.points.get(key)]


# The plot shows at most this many points per panel as they are; more are thinned to each pixel column's first,
# lowest, highest and last point (:func:`thin`) and drawn as the band they fill (the picture the lines drew).
PLOT_POINTS = 2048
_BINS = PLOT_POINTS // 2


class Thinned(list):
    """Points that :func:`thin` kept of more than PLOT_POINTS: :func:`plot` draws each pixel column's band."""


def thin(points: list[tuple[int, float]], width: int | None = None) -> list[tuple[int, float]]:
    """``points`` as they are up to PLOT_POINTS, else each of ``width`` columns' (the plot's, by default) first, lowest,
    highest and last point."""
    if len(points) <= (PLOT_POINTS if width is None else 4 * width):
        return points
    x0, dummy, x1, dummy2 = plot_area(0)
    first, span = points[0][0], (points[-1][0] - points[0][0]) or 1
    scale = ((x1 - x0 - 4) if width is None else width - 1) / span
    out = Thinned()
    column = None
    start = low = high = end = points[0]  # set by the first point before any use; named here for the reader
    for point in points:
        col = int(round((point[0] - first) * scale))
        if col != column:
            if column is not None:
                _keep(out, start, low, high, end)
            column, start, low, high = col, point, point, point
        elif point[1] < low[1]:
            low = point
        elif point[1] > high[1]:
            high = point
        end = point
    _keep(out, start, low, high, end)
    return out


def _keep(out, start, low, high, end):
    """A pixel column's first, lowest, highest and last point, in step order, each once."""
    out.append(start)
    for point in (low, high) if low[0] <= high[0] else (high, low):
        if point[0] != out[-1][0]:
            out.append(point)
    if end[0] != out[-1][0]:
        out.append(end)


class Series:
    """One metric's points for the plot, in step order (:meth:`add`), kept in a size that does not grow with the
    run: as they are up to PLOT_POINTS, then as at most _BINS bins of ``width`` steps, each its first, lowest,
    highest and last point (the bins double in width as the run goes on); :meth:`points` gives them to :func:`thin`.
    A bin (9 numbers: its index, then 4 steps and values) is finer than the plot's pixel columns."""

    def __init__(self):
        self.raw = (array.array("d"), array.array("d"))
        self.bins = None
        self.origin, self.width = 0, 1

    def __bool__(self) -> bool:
        return bool(self.raw[0]) if self.bins is None else bool(self.bins)

    def add(self, step: float, value: float) -> None:
        if self.bins is None:
            self.raw[0].append(step)
            self.raw[1].append(value)
            if len(self.raw[0]) > PLOT_POINTS:
                self._bin()
            return
        index = (step - self.origin) // self.width
        while index >= _BINS:
            self._merge()
            index = (step - self.origin) // self.width
        b = self.bins
        if b and b[-9] == index:
            if value < b[-5]:
                b[-6], b[-5] = step, value
            if value > b[-3]:
                b[-4], b[-3] = step, value
            b[-2], b[-1] = step, value
        else:
            b.extend((index, step, value, step, value, step, value, step, value))

    def _bin(self):
        xs, ys = self.raw
        self.origin, self.width = xs[0], 1
        while (xs[-1] - self.origin) // self.width >= _BINS:
            self.width *= 2
        self.bins, self.raw = array.array("d"), None
        for step, value in zip(xs, ys):
            self.add(step, value)

    def _merge(self):
        self.width *= 2
        old, self.bins = self.bins, array.array("d")
        b = self.bins
        for at in range(0, len(old), 9):
            index = old[at] // 2
            if b and b[-9] == index:
                if old[at + 4] < b[-5]:
                    b[-6], b[-5] = old[at + 3], old[at + 4]
                if old[at + 6] > b[-3]:
                    b[-4], b[-3] = old[at + 5], old[at + 6]
                b[-2], b[-1] = old[at + 7], old[at + 8]
            else:
                b.extend(old[at : at + 9])
                b[-9] = index

    def points(self) -> list[tuple[int, float]]:
        if self.bins is None:
            return [(int(s), v) for s, v in zip(*self.raw)]
        out, b = Thinned(), self.bins  # drawn as bands, however few are left
        for at in range(0, len(b), 9):
            s1, v1, s2, v2, s3, v3, s4, v4 = b[at + 1 : at + 9]
            _keep(out, (int(s1), v1), (int(s2), v2), (int(s3), v3), (int(s4), v4))
        return out


def kept(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """What the plot shows of ``points`` (step order): :func:`thin` of what a :class:`Series` keeps of them."""
    if len(points) <= PLOT_POINTS:
        return points
    series = Series()
    for step, value in points:
        series.add(step, value)
    return thin(series.points())


# --- drawing ----------------------------------------------------------------------------------

WIDTH, PANEL_HEIGHT, SCALE = 720, 176, 2
LEFT, RIGHT, TOP, BOTTOM = 112, 20, 30, 24
WHITE, INK, GRID, LINE = (255, 255, 255), (30, 30, 30), (190, 190, 190), (31, 119, 180)

# A 5x7 font for the characters metric names and numbers use (upper case is drawn as lower case).
_FONT_ROWS = {
    "0": ".###.|#...#|#..##|#.#.#|##..#|#...#|.###.",
    "1": "..#..|.##..|..#..|..#..|..#..|..#..|.###.",
    "2": ".###.|#...#|....#|...#.|..#..|.#...|#####",
    "3": "#####|...#.|..#..|...#.|....#|#...#|.###.",
    "4": "...#.|..##.|.#.#.|#..#.|#####|...#.|...#.",
    "5": "#####|#....|####.|....#|....#|#...#|.###.",
    "6": "..##.|.#...|#....|####.|#...#|#...#|.###.",
    "7": "#####|....#|...#.|..#..|.#...|.#...|.#...",
    "8": ".###.|#...#|#...#|.###.|#...#|#...#|.###.",
    "9": ".###.|#...#|#...#|.####|....#|...#.|.##..",
    "a": ".....|.....|.###.|....#|.####|#...#|.####",
    "b": "#....|#....|#.##.|##..#|#...#|#...#|####.",
    "c": ".....|.....|.###.|#....|#....|#...#|.###.",
    "d": "....#|....#|.##.#|#..##|#...#|#...#|.####",
    "e": ".....|.....|.###.|#...#|#####|#....|.###.",
    "f": "..##.|.#..#|.#...|###..|.#...|.#...|.#...",
    "g": ".....|.####|#...#|#...#|.####|....#|.###.",
    "h": "#....|#....|#.##.|##..#|#...#|#...#|#...#",
    "i": "..#..|.....|.##..|..#..|..#..|..#..|.###.",
    "j": "...#.|.....|..##.|...#.|...#.|#..#.|.##..",
    "k": "#....|#....|#..#.|#.#..|##...|#.#..|#..#.",
    "l": ".##..|..#..|..#..|..#..|..#..|..#..|.###.",
    "m": ".....|.....|##.#.|#.#.#|#.#.#|#...#|#...#",
    "n": ".....|.....|#.##.|##..#|#...#|#...#|#...#",
    "o": ".....|.....|.###.|#...#|#...#|#...#|.###.",
    "p": ".....|.....|####.|#...#|####.|#....|#....",
    "q": ".....|.....|.##.#|#..##|.####|....#|....#",
    "r": ".....|.....|#.##.|##..#|#....|#....|#....",
    "s": ".....|.....|.###.|#....|.###.|....#|####.",
    "t": ".#...|.#...|###..|.#...|.#...|.#..#|..##.",
    "u": ".....|.....|#...#|#...#|#...#|#..##|.##.#",
    "v": ".....|.....|#...#|#...#|#...#|.#.#.|..#..",
    "w": ".....|.....|#...#|#...#|#.#.#|#.#.#|.#.#.",
    "x": ".....|.....|#...#|.#.#.|..#..|.#.#.|#...#",
    "y": ".....|.....|#...#|#...#|.####|....#|.###.",
    "z": ".....|.....|#####|...#.|..#..|.#...|#####",
    ".": ".....|.....|.....|.....|.....|.##..|.##..",
    "-": ".....|.....|.....|#####|.....|.....|.....",
    "_": ".....|.....|.....|.....|.....|.....|#####",
    "/": ".....|....#|...#.|..#..|.#...|#....|.....",
    ":": ".....|.##..|.##..|.....|.##..|.##..|.....",
    "(": "...#.|..#..|.#...|.#...|.#...|..#..|...#.",
    ")": ".#...|..#..|...#.|...#.|...#.|..#..|.#...",
    "+": ".....|..#..|..#..|#####|..#..|..#..|.....",
    "=": ".....|.....|#####|.....|#####|.....|.....",
    "@": ".###.|#...#|#.###|#.#.#|#.##.|#....|.###.",
    " ": ".....|.....|.....|.....|.....|.....|.....",
    "?": ".###.|#...#|....#|...#.|..#..|.....|..#..",
}
FONT = {ch: rows.split("|") for ch, rows in _FONT_ROWS.items()}
GLYPH_W = 6 * SCALE  # 5 columns and a space


class Canvas:
    def __init__(self, width: int, height: int):
        self.width, self.height = width, height
        self.px = [bytearray(WHITE * width) for dummy in range(height)]

    def dot(self, x: int, y: int, color: tuple[int, int, int]) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            self.px[y][3 * x : 3 * x + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int]) -> None:
        x0, x1 = max(0, x0), min(self.width, x1 + 1)
        if x1 <= x0:
            return
        run = bytes(color) * (x1 - x0)
        for y in range(max(0, y0), min(self.height, y1 + 1)):
            self.px[y][3 * x0 : 3 * x1] = run

    def line(self, x0: int, y0: int, x1: int, y1: int, color: tuple[int, int, int], thick: int = 1) -> None:
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

    def text(self, x: int, y: int, text: Any, color: tuple[int, int, int] = INK) -> int:
        for ch in str(text).lower():
            rows = FONT.get(ch, FONT["?"])
            for r, row in enumerate(rows):
                for c, bit in enumerate(row):
                    if bit == "#":
                        self.rect(
                            x + c * SCALE, y + r * SCALE, x + c * SCALE + SCALE - 1, y + r * SCALE + SCALE - 1, color
                        )
            x += GLYPH_W
        return x

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)

        def chunk(kind, data):
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 6))
            + chunk(b"IEND", b"")
        )


def fmt(value: float) -> str:
    return "%.4g" % value


def plot_area(index: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of panel ``index``'s plotting area."""
    top = index * PANEL_HEIGHT
    return LEFT, top + TOP, WIDTH - RIGHT, top + PANEL_HEIGHT - BOTTOM


def plot(shown: Sequence[tuple[str, str, Sequence[tuple[int, float]]]]) -> bytes:
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
        xy = [
            (
                x0 + 2 + int(round((s - first) * (x1 - x0 - 4) / span_s)),
                y1 - 2 - int(round((v - lo) * (y1 - y0 - 4) / span_v)) if hi != lo else (y0 + y1) // 2,
            )
            for s, v in points
        ]
        if isinstance(points, Thinned):
            bands(canvas, xy)
            continue
        if len(xy) == 1:
            canvas.rect(xy[0][0] - 2, xy[0][1] - 2, xy[0][0] + 2, xy[0][1] + 2, LINE)
        for (ax, ay), (bx, by) in zip(xy, xy[1:]):
            canvas.line(ax, ay, bx, by, LINE, thick=2)
    return canvas.png()


def bands(canvas: Canvas, xy: Sequence[tuple[int, int]]) -> None:
    """Many points, several to a pixel column: each column's band from its lowest to its highest point, joined to
    the column before (what lines through every point fill), one rectangle a column."""
    last = None
    at = 0
    while at < len(xy):
        x, low, high = xy[at][0], xy[at][1], xy[at][1]
        if last is not None:
            low, high = min(low, last), max(high, last)
        while at < len(xy) and xy[at][0] == x:
            low, high = min(low, xy[at][1]), max(high, xy[at][1])
            last = xy[at][1]
            at += 1
        canvas.rect(x, low, x + 1, high + 1, LINE)


def describe(result: Mapping[str, Any] | None) -> list[str]:
    """The summary's lines for a :func:`write` result."""
    if not result or not result.get("csv"):
        return []
    lines = ["metrics:       %s (%d steps)" % (result["csv"], result["steps"])]
    if result.get("png"):
        lines.append("plot:          %s (%s)" % (result["png"], ", ".join(result["panels"])))
    return lines


def base_of(log_path: str) -> str:
    return os.path.splitext(log_path)[0]
