# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Files written whole or not at all: a temporary file in the same directory, given its mode before
anything is written to it, then renamed over the target. A reader (Ray, systemd, nft, the next run)
never sees half a file, and a secret is never readable by others, not even for a moment.
Standard library only: modules on the nodes import it."""

from __future__ import annotations

import json
import os
import tempfile


def write_atomic(path, text, mode, prefix=".rlinfra-"):
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


def write_if_changed(path, text, mode, check_mode=False):
    """:func:`write_atomic` unless ``path`` holds ``text`` with ``mode`` already; True when it (would have)
    changed. In check mode nothing is written."""
    try:
        with open(path) as f:
            same = f.read() == text and (os.stat(path).st_mode & 0o7777) == mode
    except OSError:
        same = False
    if same:
        return False
    if not check_mode:
        write_atomic(path, text, mode)
    return True


def env_items(text):
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
