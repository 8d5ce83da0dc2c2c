# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Action ``rlinfra.verl.replace_kit``: the key read and the collection packed here, on the controller, the archive
copied to the head, then the module writes the kit there. Documentation: plugins/modules/replace_kit.py; the kit:
module_utils/hyperbolic/replace_kit.py."""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile

from ansible_collections.rlinfra.verl.plugins.module_utils.hyperbolic import replace_kit
from ansible_collections.rlinfra.verl.plugins.modules.replace_kit import ARGS
from ansible_collections.rlinfra.verl.plugins.plugin_utils.task_vars import TypedAction

ARGUMENT_SPEC = ARGS.spec  # what tests/unit/test_action_docs.py holds to the documentation
# The collection this action belongs to: the one whose roles run the submit.
COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(TypedAction):
    ARGS = ARGS
    TRANSFERS_FILES = True

    def act(self, result, args, task_vars):
        try:
            try:
                with open(args["ssh_key"]) as handle:
                    key = handle.read()
            except OSError as e:
                return dict(
                    result,
                    failed=True,
                    msg="hyperbolic_replace_ssh_key %s cannot be read: %s" % (args["ssh_key"], e.strerror or e),
                )
            archive = replace_kit.pack(COLLECTION_ROOT)
            module_args = dict(
                args, ssh_key_content=key, archive_sha256=hashlib.sha256(archive).hexdigest(), archive=""
            )
            if not self._task.check_mode:
                module_args["archive"] = self._copy(gzip.compress(archive, mtime=0))
            result.update(
                self._execute_module(
                    module_name="rlinfra.verl.replace_kit", module_args=module_args, task_vars=task_vars
                )
            )
            return result
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _copy(self, data):
        """``data`` copied into the task's temporary directory on the head; its path there."""
        fd, local = tempfile.mkstemp(prefix="rlinfra-collection-", suffix=".tar.gz")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            remote = self._connection._shell.join_path(self._connection._shell.tmpdir, "collection.tar.gz")
            self._transfer_file(local, remote)
            self._fixup_perms2((self._connection._shell.tmpdir, remote))
            return remote
        finally:
            os.unlink(local)
