# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Containers of other types: :class:`ListOf`, :class:`MapOf` (:class:`EnvMap`), :class:`OneOf`, and the kinds whose
rule is elsewhere: :class:`Custom`, :class:`Raw`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from ansible_collections.rlinfra.verl.plugins.module_utils.common import paths
from ansible_collections.rlinfra.verl.plugins.module_utils.common.secret_names import is_secret_name
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import (
    Bad,
    Inner,
    Line,
    Type,
    _short,
    _shown,
    _unshown,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._declaration import Args, Section
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._text import EnvName, Text


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
            spec["options"] = Args(**cast(Section, self.item).fields).spec
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


class Unshown(Type):
    """``t``'s rule, but its values are never shown: an environment value whose variable's name says it is a secret."""

    secret = True

    def __init__(self, t: Type, **kw: Any):
        super().__init__(**kw)
        self.t = t
        self.nullable = t.nullable

    def check(self, value: Any) -> Any:
        return self.t.check(value)


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
        if (
            fitting is None
        ):  # never: __init__ reads types[0]: a type was tried, and set it or returned (for the type checker)
            raise AssertionError("fitting is set here")
        raise fitting[1]


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


class Raw(Type):
    """Any value, checked later by the code that reads it; ``reason`` says why (the docs' table lists every Raw
    field, so each stays a conscious choice). No generated cases."""

    ansible = "raw"
    words = "any value (checked where it is read)"

    def __init__(self, reason: str, ansible: str = "raw", elements: str | None = None, **kw: Any):
        super().__init__(**kw)
        self.reason, self.ansible, self.elements = reason, ansible, elements
