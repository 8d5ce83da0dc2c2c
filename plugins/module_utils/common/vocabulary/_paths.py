# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Paths: :class:`AbsPath` (kept where its purpose allows, module_utils/common/paths.py) and :class:`RelPath`."""

from __future__ import annotations

import os
import re
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import paths
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import Bad, Type, one_line


class AbsPath(Type):
    """An absolute path without ``..`` components, line breaks or control characters, kept where its ``purpose`` allows
    (module_utils/common/paths.py: ``owns``, ``writes``, ``config``, ``mounts``, ``local``, ``reads``, ``remote``); a
    field without a purpose is a generic path, which tests/unit/test_path_purposes.py refuses on every surface.
    ``empty`` allows ``""`` (an option's "unset"); ``under``: it must lie inside that directory (a path confined under a
    root); ``relative`` (``local`` and ``reads`` on the controller): relative to the directory the playbook runs from."""

    ansible = "path"
    words = "an absolute path"
    sample_value = "{tmp}/sample"

    def __init__(
        self,
        purpose: str | None = None,
        empty: bool = False,
        under: str | None = None,
        max_len: int = 4095,
        spaces: bool = True,
        relative: bool = False,
        **kw: Any,
    ):
        super().__init__(**kw)
        if purpose is not None and purpose not in paths.PURPOSES:
            raise ValueError("purpose %r is none of %s" % (purpose, ", ".join(paths.PURPOSES)))
        self.purpose = purpose
        self.empty, self.under, self.max_len, self.spaces, self.relative = empty, under, max_len, spaces, relative
        if under:
            self.sample_value = under.rstrip("/") + "/sample"

    def check(self, value: Any) -> Any:
        what = ("a path" if self.relative else "an absolute path") + (" inside %s" % self.under if self.under else "")
        if value == "" and self.empty:
            return value
        one_line(value, what)
        if not value.strip():
            raise Bad("be %s, not empty" % what)
        if not value.startswith("/") and not self.relative:
            raise Bad("be %s (starting with /)" % what)
        if ".." in value.split("/"):
            raise Bad("be %s without '..'" % what)
        if not self.spaces and re.search(r"\s", value):
            raise Bad("be %s without spaces" % what)
        if len(value) > self.max_len:
            raise Bad("be %s of at most %d characters" % (what, self.max_len))
        if self.under and not inside(value, self.under):
            raise Bad("be %s" % what)
        confine(value, self.purpose)
        return value


def confine(path: Any, purpose: str | None) -> Any:
    """:class:`Bad` when a ``path`` given for ``purpose`` lies where the collection must not write (paths.misplaced)."""
    why = paths.misplaced(path, purpose) if isinstance(path, str) else None
    if why:
        raise Bad(why)
    return path


class RelPath(Type):
    """A relative path that stays inside its base: no leading ``/``, no ``..`` component."""

    words = "a relative path inside its base"
    sample_value = "."

    def check(self, value: Any) -> Any:
        one_line(value, "a relative path")
        if value.startswith("/") or ".." in value.split("/") or not value.strip():
            raise Bad("be a relative path inside its base (not starting with /, no '..')")
        return value


normpath, inside, overlap = paths.normpath, paths.inside, paths.overlap


def leads_outside(path: str, root: str) -> bool:
    """Whether ``path``, its symbolic links followed, ends outside ``root`` (whose own links are followed too): what is
    read through it would then be another directory's, such as ``/etc``. A path that leads nowhere (a loop, a missing
    target) does not: reading it fails on its own, and reads nothing of elsewhere."""
    real = os.path.realpath(path)
    return os.path.lexists(real) and not inside(real, os.path.realpath(root))
