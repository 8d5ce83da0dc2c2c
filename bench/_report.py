"""Shared by the benchmarks: rewrite one marked section of docs/BENCHMARKS.md, keeping the others."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

BENCH_MD = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def write_section(name: str, body: str) -> None:
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    stamp = (
        f"_Measured {datetime.date.today().isoformat()} on {platform.node() or 'this machine'} ({platform.machine()})._"
    )
    block = f"{start}\n{body.rstrip()}\n\n{stamp}\n{end}"
    text = BENCH_MD.read_text() if BENCH_MD.exists() else "# Benchmarks\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    BENCH_MD.write_text(text)
