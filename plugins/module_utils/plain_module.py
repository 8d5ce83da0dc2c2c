# -*- coding: utf-8 -*-
# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The two AnsibleModule methods the node-reading helpers use (``get_bin_path``, ``run_command``), for code that
runs on a node without Ansible's module runtime (plugin_utils/node_script.py): starting that runtime costs more
than the whole converge check on a small node."""

from __future__ import annotations

import os
import shutil
import subprocess

# AnsibleModule.get_bin_path looks in these too, whatever PATH says.
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


class PlainModule:
    check_mode = False

    def get_bin_path(self, name, required=False, opt_dirs=None):
        path = os.pathsep.join(list(opt_dirs or []) + [os.environ.get("PATH", os.defpath)] + list(SBIN))
        found = shutil.which(name, path=path)
        if found is None and required:
            raise ValueError("%s not found on this node" % name)
        return found

    def run_command(self, args, check_rc=False, environ_update=None, **dummy):
        # As AnsibleModule runs commands: the C locale (stable output to parse), text out, no shell.
        env = dict(os.environ, LANG="C", LC_ALL="C", LC_MESSAGES="C", **(environ_update or {}))
        try:
            proc = subprocess.run(list(args), capture_output=True, text=True, errors="replace", env=env, check=False)
        except OSError as e:
            return 127, "", str(e)
        if check_rc and proc.returncode:
            raise RuntimeError("%s failed (rc %d): %s" % (args[0], proc.returncode, proc.stderr.strip()))
        return proc.returncode, proc.stdout, proc.stderr
