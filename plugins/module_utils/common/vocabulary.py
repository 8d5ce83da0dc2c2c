# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""One vocabulary of value types for every input surface: module and action arguments, experiment keys, role
variables, command-line switches and inventory plugin options.

A surface declares each of its fields with a type from here (``AbsPath()``, ``Url(schemes=("https",))``,
``Secret()``, ``Int(1, 100)``...). The type knows

* what a good value is (:meth:`Type.check`, which returns the value as the code should use it, or raises
  :class:`Bad` with what the value *must* be);
* how to show a bad value in an error line without leaking it (:meth:`Type.shown`: a secret is never shown, a URL
  only as scheme and host);
* a corpus of bad values of its own kind (:meth:`Type.corpus`), from which ``tests/unit/test_bad_input_generated.py``
  builds a case for every field of every surface, so a field is covered the day it is declared;
* for module arguments, the Ansible argument-spec entry it stands for (:meth:`Type.ansible_spec`).

:class:`Args` is a module's or action's whole argument declaration: ``Args(...).spec`` is the Ansible
``argument_spec``; :meth:`Args.errors` checks parsed parameters (after Ansible's own type conversion) and gives one
line per bad field, ``"<name> must <what it must be>, got <shown value>"``; :func:`enforce` fails a module with them.

Cross-field rules (a merge target that overlaps its checkpoints, a world-open firewall without its explicit switch)
stay with the surface that knows both fields. Standard library only: code that runs on the nodes imports it.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast
from urllib.parse import urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common import paths
from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK, holds_credentials, mask_patterns
from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import holds_secret_value, is_secret_name

NOTSET = object()

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOST = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
_DOTS = re.compile(r"^\.\.?\Z")  # "." and "..": a directory's own names, never a name of a thing
# Linux: at most 15 bytes (IFNAMSIZ - 1), no '/', no whitespace, not '.' or '..'; ':' marks an alias.
_IFNAME = re.compile(r"^[A-Za-z0-9_.+@-]{1,15}$")
_GIT_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,199}$")
_HF_REPO = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*"
    r"(?:(?:[<>=!~]=?|===)\s*[A-Za-z0-9*+!._-]+\s*(?:,\s*(?:[<>=!~]=?|===)\s*[A-Za-z0-9*+!._-]+\s*)*)?"
    r"(?:\s*@\s*\S+)?(?:\s*;\s*[^;]+)?$"
)
YEAR = 366 * 86400
# The most GPUs one node can be said to have, for every count of them (ray_num_gpus, ray_node's num_gpus).
MAX_GPUS = 1024


class Bad(ValueError):
    """What a value must be, as the words after "must" (``be an absolute path``); the surface adds the name."""


class Line(Bad):
    """A whole error line, from a surface's own rule (:class:`Custom`), used as it is."""


class Inner(Bad):
    """A bad item of a list (``where`` = ``[3]``) or a bad value of a mapping (``.KEY``): the line names it."""

    def __init__(self, where: str, t: Type, value: Any, bad: Bad):
        super().__init__(str(bad))
        self.where, self.t, self.value, self.bad = where, t, value, bad


class Corpus(list):
    """Bad values of a type: ``(label, value, typed)``; ``typed`` marks a value of the wrong Python type, which only
    surfaces without their own type conversion (experiment files, role variables, switches) see as such."""

    def add(self, label: str, value: Any, typed: bool = False) -> Corpus:
        self.append((label, value, typed))
        return self


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def type_word(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, (list, tuple)):
        return "a list"
    return type(value).__name__


def _shown(value: Any) -> str:
    # Whatever the field, a value shaped like a credential (https://user:<token>@host, Bearer <token>) is never
    # repeated: a name, a requirement or a list given one by mistake would otherwise show it back.
    if credential_strings(value):
        return "a value that looks like it holds a credential (not shown)"
    if isinstance(value, str):
        return repr(_short(value))
    if value is None:
        return "null"
    if isinstance(value, (dict, list, tuple)):
        return "%s (%s)" % (_short(repr(value), 60), type_word(value))
    return repr(value)


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _leaves(k) + _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value] if isinstance(value, str) and value else []


def _unshown(t: Type, value: Any) -> bool:
    """Whether ``t``'s line leaves ``value`` out (a credential-shaped one, :func:`_shown` says so itself)."""
    return t.secret or bool(t.conceal(value)) and not credential_strings(value)


def credential_strings(value: Any) -> list[str]:
    """The strings of ``value`` no line may repeat: shaped like a credential (masking.holds_credentials), holding what
    output masking would mask (``HF_TOKEN=<value>``), or under a secret's name in a mapping (``[{HF_TOKEN: ...}]``
    where a list of names belongs)."""
    if isinstance(value, dict):
        return [
            x
            for k, v in value.items()
            for x in credential_strings(k)
            + (_leaves(v) if isinstance(k, str) and holds_secret_value(k) else credential_strings(v))
        ]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in credential_strings(v)]
    return [value] if isinstance(value, str) and (holds_credentials(value) or mask_patterns(value) != value) else []


def one_line(value: Any, what: str = "one line of text") -> str:
    if not isinstance(value, str):
        raise Bad("be %s" % what)
    if _CONTROL.search(value):
        raise Bad("be %s without line breaks or control characters" % what)
    return value


class Type:
    """A kind of value. Keyword arguments describe the field that has the type: ``required``, ``default``,
    ``aliases``, ``no_log`` (for module arguments), ``hint`` (appended to the error line)."""

    ansible = "str"
    elements: str | None = None
    secret = False  # the value may carry a secret: never shown, never echoed
    words = "a value"  # what a good value is, for the docs' table
    sample_value: Any = "x"

    def __init__(
        self,
        required: bool = False,
        default: Any = NOTSET,
        aliases: Iterable[str] = (),
        no_log: bool | None = None,
        hint: str = "",
        nullable: bool = True,
        sample: Any = NOTSET,
        label: str = "",
        ansible: str | None = None,
        must: str = "",
        env: str | None = None,
    ):
        self.must = must  # what every refusal says instead of the kind's own words ("be infinity or ...")
        self.env = env  # a module option Ansible fills from this environment variable when the task gives none
        self.label = label  # how lines name the field when not by its own name ("venv (verl_job_venv)")
        if ansible:
            self.ansible = ansible  # the Ansible spec type, where it differs from the kind's (a path kept as "str")
        self.required = required
        self.default = default
        self.aliases = tuple(aliases)
        self.no_log = no_log
        self.hint = hint
        # None means "not given" for an optional field of a module (Ansible passes it for unset options).
        self.nullable = nullable and not required
        if sample is not NOTSET:
            self.sample_value = sample

    # -- checking ----------------------------------------------------------------------------------
    def check(self, value: Any) -> Any:
        """The value as the code should use it; :class:`Bad` when it is not good."""
        return value

    def validate(self, value: Any, context: dict[str, Any] | None = None) -> Any:
        """:meth:`check`, with None allowed for an optional field; ``context`` holds the surface's other values (a
        type that depends on a switch beside it, as :class:`Cidr` on its ``world_switch``, reads it there)."""
        if value is None:
            if self.nullable:
                return None
            raise Bad("be given" if self.required else "be set (null is not a value here)")
        if not self.must:
            return self.check_in(value, context or {})
        try:
            return self.check_in(value, context or {})
        except (Line, Inner):
            raise
        except Bad:
            raise Bad(self.must) from None

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        return self.check(value)

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        """``[(path, type, value, Bad)]``: every problem of ``value`` (one at most here; containers list each bad
        item), for surfaces that report them all (an experiment file). ``type.line(path, value, bad)`` is the line."""
        try:
            self.validate(value, context)
            return []
        except Bad as e:
            return [(where, self, value, e)]

    def conceal(self, value: Any) -> list[str]:
        """The strings of a refused ``value`` that no output may hold (Ansible masks them, the invocation included)."""
        return _leaves(value) if self.secret else credential_strings(value)

    def shown(self, value: Any) -> str:
        """How an error line shows a bad value: never a secret, nor a value holding what :meth:`conceal` hides (a
        mapping of environment variables with a secret's value in it)."""
        return "the value is not shown" if _unshown(self, value) else "got %s" % _shown(value)

    def line(self, name: str, value: Any, bad: object) -> str:
        name = self.label or name
        if isinstance(bad, Line):
            return str(bad)
        if isinstance(bad, Inner):
            return bad.t.line(name + bad.where if name else bad.where.lstrip("."), bad.value, bad.bad)
        shown = self.shown(value)
        sep = " (" if shown.startswith("the value") else ", "
        end = ")" if sep == " (" else ""
        return "%s must %s%s%s%s%s" % (name, bad, sep, shown, end, self.hint)

    # -- the generated bad-input cases ----------------------------------------------------------------
    def corpus(self) -> Corpus:
        c = Corpus()
        if not self.nullable:
            c.add("null", None, typed=True)
        return c

    def sample(self) -> Any:
        """A good value (for the fields a generated case does not make bad); may hold ``{tmp}`` / ``{stub}``."""
        return self.sample_value

    # -- Ansible ------------------------------------------------------------------------------------------
    def ansible_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"type": self.ansible}
        if self.elements:
            spec["elements"] = self.elements
        if self.required:
            spec["required"] = True
        if self.default is not NOTSET:
            spec["default"] = self.default
        if self.aliases:
            spec["aliases"] = list(self.aliases)
        no_log = self.secret if self.no_log is None else self.no_log
        if no_log or self.no_log is False:
            spec["no_log"] = bool(no_log)
        choices = getattr(self, "choices", None) or getattr(getattr(self, "item", None), "choices", None)
        if choices:
            spec["choices"] = list(choices)
        return spec


