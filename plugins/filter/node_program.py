# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Filter ``rlinfra.verl.node_program``: a program of the collection's module_utils as one file, for a service on a
node (the idle guard's), which a task copies there as any other file.

    {{ 'hyperbolic.idle_guard' | rlinfra.verl.node_program }}  ->  the program's source

The module names its program (``PROGRAM``: module, function, modules that import Ansible only lazily);
plugin_utils/node_script.py's ``program`` builds it, as it does the run's supervisor: the function's module and every
module_utils module it imports, loaded from memory, standard library only.
"""

from __future__ import annotations

import importlib

from ansible.errors import AnsibleFilterError

from ansible_collections.rlinfra.verl.plugins.plugin_utils import node_script


def node_program(name):
    try:
        spec = importlib.import_module("%s.%s" % (node_script.PACKAGE, name)).PROGRAM
        return node_script.program(*spec)[0]
    except (ImportError, AttributeError, node_script.NeedsModule) as e:
        raise AnsibleFilterError("node_program: module_utils %s has no program to send: %s" % (name, e)) from e


class FilterModule:
    def filters(self):
        return {"node_program": node_program}
