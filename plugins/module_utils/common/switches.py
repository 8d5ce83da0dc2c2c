# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""On/off switches read strictly: Ansible's ``| bool`` turns any unknown word into false, so a typo such as
``-e teardown_purge=ture`` would silently do the opposite of what was asked; here it is an error."""

from __future__ import annotations

from typing import Any

TRUE_WORDS = ("true", "yes", "1")
FALSE_WORDS = ("false", "no", "0")


def switch_value(value: Any, name: str = "switch") -> tuple[bool | None, str | None]:
    """(bool, None) for a real boolean, 0/1, or true/false/yes/no/1/0 in any case; (None, error) otherwise."""
    if isinstance(value, bool):
        return value, None
    if isinstance(value, int) and value in (0, 1):
        return bool(value), None
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True, None
        if word in FALSE_WORDS:
            return False, None
    shown = repr(value) if isinstance(value, str) else "%r (%s)" % (value, type(value).__name__)
    return None, "%s must be true or false (also yes/no/1/0, any case), got %s" % (name, shown)