# ------------------------------------------------------------------------------------------------------------
# Text


class Text(Type):
    """One line of text (no line break or control character), ``empty`` allowed or not, at most ``max_len``.

    A kind of text (a subclass) declares its ``empty``, ``max_len``, ``pattern``, ``what`` and ``refused`` as class
    attributes rather than in an ``__init__`` of its own; the keyword arguments of a field override the first four."""

    words = "one line of text"
    empty = True
    max_len = 4096
    pattern: re.Pattern[str] | None = None
    what = ""
    # What the pattern lets through that is no good all the same, found anywhere in the value ("." or ".." as a name).
    refused: re.Pattern[str] | None = None

    def __init__(
        self,
        empty: bool | None = None,
        max_len: int | None = None,
        pattern: str | re.Pattern[str] | None = None,
        what: str | None = None,
        lines: bool = False,
        credentials: bool | None = None,
        **kw: Any,
    ):
        super().__init__(**kw)
        # Whether a credential-shaped value is good: where the surface keeps it out of sight itself (ray_env's values go
        # to the root-only file), and in text of several lines (a file's or a script's content, which the collection
        # carries, never shows); a one-line value (a name, a word, a setting) holding one is refused, as it is shown.
        self.credentials = lines if credentials is None else credentials
        if empty is not None:
            self.empty = empty
        if max_len is not None:
            self.max_len = max_len
        if pattern is not None:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.lines = lines
        self.what = what or self.what or ("text" if lines else "one line of text")

    def check(self, value: Any) -> Any:
        if self.lines:
            # Several lines (a shell script, a description): line breaks and tabs, no other control character.
            if not isinstance(value, str):
                raise Bad("be %s" % self.what)
            if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", value):
                raise Bad("be %s without control characters (NUL, escapes)" % self.what)
        else:
            one_line(value, self.what)
        if not value.strip():
            if self.empty:
                return self.check_text(value)
            raise Bad("not be empty (it must be %s)" % self.what)
        if len(value) > self.max_len:
            raise Bad("be at most %d characters long" % self.max_len)
        if (self.pattern is not None and not self.pattern.match(value)) or (
            self.refused and self.refused.search(value)
        ):
            raise Bad("be %s" % self.what)
        value = self.check_text(value)
        if not self.credentials and isinstance(value, str) and holds_credentials(value):
            # Shown wherever the field is (a cluster name in every summary line): a secret has its own fields.
            raise Bad(
                "be %s, not a credential: secrets have fields of their own (an experiment's secrets:, Ansible "
                "Vault)" % self.what
            )
        return value

    def check_text(self, value: str) -> str:
        """The kind's own rule, for a value that passed the rules of all text (one line, not too long, its pattern;
        a blank value only where ``empty`` allows it): the value as the code should use it, or :class:`Bad`."""
        return value

    def corpus(self) -> Corpus:
        c = super().corpus().add("nul", "a\x00b").add("too_long", "x" * (self.max_len + 1))
        if not self.lines:
            c.add("newline", "a\nb").add("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\ns3cr3tKeyBody\n")
        c.add("list", ["x"], typed=True).add("list_credentials", ["https://user:s3cr3t@example.org/x"], typed=True)
        if not self.empty:
            c.add("empty", "").add("blank", "  ")
        return c


class Name(Text):
    """A name for a file, a label, a cluster: letters, digits, ``_ . -``, starting with a letter or digit."""

    words = "a name of letters, digits, _ . -"
    refused = _DOTS

    def __init__(self, max_len: int = 80, empty: bool = False, **kw: Any):
        super().__init__(
            empty=empty,
            max_len=max_len,
            pattern=_NAME,
            what="a name of letters, digits, _ . - (starting with a letter or digit, at most %d)" % max_len,
            **kw,
        )

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("slash", "a/b")
            .add("space", "a b")
            .add("dash_first", "-x")
            .add("dotdot", "..")
            .add("unicode", "j\u00f6b")
            .add("url_credentials", "https://user:s3cr3t@example.org")
            .add("token", "ghp_s3cr3t" + "A" * 36)
        )


class Choice(Type):
    words = "one of a fixed set"

    def __init__(self, choices: Iterable[Any], **kw: Any):
        super().__init__(**kw)
        self.choices = tuple(choices)
        self.sample_value = self.choices[0]

    def check(self, value: Any) -> Any:
        if value not in self.choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1, cutoff=0.6)
            raise Bad(
                "be one of %s%s"
                % (", ".join(str(c) for c in self.choices), " (did you mean '%s'?)" % close[0] if close else "")
            )
        return value

    def corpus(self) -> Corpus:
        c = super().corpus().add("unknown", "no-such-choice")
        if "" not in self.choices:
            c.add("empty", "")
        return c


class EnvName(Text):
    words = "an environment variable name"
    empty, max_len, pattern = False, 255, _ENV_NAME
    what = "an environment variable name (letters, digits, _; not starting with a digit)"
    sample_value = "HF_TOKEN"

    def check_text(self, value: str) -> str:
        # ghp_<36 letters> has a name's grammar: a token given where its variable's name belongs (secrets:,
        # code.token_secret) would be repeated by every line that names the variable.
        if holds_credentials(value):
            raise Bad("be the name of the variable that holds the token, not the token itself")
        return value

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("equals", "A=B")
            .add("digit_first", "1A")
            .add("dash", "A-B")
            .add("token", "ghp_s3cr3tAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
            .add("name_and_value", "HF_TOKEN=hf_s3cr3t")
        )


class Secret(Type):
    """A token, key or password: never shown, never in a message. One line without spaces or control characters
    (it becomes an HTTP header or an environment value); ``multiline`` for a key file's content (PEM)."""

    secret = True
    words = "a secret (never shown)"
    sample_value = "s3cr3t-sample-value"

    def __init__(self, multiline: bool = False, max_len: int = 65536, empty: bool = True, **kw: Any):
        super().__init__(**kw)
        self.multiline = multiline
        self.max_len = max_len
        self.empty = empty

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise Bad("be text")
        if not value and not self.empty:
            raise Bad("not be empty")
        if len(value) > self.max_len:
            raise Bad("be at most %d characters" % self.max_len)
        if self.multiline:
            if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", value):
                raise Bad("be the key's text without control characters")
            return value
        if value and any(not 33 <= ord(c) <= 126 for c in value):
            raise Bad("be the secret alone, without spaces, line breaks or other characters a token cannot have")
        return value

    def corpus(self) -> Corpus:
        c = super().corpus().add("nul", "tok\x00en")
        if not self.empty:
            c.add("empty", "")
        if not self.multiline:
            c.add("newline", "s3cr3t-sample-value\nHost: evil").add("space", "s3cr3t sample").add("cr", "tok\ren")
        return c


# ------------------------------------------------------------------------------------------------------------
# Numbers and switches


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


def _bounds(t: Int | Number, c: Corpus) -> Corpus:
    """The bad values every number has: a boolean, digits as text where only a number is read, each side of its range."""
    c.add("boolean", True, typed=True)
    if t.strict:
        c.add("number_as_text", "2", typed=True)
    if t.low is not None:
        c.add("below", t.low - 1)
    if t.high is not None:
        c.add("above", t.high + 1)
    return c


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

    def corpus(self) -> Corpus:
        return _bounds(self, super().corpus().add("word", "soon").add("fraction", 1.5))


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

    def corpus(self) -> Corpus:
        return _bounds(self, super().corpus().add("nan", float("nan")).add("inf", float("inf")).add("word", "lots"))


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

    def corpus(self) -> Corpus:
        # An int option given inf or nan: Ansible's own conversion raises OverflowError before any check of ours.
        return Corpus(c for c in super().corpus() if not (self.integer and isinstance(c[1], float)))


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

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("no_zone", "2026-12-01T18:00:00")
            .add("word", "tomorrow")
            .add("month_13", "2026-13-01T00:00:00Z")
            .add("milliseconds", 1796140800000)
            .add("boolean", True, typed=True)
        )


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

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("typo", "treu")
            .add("word", "maybe")
            .add("two", 2, typed=True)
            .add("list", [True], typed=True)
        )


