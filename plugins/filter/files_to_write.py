# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.files_to_write``: which of the files and directories a role's tasks would write a node does not
hold as they would leave them, as a read-only module found them (``rlinfra.verl.ray_metrics_info``'s ``files``: type,
mode, owner, a file's SHA-1).

    ray_metrics__to_write: "{{ ray_metrics__wanted | rlinfra.verl.files_to_write(ray_metrics__node.files) }}"
    when: ray_metrics__dir ~ '/prometheus.yml' in ray_metrics__to_write

A role whose converge is a dozen file tasks (templates, copies, directories) asks the node once, and runs only the
tasks - their diffs and handlers - of the paths listed; none when the list is empty. The content is compared as the
task would write it: the template rendered on the controller (``lookup('ansible.builtin.template', ...)``) or the
copy's ``content``.
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
        raise AnsibleFilterError("files_to_write: a mode must be octal such as 0644, got %r" % (value,)) from None


def _in_place(entry, have):
    if not have or have.get("type") != entry.get("state", "file"):
        return False
    mode = _mode(entry.get("mode"))
    if mode and have.get("mode") != mode:
        return False
    if entry.get("owner") and have.get("owner") != str(entry["owner"]):
        return False
    content = entry.get("content")
    return content is None or have.get("sha1") == hashlib.sha1(str(content).encode("utf-8")).hexdigest()


def files_to_write(wanted, found):
    """The paths of ``wanted`` (``path``; ``state`` file or directory; optional ``content``, ``mode``, ``owner``) that
    ``found[path]`` says the node does not hold as wanted (missing, different, a link or something else), in order."""
    if not isinstance(wanted, list) or not all(isinstance(w, dict) and w.get("path") for w in wanted):
        raise AnsibleFilterError("files_to_write: the input must be a list of dicts with a path, got %r" % (wanted,))
    found = found or {}
    return [entry["path"] for entry in wanted if not _in_place(entry, found.get(entry["path"]))]


class FilterModule:
    def filters(self):
        return {"files_to_write": files_to_write}
