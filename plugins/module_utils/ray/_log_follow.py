# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reading a driver log a piece at a time, on the head: the bytes after an offset (bounded), and the last lines.

A watch that polls a run for days must not pay for the whole log at every poll: Ray's ``/api/jobs/<id>/logs``
answers with the whole file (124 MB after a few days of verl: 2.6 s and 309 MB on the head, and the same bytes
again to the controller). Ray writes the driver's output to ``<temp dir>/session_latest/logs/job-driver-<submission
id>.log`` on the node that runs the driver (the head, unless the entrypoint asks for resources only a worker has);
where that file is here, :func:`read_new` seeks to the caller's offset and reads at most ``cap`` bytes, and
:func:`read_tail` reads back from the end only as far as the last lines need. Each answer names the file
(``file_id``, device and inode): a caller that passes it back gets the file read from 0 again when it changed (a
new session, a job submitted again under the same id) or shrank.

Only the standard library: this runs on the head.
"""

from __future__ import annotations

import os
import stat
from typing import Any

MIB = 1024 * 1024
# At most this much of the log per poll: a watch that comes to a long run catches up in pieces of this size.
CHUNK_BYTES = 8 * MIB
# The tail's lines are looked for in at most this much of the file's end.
TAIL_BYTES = 4 * MIB
_BLOCK = 64 * 1024


def driver_log_path(temp_dir: str, submission_id: str) -> str:
    return os.path.join(temp_dir, "session_latest", "logs", "job-driver-%s.log" % submission_id)


def utf8_cut(data: bytes) -> int:
    """The length of the longest start of ``data`` that does not end inside a UTF-8 sequence."""
    end = len(data)
    lead = end - 1
    while lead >= 0 and end - lead <= 3 and (data[lead] & 0xC0) == 0x80:
        lead -= 1
    if lead < 0:
        return end
    first = data[lead]
    need = (
        1
        if first < 0x80
        else 2
        if first >> 5 == 0b110
        else 3
        if first >> 4 == 0b1110
        else 4
        if first >> 3 == 0b11110
        else 1
    )
    return end if end - lead >= need else lead


def take(data: bytes, at_end: bool, final: bool, cap: int) -> int:
    """How many bytes of ``data`` (read from the offset, ``at_end`` when it reaches the end of the log) to hand out:
    whole lines only, so that the next read starts on a line (and never inside a UTF-8 sequence). The rest of a
    line still being written waits for the next read; an ended job's (``final``) last line goes out as it is, and so
    does a line longer than ``cap`` (cut where a character ends)."""
    if not data or data.endswith(b"\n") or (final and at_end):
        return len(data)
    newline = data.rfind(b"\n")
    if newline >= 0:
        return newline + 1
    if len(data) >= cap:
        return utf8_cut(data) or len(data)
    return 0


def _answer(data: bytes, offset: int, size: int, file_id: str, reset: bool, source: str) -> dict[str, Any]:
    return dict(
        text=data.decode("utf-8", "replace"),
        offset=offset + len(data),
        size=size,
        file_id=file_id,
        reset=reset,
        source=source,
    )


def read_new(
    path: str, offset: int | None, known_id: str = "", cap: int = CHUNK_BYTES, final: bool = False
) -> dict[str, Any] | None:
    """The log's new whole lines after byte ``offset``: ``dict(text, offset (the next one), size, file_id, reset,
    source='file')``, or None when ``path`` is not a regular file here. ``reset`` is true when the file is not the
    one ``known_id`` names, or is shorter than ``offset``: it is then read from 0 again."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        file_id = "%d:%d" % (st.st_dev, st.st_ino)
        offset, reset = _start(offset, st.st_size, known_id, file_id)
        want = max(0, min(cap, st.st_size - offset))
        data = os.pread(fd, want, offset) if want else b""
        data = data[: take(data, offset + len(data) >= st.st_size, final, cap)]
        return _answer(data, offset, st.st_size, file_id, reset, "file")
    finally:
        os.close(fd)


def slice_new(
    log: str | bytes | None,
    offset: int | None,
    known_id: str = "",
    cap: int = CHUNK_BYTES,
    final: bool = False,
    name: str = "",
) -> dict[str, Any]:
    """:func:`read_new` for a whole log already read (``log``, bytes or text, from Ray's API, of the job ``name``):
    the same answer, ``source='ray_api'``."""
    data = log.encode("utf-8") if isinstance(log, str) else (log or b"")
    file_id = "ray-api:%s" % name
    offset, reset = _start(offset, len(data), known_id, file_id)
    piece = data[offset : offset + cap]
    piece = piece[: take(piece, offset + len(piece) >= len(data), final, cap)]
    return _answer(piece, offset, len(data), file_id, reset, "ray_api")


def _start(offset: int | None, size: int, known_id: str | None, file_id: str) -> tuple[int, bool]:
    offset = max(0, int(offset or 0))
    if offset and ((known_id and known_id != file_id) or offset > size):
        return 0, True
    return offset, False


def read_tail(path: str, lines: int, limit: int = TAIL_BYTES) -> str:
    """The last ``lines`` lines of the file (as ``ray_client.tail_lines`` gives them from the whole text), read back
    from its end in blocks, at most ``limit`` bytes; '' when there is no such file."""
    if lines <= 0:
        return ""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start, data = end, b""
            while start > 0 and end - start < limit and data.count(b"\n") <= lines:
                step = min(_BLOCK, start, limit - (end - start))
                start -= step
                f.seek(start)
                data = f.read(step) + data
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    kept = text.splitlines()
    if start > 0 and kept:  # the first line read may be the end of a longer one
        kept = kept[1:]
    return "\n".join(kept[-lines:])


def read_end(path: str, limit: int = TAIL_BYTES) -> str | None:
    """The file's last ``limit`` bytes as text, from its first whole line; None when there is no such file. A look
    at a run without an offset (status.yml: its newest step and its tail) reads this, never the whole log."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            start = max(0, end - limit)
            f.seek(start)
            data = f.read(end - start)
    except OSError:
        return None
    text = data.decode("utf-8", "replace")
    if start > 0:  # the first line read may be the end of a longer one
        text = text.split("\n", 1)[1] if "\n" in text else ""
    return text