# ------------------------------------------------------------------------------------------------------------
# Paths


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

    def corpus(self) -> Corpus:
        c = (
            super()
            .corpus()
            .add("dotdot", "/data/../etc")
            .add("newline", "/data/a\nb")
            .add("nul", "/data/a\x00b")
            .add("number", 5, typed=True)
        )
        if not self.relative:
            c.add("relative", "data/x").add("dot_relative", "./x")
        if not self.empty:
            c.add("empty", "")
        if self.under:
            c.add("outside", "/etc")
        return confined_corpus(c, self.purpose)


def confine(path: Any, purpose: str | None) -> Any:
    """:class:`Bad` when a ``path`` given for ``purpose`` lies where the collection must not write (paths.misplaced)."""
    why = paths.misplaced(path, purpose) if isinstance(path, str) else None
    if why:
        raise Bad(why)
    return path


def confined_corpus(c: Corpus, purpose: str | None) -> Corpus:
    """``c`` with the places a path of ``purpose`` must never be, when it is written into: ``/``, a system directory
    and something under one (``//etc`` too, which Linux reads as ``/etc``), a directory that holds others'."""
    if purpose in paths.WRITTEN:
        c.add("root", "/").add("system_tree", "/usr").add("under_system", "/proc/rlinfra").add(
            "double_slash", "//usr/x"
        ).add("shared_dir", "/opt").add("home_dir", "/home/ubuntu")
        if purpose != "config":
            c.add("under_etc", "/etc/rlinfra")
        else:
            c.add("etc", "/etc")
    return c


class RelPath(Type):
    """A relative path that stays inside its base: no leading ``/``, no ``..`` component."""

    words = "a relative path inside its base"
    sample_value = "."

    def check(self, value: Any) -> Any:
        one_line(value, "a relative path")
        if value.startswith("/") or ".." in value.split("/") or not value.strip():
            raise Bad("be a relative path inside its base (not starting with /, no '..')")
        return value

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("absolute", "/etc")
            .add("dotdot", "../x")
            .add("inner_dotdot", "a/../../x")
            .add("nul", "a\x00b")
            .add("empty", "")
        )


normpath, inside, overlap = paths.normpath, paths.inside, paths.overlap


def leads_outside(path: str, root: str) -> bool:
    """Whether ``path``, its symbolic links followed, ends outside ``root`` (whose own links are followed too): what is
    read through it would then be another directory's, such as ``/etc``. A path that leads nowhere (a loop, a missing
    target) does not: reading it fails on its own, and reads nothing of elsewhere."""
    real = os.path.realpath(path)
    return os.path.lexists(real) and not inside(real, os.path.realpath(root))


# ------------------------------------------------------------------------------------------------------------
# URLs and remote names


def url_shown(value: Any) -> str:
    """A URL as an error line may show it: scheme, host and port; user-info, path, query and fragment never (a token
    can hide in any of them)."""
    if not isinstance(value, str):
        return type_word(value)
    if re.search(r"\s", value.strip()):
        return "a value with spaces or line breaks (not shown)"
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "a value that is not a URL (not shown)"
    if not parts.scheme or not host:
        return "a value that is not a URL (not shown)"
    at = MASK + "@" if "@" in parts.netloc else ""
    rest = "/..." if (parts.path not in ("", "/") or parts.query or parts.fragment) else ""
    return "%s://%s%s%s%s" % (
        parts.scheme,
        at,
        host if ":" not in host else "[%s]" % host,
        ":%d" % port if port else "",
        rest,
    )


def urlsplit_words(error: ValueError) -> str:
    """Why urlsplit refused a URL, as a line may repeat it: its own words, but never the part of the value it quotes
    ("port could not be cast to integer value as '<token>'", "'<user>:<token>@host' does not appear to be an ipv4 or
    ipv6 address", "netloc '<token>@host' contains invalid characters...")."""
    text = str(error).lower()
    words = text.split(":", maxsplit=1)[0]
    if "'" not in text and '"' not in text:
        return words
    if text.startswith("port"):
        return "the port is not a number"
    if text.startswith("netloc"):
        return "the host has characters a host name cannot have"
    if "ipv4 or ipv6" in text:
        return "a host in [ ] must be an IPv6 address"
    return "it cannot be read as a URL"


class Url(Type):
    """A URL with one of ``schemes``, a host, and no credentials: nothing before ``@`` in the host part, no query
    string or fragment (a token hides there); ``path`` False also refuses a path. Error lines show only scheme and
    host (:func:`url_shown`). ``empty`` allows ``""`` (unset); ``default_scheme`` is assumed when the value has none
    (``10.0.0.5:8265``). :meth:`check` returns the URL with its scheme, without a trailing ``/``."""

    words = "a URL without credentials"
    sample_value = "{stub}"

    def __init__(
        self,
        schemes: Iterable[str] = ("https", "http"),
        empty: bool = False,
        path: bool = True,
        default_scheme: str = "",
        **kw: Any,
    ):
        super().__init__(**kw)
        self.schemes, self.empty, self.path, self.default_scheme = tuple(schemes), empty, path, default_scheme
        if "http" not in self.schemes:
            # The generated cases' stub speaks plain HTTP; a closed loopback port takes no request either.
            self.sample_value = "%s://127.0.0.1:9" % self.schemes[0]

    def shown(self, value: Any) -> str:
        if self.default_scheme and isinstance(value, str) and "://" not in value:
            value = "%s://%s" % (self.default_scheme, value)
        return "got %s" % url_shown(value)

    def conceal(self, value: Any) -> list[str]:
        # A refused URL may hold a token anywhere but where url_shown shows it.
        return [v for v in _leaves(value) if url_shown(v) not in (v, v.rstrip("/"))]

    def check(self, value: Any) -> Any:
        if isinstance(value, str) and not value.strip() and self.empty:
            return ""
        what = "an %s URL" % " or ".join(s + "://" for s in self.schemes)
        one_line(value, what)
        if re.search(r"\s", value):
            raise Bad("be %s without spaces" % what)
        if self.default_scheme and "://" not in value:
            value = "%s://%s" % (self.default_scheme, value)
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError as e:
            raise Bad("be %s (%s)" % (what, urlsplit_words(e))) from e
        if parts.scheme.lower() not in self.schemes:
            raise Bad("be %s" % what)
        if parts.scheme.lower() != "file" and not parts.hostname:
            raise Bad("be %s with a host" % what)
        if port == 0:
            raise Bad("be %s with a port from 1 to 65535" % what)
        if "@" in parts.netloc:
            raise Bad("be %s without credentials before '@' (give a token through its own secret option)" % what)
        if parts.query or parts.fragment or "?" in value or "#" in value:
            raise Bad("be %s without a query string or fragment (a token does not belong in a URL)" % what)
        if not self.path and parts.path not in ("", "/"):
            raise Bad("be %s without a path (scheme, host and port only)" % what)
        return value.rstrip("/") if parts.path in ("", "/") else value

    def corpus(self) -> Corpus:
        c = (
            super()
            .corpus()
            .add("userinfo_token", "https://ghp_s3cr3tT0ken@example.org/x")
            .add("userinfo_password", "https://user:s3cr3tPass@example.org/x")
            .add("query_token", "https://example.org/x?token=s3cr3tQuery")
            .add("fragment", "https://example.org/x#s3cr3tFrag")
            .add("scheme", "ftp://example.org/x")
            .add("no_host", "https:///x")
            .add("space", "https://exa mple.org/")
            .add("port_range", "https://example.org:70000/")
            .add("newline", "https://example.org/\nx")
            .add("port_token", "https://user:s3cr3tPort")
            .add("bracket_userinfo", "https://[user:s3cr3tBr@example.org]/")
            .add("nfkc_userinfo", "https://s3cr3t\u2100@example.org/")
        )
        if not self.default_scheme:
            c.add("not_url", "example.org")
        if "file" not in self.schemes:
            c.add("file", "file:///etc/passwd")
        if not self.empty:
            c.add("empty", "")
        if not self.path:
            c.add("path", "http://127.0.0.1:8265/api/jobs")
        return c


