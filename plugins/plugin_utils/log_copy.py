# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One attempt's driver log as ray_job_wait follows it on the controller: where the next ``ray_job_poll`` reads
from (``log_offset``, ``log_file_id``), the controller's copy that each new piece is appended to (0600, never
through a link), and the metrics followed line by line (:class:`verl_metrics.Follow`) - so a poll at hour 72 moves
and parses only what the job printed since the last one."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import metrics as verl_metrics

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class LogCopy:
    def __init__(self, sid: str, log_dir: str = "", mask: Callable[[str], str] | None = None):
        self.sid = sid
        self.offset, self.file_id, self.size = 0, "", 0
        self.path = os.path.join(log_dir, "%s.log" % sid) if log_dir else None
        self.base = os.path.join(log_dir, sid) if log_dir else None
        self.metrics = verl_metrics.Follow(self.base)
        self.mask = mask or (lambda text: text)
        self.fresh = True  # the next write starts the copy over (a copy of an earlier wait is replaced)
        self.written = 0  # bytes in the copy
        self.newline = True  # the copy ends with a line break (or is empty)
        self.checked = False  # the action made sure the artifacts directory is there

    def poll_args(self) -> dict[str, Any]:
        return dict(log_offset=self.offset, log_file_id=self.file_id)

    @property
    def behind(self) -> bool:
        return self.offset < self.size

    def take(self, res: Mapping[str, Any]) -> bool:
        """Feed the new piece of a ray_job_poll result (made with :meth:`poll_args`); True when the log has more to
        read. OSError when the copy cannot be written (``path`` is then None; the metrics go on)."""
        if "log_offset" not in res:
            return False
        if res.get("log_reset"):
            self.metrics = verl_metrics.Follow(self.base)
            self.fresh = True
            self.newline = True
            if self.path and os.path.lexists(self.path):
                self._write("")
        text = self.mask(res.get("log_chunk") or "")
        self.offset, self.file_id, self.size = res["log_offset"], res.get("log_file_id") or "", res.get("log_size") or 0
        self.metrics.feed(text)
        if res.get("status") in TERMINAL and not self.behind:
            self.metrics.finish()  # an ended job's last line, even without a line break
        if text and self.path:
            self._write(text)
        return self.behind

    def _write(self, text):
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
        if self.fresh:
            flags |= os.O_TRUNC
        data = text.encode("utf-8")
        try:
            fd = os.open(self.path, flags, 0o600)
            try:
                if self.fresh:
                    os.fchmod(fd, 0o600)  # a copy an earlier wait left is 0600 too
                _write_all(fd, data)
            finally:
                os.close(fd)
        except OSError:
            self.path = None
            raise
        if self.fresh:
            self.fresh, self.written = False, 0
        self.written += len(data)
        if data:
            self.newline = data.endswith(b"\n")

    def finish(self) -> str | None:
        """The copy ends with a line break (as the copies written whole did); its path, or None when there is
        nothing to keep (no copy, or an empty log)."""
        self.metrics.finish()
        if not self.path or self.fresh or not self.written:
            return None
        if not self.newline:
            self._write("\n")
        return self.path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
