# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Numbers, durations, instants and switches: :class:`Int`, :class:`Number`, :class:`Seconds`, :class:`Time`,
:class:`Switch`."""

from __future__ import annotations

import math
import re
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import Bad, Type

YEAR = 366 * 86400
# The most GPUs one node can be said to have, for every count of them (ray_num_gpus, ray_node's num_gpus).
MAX_GPUS = 1024


def _number(value: Any, integer: bool, strict: bool = False) -> int | float:
    if isinstance(value, bool) or (strict and not isinstance(value, (int, float))):
        raise Bad("be a whole number" if integer else "be a number")
    if integer:
        if isinstance(value, int):
            return value
        if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]+\s*", value):
            return int(value)
        raise Bad("be a whole number")
    if isinstance(value, (int, float)):
        number = float(value) if isinstance(value, float) else value
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise Bad("be a number") from None
    else:
        raise Bad("be a number")
    if isinstance(number, float) and not math.isfinite(number):
        raise Bad("be a finite number")
    return number


class Int(Type):
    """A whole number from ``low`` to ``high`` (either may be None)."""

    ansible = "int"
    words = "a whole number in a range"

    def __init__(
        self, low: int | None = None, high: int | None = None, unit: str = "", strict: bool = False, **kw: Any
    ):
        super().__init__(**kw)
        self.low, self.high, self.unit, self.strict = low, high, unit, strict
        self.sample_value = low if low is not None and low > 0 else (1 if high is None or high >= 1 else high)

    def _range(self) -> str:
        unit = " %s" % self.unit if self.unit else ""
        if self.low is not None and self.high is not None:
            return "be a whole number%s from %s to %s" % (unit.replace(" ", " of ", 1), self.low, self.high)
        if self.low is not None:
            return "be at least %s%s" % (self.low, unit) if self.low else "not be negative"
        return "be at most %s%s" % (self.high, unit)

    def check(self, value: Any) -> Any:
        number = _number(value, True, self.strict)
        if (self.low is not None and number < self.low) or (self.high is not None and number > self.high):
            raise Bad(self._range())
        return number


class Number(Type):
    """A finite number from ``low`` to ``high`` (either may be None); ``above`` makes ``low`` exclusive."""

    ansible = "float"
    words = "a finite number in a range"

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        above: bool = False,
        unit: str = "",
        strict: bool = False,
        **kw: Any,
    ):
        super().__init__(**kw)
        self.low, self.high, self.above, self.unit, self.strict = low, high, above, unit, strict
        self.sample_value = (low or 0) + 1 if high is None else (high if low is None else (low + high) / 2.0)

    def check(self, value: Any) -> Any:
        number = _number(value, False, self.strict)
        unit = " of %s" % self.unit if self.unit else ""
        low_bad = self.low is not None and (number <= self.low if self.above else number < self.low)
        if low_bad or (self.high is not None and number > self.high):
            if self.low is not None and self.high is not None:
                if self.above:
                    raise Bad("be a number%s above %s and at most %s" % (unit, self.low, self.high))
                raise Bad("be a number%s from %s to %s" % (unit, self.low, self.high))
            if self.low is not None:
                if self.above:
                    raise Bad("be a number%s above %s" % (unit, self.low))
                raise Bad("not be negative" if self.low == 0 else "be at least %s" % self.low)
            raise Bad("be at most %s" % self.high)
        return number


class Seconds(Number):
    """A duration in seconds: finite, from ``low`` (0 by default) to ``high`` (a year by default)."""

    words = "a duration in seconds"

    def __init__(self, low: float = 0, high: float = YEAR, integer: bool = False, **kw: Any):
        super().__init__(low=low, high=high, unit="seconds", **kw)
        self.integer = integer
        if integer:
            self.ansible = "int"
        self.sample_value = max(1, low or 0)

    def check(self, value: Any) -> Any:
        if self.integer:
            _number(value, True)
        return super().check(value)


class Time(Type):
    """An instant: ISO 8601 with its time zone (``2026-12-01T18:00:00Z``, ``...+02:00``; YAML's own timestamp too) or
    seconds since the epoch. A time without a zone is refused: a deadline read in the wrong zone cuts a run hours
    early or late. :meth:`check` gives it back as UTC ISO text (JSON-safe; :func:`epoch` reads it)."""

    words = "a time: ISO 8601 with a zone, or epoch seconds"
    sample_value = "2030-01-01T00:00:00Z"
    LOW, HIGH = 946684800, 4102444800  # 2000-01-01 to 2100-01-01: anything else is a typo (milliseconds, a year)

    def check(self, value: Any) -> Any:
        import datetime

        if isinstance(value, bool):
            raise Bad("be a time (ISO 8601 with a zone, e.g. 2026-12-01T18:00:00Z, or epoch seconds)")
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                raise Bad("name its time zone (e.g. 2026-12-01T18:00:00Z)")
            seconds = value.timestamp()
        elif isinstance(value, (int, float)) or (
            isinstance(value, str) and re.fullmatch(r"\s*[0-9]+(\.[0-9]+)?\s*", value)
        ):
            seconds = float(value)
        elif isinstance(value, str):
            text = value.strip()
            text = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
            try:
                parsed = datetime.datetime.fromisoformat(text)
            except ValueError:
                raise Bad("be a time (ISO 8601 with a zone, e.g. 2026-12-01T18:00:00Z, or epoch seconds)") from None
            if parsed.tzinfo is None:
                raise Bad("name its time zone (e.g. 2026-12-01T18:00:00Z)")
            seconds = parsed.timestamp()
        else:
            raise Bad("be a time (ISO 8601 with a zone, e.g. 2026-12-01T18:00:00Z, or epoch seconds)")
        if not math.isfinite(seconds) or not self.LOW <= seconds <= self.HIGH:
            raise Bad("be a time from 2000 to 2100 (epoch seconds, not milliseconds)")
        return iso_time(seconds)


def iso_time(seconds: float) -> str:
    """Epoch seconds as UTC ISO 8601 text, to the second."""
    import datetime

    return datetime.datetime.fromtimestamp(int(seconds), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(value: Any) -> float:
    """A :class:`Time`'s value (or any value it accepts) as epoch seconds."""
    import datetime

    text = Time().check(value)
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


class Switch(Type):
    """On or off, read strictly: a misspelt true is an error, not false."""

    ansible = "bool"
    words = "true or false"
    sample_value = False
    WORDS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}

    def __init__(self, words: bool = True, **kw: Any):
        super().__init__(**kw)
        self.words_ok = words  # False: only a real boolean (an experiment file's true/false)

    def check(self, value: Any) -> Any:
        if isinstance(value, bool):
            return value
        if not self.words_ok:
            raise Bad("be true or false")
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in self.WORDS:
            return self.WORDS[value.strip().lower()]
        raise Bad("be true or false (also yes/no/1/0, any case)")