class GitUrl(Type):
    """A git remote: ``https://host/...``, ``ssh://[user@]host/...``, ``git://``, ``file:///...``, or scp-like
    ``user@host:path``. A password or token in it is refused (a user name is fine over SSH)."""

    words = "a git URL without credentials"
    sample_value = "https://example.org/org/repo.git"
    # user@host:path; neither user nor host starts with "-" (git clone -u@h:p reads -u as --upload-pack)
    _SCP = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*@[A-Za-z0-9][A-Za-z0-9_.-]*:[^\s]+$")

    def shown(self, value: Any) -> str:
        if isinstance(value, str) and self._SCP.match(value):
            return "got %s" % _shown(value)
        return "got %s" % url_shown(value)

    def conceal(self, value: Any) -> list[str]:
        return [v for v in _leaves(value) if not self._SCP.match(v) and url_shown(v) not in (v, v.rstrip("/"))]

    def check(self, value: Any) -> Any:
        what = "a git URL (https://host/org/repo.git, git@host:org/repo.git, ssh://, git:// or file://)"
        one_line(value, what)
        if re.search(r"\s", value):
            raise Bad("be %s" % what)
        if self._SCP.match(value) and "://" not in value:
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018
        except ValueError:
            raise Bad("be %s" % what) from None
        scheme = parts.scheme.lower()
        if scheme not in ("https", "http", "ssh", "git", "file"):
            raise Bad("be %s" % what)
        if scheme != "file" and (not parts.hostname or not (_ip(parts.hostname) or _HOST.match(parts.hostname))):
            raise Bad("be %s" % what)  # a host that is no host name (ssh://-oProxyCommand=.../x) is an option to ssh
        if "@" in parts.netloc and (scheme != "ssh" or ":" in parts.netloc.rsplit("@", 1)[0]):
            raise Bad("be %s without credentials: name the secret that holds a token in code.token_secret" % what)
        if parts.query or parts.fragment or "?" in value or "#" in value:
            raise Bad("be %s without a query string or fragment (a token does not belong in a URL)" % what)
        return value

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("userinfo_token", "https://ghp_s3cr3tT0ken@github.com/org/x.git")
            .add("userinfo_password", "https://user:s3cr3tPass@github.com/org/x.git")
            .add("ssh_password", "ssh://git:s3cr3tPass@github.com/org/x.git")
            .add("query_token", "https://github.com/org/x.git?access_token=s3cr3tQuery")
            .add("fragment", "https://github.com/org/x.git#s3cr3tFrag")
            .add("scheme", "ftp://github.com/org/x.git")
            .add("not_url", "github.com/org/x")
            .add("empty", "")
            .add("newline", "https://github.com/x\n")
            .add("option_host", "ssh://-oProxyCommand=id/x.git")
            .add("option_user", "-u@github.com:org/x.git")
        )


class ImageRef(Text):
    """A container image reference: ``[registry[:port]/]path[:tag][@sha256:<64 hex>]``, as docker and podman read
    it. Credentials (``user:pass@registry``) are refused: they go through ray_container_registry_* instead."""

    words = "a container image reference"
    max_len = 512
    pattern = re.compile(
        r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?/)?"
        r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
    )
    what = (
        "a container image reference ([registry/]name[:tag][@sha256:digest], for example "
        "docker.io/verlai/verl:app-verl0.5-vllm0.10.0-mcore0.13.0-te2.2)"
    )
    sample_value = "docker.io/verlai/verl:app-verl0.5-vllm0.10.0-mcore0.13.0-te2.2"

    @staticmethod
    def _credentials(value: Any) -> bool:
        # An '@' belongs only to a digest at the end (@sha256:<64 hex>); any other may be user:password@ written
        # anywhere (before the registry, after a scheme, after a path: https://u:p@registry/x, registry/u:p@x), so
        # a value that has one is never shown.
        return isinstance(value, str) and "@" in ImageRef._undigested(value)

    @staticmethod
    def _undigested(value: str) -> str:
        return re.sub(r"@sha256:[a-f0-9]{64}\Z", "", value)

    def shown(self, value: Any) -> str:
        return (
            "the value, which may hold credentials, is not shown" if self._credentials(value) else super().shown(value)
        )

    def conceal(self, value: Any) -> list[str]:
        return [value] if self._credentials(value) else super().conceal(value)

    def check(self, value: Any) -> Any:
        if self._credentials(value) and "@sha256:" not in self._undigested(value):
            raise Bad(
                "be a container image reference without credentials: set ray_container_registry_username and "
                "ray_container_registry_password instead"
            )
        return super().check(value)

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("credentials", "user:s3cr3tPass@registry.example/x:1")
            .add("upper", "Verlai/Verl:1")
            .add("space", "verl ai")
            .add("dash_first", "-x")
            .add("short_digest", "x@sha256:abc")
            .add("scheme", "https://registry.example/x")
            .add("scheme_credentials", "https://user:s3cr3tPass@registry.example/x:1")
            .add("path_credentials", "registry.example/user:s3cr3tPass@x:1")
            .add("tag_credentials", "registry.example/x:1@user:s3cr3tPass")
        )


class GitRef(Text):
    words = "a branch, tag or 40-character commit"
    empty, max_len, pattern = False, 200, _GIT_REF
    what = "a branch, a tag or a full 40-character commit"
    sample_value = "main"
    # What git refuses in a ref name, of what _GIT_REF lets through: "..", "//", "@{", a part starting with "." or
    # ending in ".lock", a trailing "/" or "." ("." alone would be `git checkout .`, every file of the work tree).
    refused = re.compile(r"\.\.|//|@\{|/\Z|\.lock\Z|(?:\A|/)\.|\.\Z")

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("dotdot", "a..b")
            .add("option", "--upload-pack=x")
            .add("space", "a b")
            .add("lock", "x.lock")
            .add("dot", ".")
            .add("dot_part", "release/.hidden")
            .add("upstream", "@{upstream}")
            .add("ancestor", "HEAD~1")
            .add("short_option", "-c")
        )


