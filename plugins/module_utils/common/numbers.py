# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Numbers read from loose values (inventory variables, ``-e`` switches, API records, Ray's resource
maps), one home for each way of reading them. They differ on purpose; pick by what the caller must
accept, and keep the error message at the caller:

==================  ===============  ========  =========  ===========  ======  ==========
helper              ``8`` / ``"8"``  ``" 8 "``  ``8.0``    ``"8.5"``    bools   returns
==================  ===============  ========  =========  ===========  ======  ==========
whole_number        8                8         None       None         None    int or None
int_or_none         8                8         None       None         None    int or None
loose_count         8                8         8          8            None    int >= 0 or None
float_or_none       8.0              8.0       8.0        8.5          1.0/0.0 float or None
==================  ===============  ========  =========  ===========  ======  ==========

* :func:`whole_number`: strict, for settings and switches a user types: an int, or ASCII digits with
  blanks around; no sign, no fraction. The caller checks the range (``< 1``, a port...).
* :func:`int_or_none`: whatever ``int(str(value).strip())`` reads (a sign, ``1_000``), None otherwise.
* :func:`loose_count`: a non-negative count from a provider's API, which may send ``8``, ``"8"`` or
  ``8.0``; fractions are cut, negative and absurd values are None.
* :func:`float_or_none`: a Ray resource amount (``node["resources"]["GPU"]``), None when absent or
  not a number.
* :func:`tidy`: a float that is whole, as an int, for display (Ray reports ``8.0`` GPUs; ``8`` reads
  better and is what a Hydra override wants).

Standard library only: modules on the nodes import it (through cluster_shape.py, firewall.py).
"""

from __future__ import annotations

import re
from typing import Any

_DIGITS = re.compile(r"[0-9]+")


def whole_number(value: Any) -> int | None:
    """``value`` as an int when it is an int (not a bool) or a string of ASCII digits with blanks around;
    None for anything else (bools, floats, ``"+8"``, ``"-8"``, ``"8.0"``, ``""``, non-ASCII digits).
    Negative ints are returned as they are: the range is the caller's to check."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            return int(text)
    return None


def int_or_none(value: Any) -> int | None:
    """``int(str(value).strip())``, None when that fails: signs and ``_`` separators are read; floats
    (``"8.0"``), bools (``"True"``) and None are not."""
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def loose_count(value: Any) -> int | None:
    """A non-negative count from anything ``int()`` or ``float()`` reads (``8``, ``"8"``, ``8.0``,
    ``"8.0"``, ``"1e3"``), fractions cut; None for None, bools, negatives, NaN, infinities and text."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        try:
            number = int(float(value))
        except (TypeError, ValueError, OverflowError):
            return None
    except OverflowError:
        return None
    return number if number >= 0 else None


def float_or_none(value: Any) -> float | None:
    """``float(value)``, None when ``value`` is None or not a number (text around blanks is read,
    ``"nan"`` and ``"inf"`` too; bools are 1.0 and 0.0)."""
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def tidy(value: Any) -> Any:
    """A whole float as an int (``8.0`` -> ``8``); anything else unchanged."""
    return int(value) if isinstance(value, float) and value.is_integer() else value
