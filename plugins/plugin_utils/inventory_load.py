# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""How the collection's inventory plugins (hyperbolic, slurm) give up on a source: one line, as an
``AnsibleParserError``.

Ansible shows that line as a warning and goes on with the other sources; the playbooks that need a cluster then
stop with one line of their own (``rlinfra.verl.command_line``, docs/INVENTORY.md), and a user's own
``ansible.cfg`` may set ``unparsed_is_failed``. After our plugin, Ansible hands the same file to ``auto``, which
calls our plugin again: that second call gives the same line without asking the API (or the login node) again.
"""

from __future__ import annotations

import weakref
from typing import Any, NoReturn

from ansible.errors import AnsibleParserError

# Per inventory being built (a refresh_inventory builds a new one, so it asks again): source path -> line.
_FAILED: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()


def _data(inventory: Any) -> Any:
    # the inventory manager hands each plugin a proxy of its InventoryData; the proxy is new for every plugin
    return getattr(inventory, "__wrapped__", inventory)


def failed_before(inventory: Any, path: object) -> None:
    """Raise the line this source already failed with while this inventory was built (the ``auto`` plugin's retry)."""
    line = _FAILED.get(_data(inventory), {}).get(str(path))
    if line is not None:
        raise AnsibleParserError(line)


def give_up(inventory: Any, path: object, line: str) -> NoReturn:
    """Remember and raise the one line for ``path``."""
    try:
        _FAILED.setdefault(_data(inventory), {})[str(path)] = line
    except TypeError:  # an inventory that cannot be weakly referenced (a test's stand-in): no memory, same line
        pass
    raise AnsibleParserError(line)