class HfRepoId(Text):
    words = "a Hugging Face repository id (org/name)"
    empty, max_len, pattern = False, 192, _HF_REPO
    what = "a Hugging Face repository id (org/name: letters, digits, _ - .; no '--' or '..')"
    sample_value = "org/name"
    refused = re.compile(r"--|\.\.")

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("url", "https://huggingface.co/org/x")
            .add("three_parts", "a/b/c")
            .add("dashes", "org/a--b")
            .add("dotdot", "org/..")
        )


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address ``text`` is (spaces around it aside), None when it is none."""
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


class Host(Text):
    """A host name or an IP address."""

    words = "a host name or IP address"
    empty, max_len, what = False, 253, "a host name or IP address"
    sample_value = "127.0.0.1"

    def check_text(self, value: str) -> str:
        if not value and self.empty:
            return value
        text = value.strip()
        if _ip(text) is None and not _HOST.match(text):
            raise Bad("be %s" % self.what)
        return text

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("option", "-oProxyCommand=x")
            .add("url", "http://h/")
            .add("space", "a b")
            .add("url_credentials", "https://s3cr3t@example.org")
        )


# Names every resolver of these systems answers with loopback: /etc/hosts of Debian, Ubuntu, RHEL and kin, and
# RFC 6761's *.localhost (systemd-resolved, glibc's myhostname).
LOOPBACK_NAMES = frozenset(
    (
        "localhost",
        "localhost.localdomain",
        "localhost4",
        "localhost4.localdomain4",
        "localhost6",
        "localhost6.localdomain6",
        "ip6-localhost",
        "ip6-loopback",
    )
)


def unreachable(ip: Any, loopback: bool = True) -> str | None:
    """Why other machines cannot reach ``ip`` (an ``ipaddress`` address, or its text) as this node's, or None when
    they can: the "any" address in either spelling (``0.0.0.0``, ``::``, ``::ffff:0.0.0.0``), multicast, the IPv4
    broadcast, or a scoped address (``fe80::1%eth0``: its ``%`` is a specifier to systemd in a unit line, and the
    scope is this node's own).

    Loopback stays good by default: a one-node cluster on 127.0.0.1 is a real setup. ``loopback=False`` is for a host
    an inventory source or a provider's answer names as a machine to connect to: there loopback (127.0.0.0/8,
    ``::1``, ``::ffff:127.x``, or a name such as ``localhost``) is the controller itself, never that machine, and a
    play sent to it would run on the controller. A host name other than those is judged by nobody here."""
    shown = ip.strip() if isinstance(ip, str) else ip  # as given: ::ffff:127.0.0.1, not ipaddress' ::ffff:7f00:1
    if isinstance(ip, str):
        ip = _ip(ip)
        if ip is None:
            name = shown.rstrip(".").lower()
            if not loopback and (name in LOOPBACK_NAMES or name.endswith(".localhost")):
                return "not %s (this machine's own loopback)" % shown
            return None
    plain = ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip
    if plain.is_unspecified or plain.is_multicast or str(plain) == "255.255.255.255":
        return "not %s" % shown
    if getattr(ip, "scope_id", None):
        return "without a %%scope (%s is this node's own link-local name)" % shown
    if not loopback and plain.is_loopback:
        return "not %s (this machine's own loopback)" % shown
    return None


class Address(Text):
    """An IP address a node can bind to and others can reach (:func:`unreachable` says what is not)."""

    words = "an IP address others can reach"
    empty, max_len, what = False, 64, "an IP address (for example 10.0.0.5)"
    sample_value = "10.0.0.5"
    reach = "be an address the other nodes can reach, %s"

    def check_text(self, value: str) -> str:
        if not value.strip() and self.empty:
            return ""
        # Surrounding spaces: a role writes the variable as given into a unit line, where " 10.0.0.5" is two words.
        ip = _ip(value) if value == value.strip() else None
        if ip is None:
            raise Bad("be %s" % self.what)
        why = unreachable(ip)
        if why:
            raise Bad(self.reach % why)
        return str(ip)

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("any", "0.0.0.0")
            .add("any6", "::")
            .add("name", "node-1")
            .add("multicast", "224.0.0.1")
            .add("broadcast", "255.255.255.255")
            .add("mapped_any", "::ffff:0.0.0.0")
            .add("scoped", "fe80::1%eth0")
            .add("spaces", " 10.0.0.5")
        )


WORLD_PREFIX = {4: 8, 6: 16}


# IPv6 networks that carry IPv4 addresses: (network, where the 32 IPv4 bits start). A network of them opens what its
# IPv4 part opens (::ffff:0:0/96 is every IPv4 address; 64:ff9b::/96 is the IPv4 internet through a NAT64 gateway;
# 2002::/16 is it through 6to4), so the world rule judges that part.
_EMBEDDED_IPV4 = (
    (ipaddress.ip_network("::ffff:0:0/96"), 96),
    (ipaddress.ip_network("::/96"), 96),
    (ipaddress.ip_network("64:ff9b::/96"), 96),
    (ipaddress.ip_network("2002::/16"), 16),
)
_MAPPED = _EMBEDDED_IPV4[0][0]


def ipv4_part(net: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """The IPv4 network an IPv6 ``net`` of IPv4-carrying addresses stands for (0.0.0.0/0 for a network holding one of
    those ranges whole), else None."""
    for base, start in _EMBEDDED_IPV4:
        if net.version == 6 and net.supernet_of(base):
            return ipaddress.ip_network("0.0.0.0/0")
        if net.version == 6 and net.subnet_of(base):
            bits = (int(net.network_address) >> (128 - start - 32)) & 0xFFFFFFFF
            return ipaddress.ip_network((bits, min(32, net.prefixlen - start)), strict=False)
    return None


def ipv4_mapped_network(net: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``net`` as nftables sees its packets: an IPv4-mapped network (``::ffff:10.0.0.0/104``) is the IPv4 one
    (``10.0.0.0/8``), prefix kept; any other network as it is."""
    if net.version == 6 and net.subnet_of(_MAPPED):
        return cast("ipaddress.IPv4Network | ipaddress.IPv6Network", ipv4_part(net))  # net lies in _MAPPED
    return net


def _public_size(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    """How many addresses of the internet ``net`` opens: 0 for a private range (10.0.0.0/8, fd00::/8)."""
    return 0 if net.is_private and not net.is_global else net.num_addresses


def _world_size(version: int) -> int:
    """The fewest addresses a world-open network holds: one bit more than the widest network allowed alone."""
    return 1 << (33 - WORLD_PREFIX[4] if version == 4 else 129 - WORLD_PREFIX[6])


def judged(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """The network the world rule judges for ``net``: itself, or, for an IPv6 network of IPv4-carrying addresses not
    already too wide as IPv6, the IPv4 network it opens (::ffff:0:0/96 is 0.0.0.0/0)."""
    if net.version == 6 and _public_size(net) >= _world_size(6):
        return net
    return ipv4_part(net) or net


class Cidr(Text):
    """An IP address or network. A network wider than /8 (IPv4) or /16 (IPv6) opens to a large part of the internet:
    refused unless ``world`` (the surface's explicit ``*_allow_world: true``); an IPv6 network carrying IPv4 addresses
    is judged by its IPv4 part. Host bits after the prefix are refused: ``203.0.113.7/8`` would silently open the
    whole /8 to someone who meant one machine."""

    words = "an IP network (not world-wide unless allowed)"
    empty, max_len, what = False, 64, "an IP address or network (for example 10.0.0.0/24)"
    sample_value = "10.0.0.0/24"

    def __init__(self, world: bool = False, world_switch: str = "", **kw: Any):
        super().__init__(**kw)
        self.world, self.world_switch = world, world_switch

    def check(self, value: Any) -> Any:
        return self.check_in(value, {})

    def allowed(self, context: dict[str, Any]) -> bool | str:
        return self.world or (self.world_switch and context.get(self.world_switch) is True)

    def opens(self, what: str, verb: str = "opens") -> str:
        return "%s %s to the whole internet or a large part of it%s" % (
            what,
            verb,
            " (set %s: true if that is really meant)" % self.world_switch if self.world_switch else "",
        )

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        value = super().check(value)
        try:
            net = ipaddress.ip_network(value.strip(), strict=False)
        except ValueError:
            raise Bad("be %s" % self.what) from None
        try:
            ipaddress.ip_network(value.strip())
        except ValueError:  # only the host bits, as the lenient parse above took it
            raise Bad(
                "be %s without bits set after the prefix (%s is inside %s: write %s for one address, or %s for the "
                "network)" % (self.what, value.strip(), net, value.strip().split("/")[0], net)
            ) from None
        seen = judged(net)
        if not self.allowed(context) and _public_size(seen) >= _world_size(seen.version):
            raise Bad(
                "be a network narrower than /%d: %s"
                % (WORLD_PREFIX[seen.version], self.opens(str(net) if seen is net else "%s (all of %s)" % (net, seen)))
            )
        return str(net)

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("world", "0.0.0.0/0")
            .add("world6", "::/0")
            .add("half", "0.0.0.0/1")
            .add("netmask_world", "0.0.0.0/0.0.0.0")
            .add("not_network", "10.0.0.0/33")
            .add("name", "example.org")
            .add("short_world", "0/0")
            .add("mapped_world", "::ffff:0:0/96")
            .add("nat64_world", "64:ff9b::/96")
            .add("sixtofour_world", "2002::/16")
            .add("host_bits", "203.0.113.7/8")
        )


class Networks(Type):
    """A list of :class:`Cidr` that is also judged as a whole: narrow networks that together open as much as a network
    refused alone (256 /8s, or 0.0.0.0/1 written as two /2s) are refused the same way, unless ``world_switch``."""

    ansible = "list"
    elements = "str"
    words = "a list of IP networks (not world-wide together unless allowed)"

    def __init__(self, world_switch: str = "", max_items: int = 1000, **kw: Any):
        super().__init__(**kw)
        self.cidr = Cidr(world_switch=world_switch)
        self.list = ListOf(self.cidr, max_items=max_items)
        self.sample_value = [self.cidr.sample()]

    def check(self, value: Any) -> Any:
        return self.check_in(value, {})

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        nets = [ipaddress.ip_network(n) for n in self.list.check_in(value, context)]
        if not self.cidr.allowed(context):
            seen = [judged(n) for n in nets]
            for version in (4, 6):
                mine: list[Any] = [n for n in seen if n.version == version]
                # Overlaps merged first: the same /8 given twice opens one /8.
                if sum(_public_size(n) for n in ipaddress.collapse_addresses(mine)) >= _world_size(version):
                    raise Bad(
                        "be networks that together stay narrower than /%d: %s"
                        % (WORLD_PREFIX[version], self.cidr.opens("these %d networks together" % len(mine), "open"))
                    )
        return [str(n) for n in nets]

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        return self.list.problems(value, where, context) or super().problems(value, where, context)

    def corpus(self) -> Corpus:
        c = Corpus(self.list.corpus())
        # Each alone is narrow enough; together they open every IPv4 address, or as much as a /7.
        return (
            c.add("together_world", ["%d.0.0.0/8" % i for i in range(256)])
            .add("two_public_eights", ["1.0.0.0/8", "2.0.0.0/8"])
            .add("mapped_and_plain", ["::ffff:100.0.0.0/104", "101.0.0.0/8"])
        )


class Port(Int):
    words = "a TCP port"

    def __init__(self, **kw: Any):
        kw.setdefault("must", "be a TCP port from 1 to 65535")
        super().__init__(1, 65535, **kw)
        self.sample_value = 8265

    def _range(self) -> str:
        return "be a TCP port from 1 to 65535"


class IfName(Text):
    """A network interface name as Linux allows it: 1-15 characters, no '/', whitespace or ':'."""

    words = "a network interface name"
    empty, max_len, pattern = False, 15, _IFNAME
    what = "a network interface name (at most 15 letters, digits, _ . + @ -)"
    sample_value = "eth0"
    refused = _DOTS

    def corpus(self) -> Corpus:
        return super().corpus().add("slash", "eth/0").add("long", "e" * 16).add("space", "eth 0").add("colon", "eth0:1")


class HostPort(Text):
    """``host:port``: a host name, an IPv4 address or ``[IPv6]``, and a TCP port (Ray's GCS address)."""

    words = "host:port"
    empty, max_len, what = False, 300, "host:port (for example 10.0.0.5:6379)"
    sample_value = "127.0.0.1:6379"

    def check_text(self, value: str) -> str:
        if not value.strip():
            return value
        host, sep, port = value.strip().rpartition(":")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            if not sep:
                raise Bad("no port")
            Host().check(host)
            Port().check(port)
        except Bad:
            raise Bad("be %s" % self.what) from None
        return value

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("no_port", "10.0.0.5")
            .add("port_range", "10.0.0.5:70000")
            .add("option", "-oProxyCommand=x:22")
            .add("space", "a b:6379")
            .add("url", "http://10.0.0.5:6379")
        )


