# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A surface's declaration: :class:`Section` (a mapping of known keys; :func:`Options` for a module's dict option),
:class:`Args` (a module's or action's arguments) and :func:`enforce`."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import Bad, Inner, Type, _shown
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._numbers import Switch


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


def Options(
    fields: dict[str, Type],
    suboptions: bool = True,  # noqa: N802 - reads as a type in a declaration
    **kw: Any,
) -> Section:
    """A module's dict option with known keys (a :class:`Section` Ansible checks as suboptions too)."""
    return Section(fields, suboptions=suboptions, **kw)


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
