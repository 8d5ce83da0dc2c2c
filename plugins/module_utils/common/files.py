# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Files written whole or not at all: a temporary file in the same directory, given its mode before
anything is written to it, then renamed over the target. A reader (Ray, systemd, nft, the next run)
never sees half a file, and a secret is never readable by others, not even for a moment.
Standard library only: modules on the nodes import it."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any


def write_atomic(path: str, text: str | bytes, mode: int, prefix: str = ".rlinfra-") -> None:
    """Write ``text`` (str or bytes) to ``path`` with ``mode``; the temporary file is removed whatever happens."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=prefix)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def refuse_link(path: str, what: str = "a directory the collection keeps") -> None:
    """OSError ELOOP (its strerror the reason) when ``path`` is a symbolic link. For a directory the collection makes,
    chmods and writes in: through a link, ``chmod`` changes what it points at (``/etc``), and what is written lands
    there. (A file written whole needs none of this: :func:`write_atomic` replaces a link, never writes through it.)"""
    if os.path.islink(path):
        raise OSError(
            errno.ELOOP,
            "it is a symbolic link (to %s); %s is never reached through one" % (os.path.realpath(path), what),
        )


def private_dir(path: str, mode: int = 0o700) -> None:
    """``path`` a directory of ``mode``, made when missing; never a link (:func:`refuse_link`)."""
    refuse_link(path, "a private directory")
    os.makedirs(path, mode=mode, exist_ok=True)
    os.chmod(path, mode)


def open_writing(path: str, append: bool = False, mode: int = 0o644) -> IO[bytes]:
    """``path`` opened for bytes, at its end (``append``) or emptied, made with ``mode`` when missing; never through a
    symbolic link (OSError ELOOP). For a file written piece by piece (a run's metrics table, a download being
    resumed), which :func:`write_atomic` cannot do: one replaced by a link would fill or empty whatever it points at."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, mode), "ab" if append else "wb")


def no_follow(path: str, flags: int) -> int:
    """An ``opener`` for ``open()`` that never opens through a symbolic link (OSError ELOOP)."""
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


def write_if_changed(path: str, text: str, mode: int, check_mode: bool = False) -> bool:
    """:func:`write_atomic` unless ``path`` holds ``text`` with ``mode`` already; True when it (would have)
    changed. In check mode nothing is written."""
    try:
        # A link is never "the same": it is replaced, and what it points at is not read.
        with open(path, opener=no_follow) as f:
            same = f.read() == text and (os.stat(path).st_mode & 0o7777) == mode
    except OSError:
        same = False
    if same:
        return False
    if not check_mode:
        write_atomic(path, text, mode)
    return True


def env_items(text: str) -> Iterator[tuple[str, str]]:
    """``(name, value)`` of each ``NAME=VALUE`` line of an environment file, values JSON-quoted as
    roles/ray/templates/ray.env.j2 writes them (a value that is not JSON is taken as written)."""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, raw = line.split("=", 1)
        raw = raw.strip()
        if raw.startswith('"'):
            try:
                raw = json.loads(raw)
            except ValueError:
                raw = raw.strip('"')
        yield name.strip(), str(raw)


# What a failed write asks of the user first; whatever the cause, another directory is always a way out.
_WRITE_FIXES: dict[int | None, str] = {
    errno.ENOSPC: "free space",
    errno.EDQUOT: "free space",
    errno.EACCES: "give the controller's user write access",
    errno.EPERM: "give the controller's user write access",
}


def cannot_write(variable: str, directory: str, what: str, error: OSError) -> str:
    """The one line for a write of ``what`` ("the driver log") into ``directory`` that failed with OSError ``error``,
    where ``variable`` sets the directory (``verl_job_artifacts_dir``): the variable, the path, the errno's meaning,
    never a traceback nor the experiment, which is not at fault."""
    reason = error.strerror or (os.strerror(error.errno) if error.errno else str(error) or type(error).__name__)
    fix = _WRITE_FIXES.get(error.errno)
    return "%s %s: cannot write %s (%s): %sset %s to another directory" % (
        variable,
        directory,
        what,
        reason,
        fix + " or " if fix else "",
        variable,
    )


def makedirs(path: str, mode: int = 0o755) -> None:
    """``os.makedirs`` that accepts an existing directory."""
    try:
        os.makedirs(path, mode)
    except OSError as e:
        if e.errno != errno.EEXIST:
            raise


class BoundedLock:
    """An exclusive ``flock`` on ``path`` (made when missing), waited for at most ``timeout`` seconds: two runs
    working on the same files of the shared volume take turns, and a stuck holder gives ``error(line)`` naming
    the lock instead of a silent wait. ``what`` says who holds it ("another checkout")."""

    def __init__(
        self,
        path: str,
        timeout: float,
        what: str,
        error: Callable[[str], BaseException],
        sleep: Callable[[float], Any] = time.sleep,
    ):
        self.path, self.timeout, self.what, self.error, self.sleep = path, timeout, what, error, sleep

    def __enter__(self) -> BoundedLock:
        makedirs(os.path.dirname(self.path))
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        deadline = time.time() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.time() >= deadline:
                os.close(self.fd)
                raise self.error(
                    "%s has held %s for more than %d s: wait for it to finish, or remove the lock file if "
                    "no such run is left" % (self.what, self.path, self.timeout)
                )
            self.sleep(1)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