class Regex(Text):
    """A regular expression, as ``compiler`` takes it (``re.compile``, or the code that embeds it in its own
    expressions)."""

    words = "a regular expression"
    max_len, what = 1024, "a regular expression"

    def __init__(self, compiler: Callable[[str], Any] = re.compile, **kw: Any):
        super().__init__(**kw)
        self.compiler = compiler

    def check_text(self, value: str) -> str:
        if not value:
            return value
        try:
            re.compile(value)
        except (re.error, ValueError) as e:
            raise Bad("be a regular expression Python compiles (%s)" % str(e).splitlines()[0]) from e
        if self.compiler is not re.compile:
            try:
                self.compiler(value)
            except (re.error, ValueError) as e:  # a position there is in the embedding expression: left out
                raise Bad(
                    "be a regular expression that still works inside another (%s)"
                    % re.sub(r" at position \d+.*", "", str(e).splitlines()[0])
                ) from e
        return value

    def corpus(self) -> Corpus:
        return super().corpus().add("unbalanced", "(").add("nothing_to_repeat", "*x")


class PathOrUrl(Type):
    """A directory on the node (an absolute path) or a URL (no credentials; shown as scheme and host only), as pip's
    --find-links takes either."""

    words = "an absolute path or a URL without credentials"
    sample_value = "{tmp}"

    def __init__(self, schemes: Iterable[str] = ("https", "http", "file"), **kw: Any):
        super().__init__(**kw)
        self.path, self.url = AbsPath("reads"), Url(schemes=schemes)

    def _type(self, value: Any) -> AbsPath | Url:
        # A value with a ':' or '@' that does not start as a path is read as a URL, so that a URL written wrong
        # (https:user:token@host, https:/token@host) is not shown back as a bad path, token and all; a plain relative
        # path (wheels) is a bad path, shown as such.
        if not isinstance(value, str) or value.startswith("/") or not value.strip() or not re.search(r"[:@]", value):
            return self.path
        return self.url

    def check(self, value: Any) -> Any:
        t = self._type(value)
        if t is self.url and "://" not in value:
            raise Bad("be an absolute path or a URL (%s)" % ", ".join(s + "://" for s in self.url.schemes))
        return t.check(value)

    def shown(self, value: Any) -> str:
        return self._type(value).shown(value)

    def conceal(self, value: Any) -> list[str]:
        return self._type(value).conceal(value)

    def corpus(self) -> Corpus:
        c = super().corpus()
        for kind, t in (("path", self.path), ("url", self.url)):
            for label, value, typed in t.corpus():
                if value is not None:
                    c.add("%s_%s" % (kind, label), value, typed)
        return c.add("url_no_slashes", "https:user:s3cr3tPass@example.org/x").add(
            "url_one_slash", "https:/s3cr3t@example.org/x"
        )


class Requirement(Text):
    """One Python requirement (``name[extras] <op> version``, ``name @ url``, markers); never an option line
    (``--extra-index-url=...``, ``-r FILE``, ``-e .``), which would change where or how everything is installed.

    It becomes a line of a requirements file, where pip and uv expand ``${VAR}`` (a node's environment sent to any URL)
    and a trailing ``\\`` joins the next line, so neither ``$`` nor ``\\`` is taken. A ``name @ url`` gives its URL
    the rules of every URL here: no credentials, no query (a private index's credentials live in the nodes'
    ``~/.netrc``); a fragment only as pip reads one (``#egg=``, ``#subdirectory=``, ``#sha256=``)."""

    words = "a Python requirement, not an option"
    empty, max_len = False, 1024
    what = "a requirement such as 'ray[default]==2.60.0' (not an option line such as --index-url or -r FILE)"
    sample_value = "ray==2.60.0"
    _SCHEMES = ("https", "http", "file", "git+https", "git+http", "git+ssh", "git+file")
    _FRAGMENT = re.compile(
        r"^(?:egg|subdirectory|sha1|sha256|sha384|sha512|md5)=[A-Za-z0-9_.+/-]+"
        r"(?:&(?:egg|subdirectory|sha1|sha256|sha384|sha512|md5)=[A-Za-z0-9_.+/-]+)*$"
    )

    @staticmethod
    def _url(value: Any) -> str | None:
        """The URL of a ``name @ url`` requirement, or None."""
        if not isinstance(value, str) or "@" not in value:
            return None
        rest = value.split("@", 1)[1].strip()
        return re.split(r"\s*;", rest, maxsplit=1)[0].strip() or None

    def _hides(self, value: Any) -> bool:
        # Where a URL hides a token: before an @ in its host part, in its query or fragment.
        url = self._url(value)
        return url is not None and bool(re.search(r"[?#]", url) or "@" in url.split("://", 1)[-1].split("/", 1)[0])

    def shown(self, value: Any) -> str:
        if self._hides(value):
            return "got %s @ %s" % (_shown(value.split("@", 1)[0].strip()), url_shown(self._url(value)))
        return super().shown(value)

    def conceal(self, value: Any) -> list[str]:
        return [value] if self._hides(value) else super().conceal(value)

    def check_text(self, value: str) -> str:
        text = value.strip()
        if text.startswith("-") or not _REQUIREMENT.match(text) or re.search(r"\s-{1,2}[A-Za-z]|[;@]\s*-", text):
            raise Bad("be %s" % self.what)
        if "$" in text or "\\" in text:
            raise Bad(
                "be %s without $ or \\ (a requirements file expands ${VAR} and joins a line ending in \\)" % self.what
            )
        url = self._url(text)
        if url is not None:
            try:
                parts = urlsplit(url)
                parts.port  # noqa: B018
            except ValueError:
                raise Bad("be %s; its URL is not one" % self.what) from None
            user = parts.netloc.rsplit("@", 1)[0] if "@" in parts.netloc else None
            if parts.scheme.lower() not in self._SCHEMES:
                raise Bad(
                    "be %s; its URL must start with %s" % (self.what, ", ".join(s + "://" for s in self._SCHEMES))
                )
            if user is not None and (parts.scheme.lower() != "git+ssh" or ":" in user):
                raise Bad("be %s; its URL must hold no credentials (put them in the nodes' ~/.netrc)" % self.what)
            if parts.query or "?" in url or (parts.fragment and not self._FRAGMENT.match(parts.fragment)):
                raise Bad(
                    "be %s; its URL must have no query string, and a fragment only as #egg=, #subdirectory= or "
                    "#sha256= (a token does not belong in a URL)" % self.what
                )
        if holds_credentials(text):  # name @ https://<token>@host/x.whl, a known token shape: argv and the output
            raise Bad(
                "be a requirement without credentials in its URL (they go in the nodes' ~/.netrc, which uv reads)"
            )
        return text

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("index", "--extra-index-url=https://evil.example/simple")
            .add("requirements_file", "-r /etc/shadow")
            .add("editable", "-e .")
            .add("trailing_option", "ray --index-url=http://x")
            .add("marker_option", "ray;--index-url=http://x")
            .add("url_option", "ray @ -e")
            .add("env_expansion", "ray @ https://example.org/${HF_TOKEN}/ray.whl")
            .add("continuation", "ray @ https://example.org/ray.whl\\")
            .add("url_credentials", "ray @ https://user:s3cr3tPass@example.org/ray.whl")
            .add("url_query_token", "ray @ https://example.org/ray.whl?token=s3cr3tQuery")
            .add("url_scheme", "ray @ ftp://example.org/ray.whl")
            .add("url_token_user", "ray @ https://s3cr3t@example.org/ray.whl")
        )


