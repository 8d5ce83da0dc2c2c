# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The vocabulary's base: :class:`Type` (checking a value, the line that refuses it, its Ansible spec entry), the
errors :class:`Bad`, :class:`Line` and :class:`Inner`, and how a bad value is shown without leaking it."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import holds_credentials, mask_patterns
from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import holds_secret_value

NOTSET = object()
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Bad(ValueError):
    """What a value must be, as the words after "must" (``be an absolute path``); the surface adds the name."""


class Line(Bad):
    """A whole error line, from a surface's own rule (:class:`Custom`), used as it is."""


class Inner(Bad):
    """A bad item of a list (``where`` = ``[3]``) or a bad value of a mapping (``.KEY``): the line names it."""

    def __init__(self, where: str, t: Type, value: Any, bad: Bad):
        super().__init__(str(bad))
        self.where, self.t, self.value, self.bad = where, t, value, bad


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
