# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.files_in_place``: whether a node holds every file and directory a role's tasks would write,
as a read-only module found them (``rlinfra.verl.ray_metrics_info``'s ``files``: type, mode, owner, a file's SHA-1).

    when: not (ray_metrics__wanted | rlinfra.verl.files_in_place(ray_metrics__node.files))

A role whose converge is a dozen file tasks (templates, copies, directories) asks the node once when all of them are
in place, and runs its tasks - their diffs and handlers - only when one is not. The content is compared as the task
would write it: the template rendered on the controller (``lookup('ansible.builtin.template', ...)``) or the copy's
``content``.
"""

from __future__ import annotations

import hashlib

from ansible.errors import AnsibleFilterError


def _mode(value):
    if value in (None, ""):
        return None
    try:
        return "%04o" % int(str(value), 8)
    except ValueError:
        raise AnsibleFilterError("files_in_place: a mode must be octal such as 0644, got %r" % (value,)) from None


def files_in_place(wanted, found):
    """True when every entry of ``wanted`` (``path``; ``state`` file or directory; optional ``content``, ``mode``,
    ``owner``) is what ``found[path]`` says the node has."""
    if not isinstance(wanted, list) or not all(isinstance(w, dict) and w.get("path") for w in wanted):
        raise AnsibleFilterError("files_in_place: the input must be a list of dicts with a path, got %r" % (wanted,))
    found = found or {}
    for entry in wanted:
        have = found.get(entry["path"])
        if not have or have.get("type") != entry.get("state", "file"):
            return False
        mode = _mode(entry.get("mode"))
        if mode and have.get("mode") != mode:
            return False
        if entry.get("owner") and have.get("owner") != str(entry["owner"]):
            return False
        content = entry.get("content")
        if content is not None and have.get("sha1") != hashlib.sha1(str(content).encode("utf-8")).hexdigest():
            return False
    return True


class FilterModule:
    def filters(self):
        return {"files_in_place": files_in_place}