class SubmissionId(Text):
    words = "a Ray submission id"
    empty, max_len, pattern = False, 200, re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
    what = (
        "1-200 letters, digits, '_', '.' or '-', starting with a letter or digit (Ray cannot read, stop nor delete a "
        "job whose id has '/' or other characters)"
    )
    sample_value = "rlinfra-sample"

    def corpus(self) -> Corpus:
        return super().corpus().add("slash", "team/run").add("query", "x?delete=1").add("dotdot", "..")


# ------------------------------------------------------------------------------------------------------------
# Containers


class ListOf(Type):
    """A list whose every item has type ``item`` (at most ``max_items``); ``unique``: no item twice (paths compared as
    the places they name: ``/data`` and ``/data/`` are one)."""

    ansible = "list"
    words = "a list"

    def __init__(self, item: Type, max_items: int = 10000, empty: bool = True, unique: bool = False, **kw: Any):
        super().__init__(**kw)
        self.item, self.max_items, self.empty, self.unique = item, max_items, empty, unique
        self.elements = {
            "int": "int",
            "float": "float",
            "bool": "bool",
            "path": "path",
            "dict": "dict",
            "list": "raw",
        }.get(item.ansible, "str")
        self.secret = item.secret
        self.sample_value = [item.sample()]

    def ansible_spec(self) -> dict[str, Any]:
        spec = super().ansible_spec()
        if getattr(self.item, "suboptions", False):
            spec["options"] = Args(**cast("Section", self.item).fields).spec
        return spec

    def shown(self, value: Any) -> str:
        return "the value is not shown" if _unshown(self, value) else "got %s" % _shown(value)

    def check(self, value: Any) -> Any:
        return self.check_in(value, {})

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        if not isinstance(value, (list, tuple)):
            raise Bad("be a list")
        if not value and not self.empty:
            raise Bad("be a list of at least one item")
        if len(value) > self.max_items:
            raise Bad("be a list of at most %d items" % self.max_items)
        out = []
        for i, item in enumerate(value):
            try:
                out.append(self.item.validate(item, context) if item is not None else self.item.check(item))
            except Bad as e:
                raise Inner("[%d]" % i, self.item, item, e) from e
        twice = paths.duplicates(out) if self.unique else []
        if twice:
            raise Bad("hold each item once (%s is given twice)" % _shown(twice[0]))
        return out

    def conceal(self, value: Any) -> list[str]:
        return [x for v in (value if isinstance(value, (list, tuple)) else [value]) for x in self.item.conceal(v)]

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        if not isinstance(value, (list, tuple)) or len(value) > self.max_items or (not value and not self.empty):
            return super().problems(value, where, context)
        found = [p for i, item in enumerate(value) for p in self.item.problems(item, "%s[%d]" % (where, i), context)]
        return found or (super().problems(value, where, context) if self.unique else [])

    def corpus(self) -> Corpus:
        c = super().corpus().add("scalar", "x", typed=True).add("too_many", [self.item.sample()] * (self.max_items + 1))
        for label, value, typed in self.item.corpus():
            if value is not None:
                c.add("item_" + label, [value], typed=typed)
        if not self.empty:
            c.add("empty", [])
        if self.unique:
            c.add("duplicate", [self.item.sample()] * 2)
        return c


class MapOf(Type):
    """A mapping from ``key`` to ``value`` types."""

    ansible = "dict"
    words = "a mapping"

    def __init__(self, key: Type, value: Type, max_items: int = 10000, **kw: Any):
        super().__init__(**kw)
        self.key, self.value, self.max_items = key, value, max_items
        self.secret = value.secret
        self.sample_value = {key.sample(): value.sample()}

    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise Bad("be a mapping")
        if len(value) > self.max_items:
            raise Bad("be a mapping of at most %d entries" % self.max_items)
        out = {}
        for k, v in value.items():
            try:
                k2 = self.key.check(k)
            except Bad as e:
                raise Inner(" (a key)", self.key, k, e) from e
            t = self.value_for(k2)
            try:
                out[k2] = t.check(v) if v is not None or not t.nullable else None
            except Bad as e:
                raise Inner(".%s" % _short(str(k2), 60), t, v, e) from e
        return out

    def value_for(self, key: Any) -> Type:
        """The type of the value under ``key``: :attr:`value`, unless the key says more (:class:`EnvMap`)."""
        return self.value

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        if not isinstance(value, dict) or len(value) > self.max_items:
            return super().problems(value, where, context)
        out: list[tuple[str, Type, Any, Bad]] = []
        for k, v in value.items():
            try:
                self.check({k: v})
            except Bad as e:
                out.append((where, self, {k: v}, e))
        return out

    def conceal(self, value: Any) -> list[str]:
        if not isinstance(value, dict):
            return self.value.conceal(value)
        return [x for k, v in value.items() for x in self.key.conceal(k) + self.value_for(k).conceal(v)]

    def corpus(self) -> Corpus:
        c = super().corpus().add("list", ["x"], typed=True)
        for label, value, _typed in self.key.corpus():
            if isinstance(value, str):
                c.add("key_" + label, {value: self.value.sample()})
        for label, value, typed in self.value.corpus():
            if value is not None:
                c.add("value_" + label, {self.key.sample(): value}, typed=typed)
        return c


class EnvMap(MapOf):
    """Environment variables: names to one-line text or numbers (never lists, mappings or null)."""

    words = "a mapping of environment variable names to one-line values"

    def __init__(self, **kw: Any):
        super().__init__(EnvName(), Text(max_len=131071, credentials=True), **kw)
        self.sample_value = {"PYTHONUNBUFFERED": "1"}

    def value_for(self, key: Any) -> Type:
        # HF_TOKEN: "<token>\n" is refused like any value with a line break, but its line must not show the token.
        return Unshown(self.value) if isinstance(key, str) and is_secret_name(key) else self.value

    def check(self, value: Any) -> Any:
        if isinstance(value, dict):
            value = dict(
                (k, str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else v)
                for k, v in value.items()
            )
        return super().check(value)

    def corpus(self) -> Corpus:
        return (
            super()
            .corpus()
            .add("secret_value_newline", {"HF_TOKEN": "s3cr3t\nx"})
            .add("secret_value_list", {"WANDB_API_KEY": ["s3cr3t"]}, typed=True)
        )


class Unshown(Type):
    """``t``'s rule, but its values are never shown: an environment value whose variable's name says it is a secret."""

    secret = True

    def __init__(self, t: Type, **kw: Any):
        super().__init__(**kw)
        self.t = t
        self.nullable = t.nullable

    def check(self, value: Any) -> Any:
        return self.t.check(value)


class _UnknownKey(Type):
    """The "type" of a key a :class:`Section` does not know: its line names the section and the keys it allows."""

    def __init__(self, section: Section):
        super().__init__()
        self.section = section

    def line(self, name: str, value: Any, bad: object) -> str:
        fields = list(self.section.fields)
        close = difflib.get_close_matches(str(value), fields, n=1, cutoff=0.6)
        did = " (did you mean '%s'?)" % close[0] if close else ""
        return "%s: unknown key %s%s; allowed: %s" % (name or "top level", _shown(value), did, ", ".join(fields))


class Section(Type):
    """A mapping with known keys, each of its own type (an experiment's ``wait:``). :meth:`problems` gives every
    problem with its key path; :meth:`check` raises the first. Unknown keys are refused with a did-you-mean."""

    ansible = "dict"
    words = "a mapping of known keys"

    def __init__(self, fields: dict[str, Type], suboptions: bool = False, **kw: Any):
        super().__init__(**kw)
        self.fields = fields
        # A module's dict option: Ansible also checks it as suboptions (``options`` in the spec), and its generated
        # cases are its fields' own (an experiment's sections are walked key by key instead).
        self.suboptions = suboptions
        self.sample_value = dict((k, t.sample()) for k, t in fields.items() if t.required)

    def problems(
        self, value: Any, where: str, context: dict[str, Any] | None = None
    ) -> list[tuple[str, Type, Any, Bad]]:
        """``[(path, type, value, Bad)]`` for every bad key of ``value`` below ``where``; ``type.line(path, value,
        bad)`` is the line. The fields beside a key are its context (a Cidr's world switch), switches read as such."""
        if not isinstance(value, dict):
            return [(where, self, value, Bad("be a mapping of %s" % ", ".join(self.fields)))]
        t: Type | None
        if self.suboptions or context is None:
            context = dict(value)
            for key, t in self.fields.items():
                if isinstance(t, Switch) and value.get(key) is not None:
                    try:
                        context[key] = t.check(value[key])
                    except Bad:
                        pass
        out: list[tuple[str, Type, Any, Bad]] = []
        for key, item in value.items():
            path = "%s.%s" % (where, key) if where else str(key)
            t = self.fields.get(key)
            if t is None:
                out.append((where, _UnknownKey(self), key, Bad("be a known key")))
                continue
            section = t if isinstance(t, Section) else getattr(t, "section_for", lambda c: None)(context or value)
            if section is not None and isinstance(item, dict):
                out.extend(section.problems(item, path, context or value))
            elif item is not None:
                out.extend(t.problems(item, path, context or value))
        for key, t in self.fields.items():
            if t.required and key not in value:
                path = "%s.%s" % (where, key) if where else key
                out.append((path, t, None, Bad("be given")))
        return out

    def check(self, value: Any) -> Any:
        found = self.problems(value, "")
        if found:
            path, t, item, bad = found[0]
            raise Inner("." + path if path else "", t, item, bad)
        return value

    def walk(self, where: str = "") -> Iterator[tuple[str, Type]]:
        """``(path, type)`` of every field below ``where``, sections included."""
        for key, t in self.fields.items():
            path = "%s.%s" % (where, key) if where else key
            yield path, t
            if isinstance(t, Section):
                yield from t.walk(path)

    def conceal(self, value: Any) -> list[str]:
        if not isinstance(value, dict):
            return super().conceal(value)
        return [x for key, t in self.fields.items() if value.get(key) is not None for x in t.conceal(value[key])]

    def ansible_spec(self) -> dict[str, Any]:
        spec = super().ansible_spec()
        if self.suboptions:
            spec["options"] = Args(**self.fields).spec
        return spec

    def corpus(self) -> Corpus:
        c = super().corpus().add("list", ["x"], typed=True).add("unknown_key", dict(self.sample(), no_such_key=1))
        if self.suboptions:
            for key, t in self.fields.items():
                for label, bad, typed in t.corpus():
                    c.add("%s_%s" % (key, label), dict(self.sample(), **{key: bad}), typed=typed)
        return c


def Options(
    fields: dict[str, Type],
    suboptions: bool = True,  # noqa: N802 - reads as a type in a declaration
    **kw: Any,
) -> Section:
    """A module's dict option with known keys (a :class:`Section` Ansible checks as suboptions too)."""
    return Section(fields, suboptions=suboptions, **kw)


class OneOf(Type):
    """The first of ``types`` that takes the value (a prefetch item: a repository id, or a mapping with repo:)."""

    words = "one of several forms"

    def __init__(self, *types: Type, **kw: Any):
        super().__init__(**kw)
        self.types = types
        self.ansible = "raw"
        self.sample_value = types[0].sample()

    def check_in(self, value: Any, context: dict[str, Any]) -> Any:
        shape = "dict" if isinstance(value, dict) else "list" if isinstance(value, (list, tuple)) else "str"
        fitting = None
        for t in self.types:
            try:
                return t.validate(value, context)
            except Bad as e:
                kind = t.ansible if t.ansible in ("dict", "list") else "str"
                if fitting is None or kind == shape:
                    fitting = (kind == shape, e)
        assert fitting is not None  # __init__ reads types[0]: a type was tried, and set it or returned
        raise fitting[1]

    def corpus(self) -> Corpus:
        c = super().corpus()
        for t in self.types:
            for label, value, typed in t.corpus():
                if value is not None and not typed:
                    c.add(label, value)
        return c


class Custom(Type):
    """A field whose rule is its surface's own (a Ray runtime_env, a metadata mapping): ``check`` raises :class:`Bad`
    (or :class:`Line`, a whole line), ``bad`` lists bad values for the generated tests."""

    words = "checked by its own rule"

    def __init__(
        self,
        ansible: str,
        check: Callable[[Any], Any],
        bad: Iterable[Any],
        sample: Any,
        elements: str | None = None,
        secret: bool = False,
        **kw: Any,
    ):
        super().__init__(sample=sample, **kw)
        self.ansible, self.elements, self.secret = ansible, elements, secret
        self._check, self._bad = check, list(bad)

    @staticmethod
    def lines(problems: Callable[[Any], Sequence[str]]) -> Callable[[Any], Any]:
        """A check from a function that returns problem lines: the first becomes the :class:`Line`."""

        def check(value):
            found = problems(value)
            if found:
                raise Line(found[0])
            return value

        return check

    def check(self, value: Any) -> Any:
        return self._check(value)

    def corpus(self) -> Corpus:
        c = super().corpus()
        for i, item in enumerate(self._bad):
            c.add(*(item if isinstance(item, tuple) else ("bad%d" % i, item)))
        return c


class Raw(Type):
    """Any value, checked later by the code that reads it; ``reason`` says why (the docs' table lists every Raw
    field, so each stays a conscious choice). No generated cases."""

    ansible = "raw"
    words = "any value (checked where it is read)"

    def __init__(self, reason: str, ansible: str = "raw", elements: str | None = None, **kw: Any):
        super().__init__(**kw)
        self.reason, self.ansible, self.elements = reason, ansible, elements

    def corpus(self) -> Corpus:
        return Corpus()


# ------------------------------------------------------------------------------------------------------------
# A surface's declaration


class Args:
    """A module's or action's arguments: ``name=Type(...)``. ``spec`` is the Ansible argument_spec."""

    def __init__(self, _env_fallback: Any = None, **fields: Type):
        """``_env_fallback``: Ansible's ``env_fallback`` (the module passes it: this file imports no Ansible), for the
        fields declared with ``env=``."""
        self.fields = fields
        self.spec = dict((name, t.ansible_spec()) for name, t in fields.items())
        for name, t in fields.items():
            if t.env:
                if _env_fallback is None:
                    raise ValueError("%s takes the environment variable %s: pass _env_fallback" % (name, t.env))
                self.spec[name]["fallback"] = (_env_fallback, [t.env])

    def __iter__(self) -> Iterator[tuple[str, Type]]:
        return iter(self.fields.items())

    def errors(self, params: dict[str, Any], concealed: list[str] | None = None) -> list[str]:
        """One line per bad field of ``params`` (as Ansible parsed them), in declaration order; the strings no output
        may show (a refused URL, a secret) are added to the list ``concealed``."""
        lines = []
        for name, t in self.fields.items():
            if name not in params:
                continue
            value = params[name]
            try:
                t.validate(value, params)
            except Bad as e:
                lines.append(t.line(name, value, e))
                if concealed is not None:
                    concealed.extend(t.conceal(value))
        return lines

    def samples(self) -> dict[str, Any]:
        """Good values for the required fields (the generated tests fill the rest of a case with them)."""
        return dict((name, t.sample()) for name, t in self.fields.items() if t.required)

    def new_module(
        self,
        ansible_module: Callable[..., Any],
        concealed: Callable[[dict[str, Any]], Iterable[str]] | None = None,
        **kw: Any,
    ) -> Any:
        """What a module's ``main()`` starts with: ``ansible_module`` (AnsibleModule, passed in: this file imports no
        Ansible) for these fields, check mode supported, ``kw`` for the rest of its arguments (``required_if``...),
        with every bad field refused (:func:`enforce`). ``concealed(params)``: values no output may show, masked before
        the fields are checked, since a refusal's invocation shows every parameter."""
        module = ansible_module(argument_spec=self.spec, supports_check_mode=True, **kw)
        if concealed is not None:
            module.no_log_values.update(concealed(module.params))
        enforce(module, self)
        return module


def enforce(module: Any, args: Args) -> None:
    """Fail ``module`` (an AnsibleModule or PlainModule-like object with ``params`` and ``fail_json``) with one line
    per bad field of ``args``; nothing has been done yet."""
    concealed: list[str] = []
    lines = args.errors(module.params, concealed)
    if lines:
        module.no_log_values.update(concealed)  # masked everywhere in the result, the invocation included
        # ... but Ansible never masks a mapping's keys: a concealed key is renamed in the invocation (the module stops).
        module.params.update((k, _keys_masked(v, set(concealed))) for k, v in list(module.params.items()))
        module.fail_json(msg="\n".join(lines), changed=False)


def _keys_masked(value: Any, concealed: set[str]) -> Any:
    if isinstance(value, dict):
        return dict((MASK if k in concealed else k, _keys_masked(v, concealed)) for k, v in value.items())
    if isinstance(value, list):
        return [_keys_masked(v, concealed) for v in value]
    return value
