# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Reading an experiment file: YAML within limits. A file is a few kB written by hand; these bounds keep a careless
or hostile one (a billion-laughs alias bomb, a file nested thousands deep, a huge integer) from hanging or crashing
the controller, long before anything is sent. Every refusal is one line of :class:`ExperimentError`
(docs/EXPERIMENTS.md, "Limits")."""

from __future__ import annotations

import os
import stat
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.verl.experiment_schema import ExperimentError, fmt, type_name

try:
    import yaml
except ImportError:  # pragma: no cover - PyYAML ships with ansible-core
    yaml = None

MAX_FILE_BYTES = 1024 * 1024
# YAML values after expanding aliases: an alias costs nothing to write but is copied wherever it is
# used, so a 1 kB file of nested aliases ("billion laughs") can stand for billions of values.
MAX_YAML_NODES = 100000
MAX_YAML_DEPTH = 64  # libyaml's composer recurses in C: a deep enough file crashes the process


if yaml is not None:
    from yaml.composer import Composer
    from yaml.constructor import ConstructorError, SafeConstructor
    from yaml.nodes import MappingNode, ScalarNode
    from yaml.resolver import Resolver

    try:
        from yaml._yaml import CParser  # libyaml: parses 20k params in a fraction of the pure-Python time
    except ImportError:  # pragma: no cover - PyYAML without libyaml
        CParser = None

    class LimitError(yaml.YAMLError):
        """A file over one of the limits; ``problem`` says which, ``problem_mark`` where."""

        def __init__(self, problem: str, mark: Any):
            super().__init__(problem)
            self.problem = problem
            self.problem_mark = mark

    class _LimitedComposer(Composer):
        """PyYAML's composer (in Python, so its recursion is bounded and caught), counting nesting and
        the values each node stands for once its aliases are expanded. The count is kept on the node,
        so a node referred to by many aliases is counted once per use but walked only once."""

        def compose_document(self):
            self._rl_depth = 0
            return Composer.compose_document(self)

        def compose_node(self, parent, index):
            event = self.peek_event()
            alias = event.anchor if isinstance(event, yaml.AliasEvent) else None
            self._rl_depth += 1
            try:
                if self._rl_depth > MAX_YAML_DEPTH:
                    raise LimitError("nested more than %d levels deep" % MAX_YAML_DEPTH, event.start_mark)
                node = Composer.compose_node(self, parent, index)
            finally:
                self._rl_depth -= 1
            size = getattr(node, "_rl_size", None)
            if size is None:
                if alias is not None:
                    raise LimitError(
                        "alias *%s refers to a node that contains it; an experiment cannot be a "
                        "recursive structure" % alias,
                        event.start_mark,
                    )
                if isinstance(node, ScalarNode):
                    size = 1
                elif isinstance(node, MappingNode):
                    size = 1 + sum(k._rl_size + v._rl_size for k, v in node.value)
                else:
                    size = 1 + sum(v._rl_size for v in node.value)
                node._rl_size = size
            if size > MAX_YAML_NODES:
                what = "alias *%s expands to" % alias if alias is not None else "this holds"
                raise LimitError(
                    "%s more than %d values once aliases are expanded; write the values out, or keep "
                    "large data in a file on the shared volume" % (what, MAX_YAML_NODES),
                    event.start_mark,
                )
            return node

    _BOOL_TAG = "tag:yaml.org,2002:bool"
    _MERGE_TAG = "tag:yaml.org,2002:merge"

    def _key(loader, key_node, deep):
        """A mapping key. YAML 1.1 reads a bare ``on``/``off``/``yes``/``no`` as a boolean, which made
        ``recovery: {on: [...]}`` the key True; as a key it stays the word that was written."""
        if (
            key_node.tag == _BOOL_TAG
            and isinstance(key_node, ScalarNode)
            and not key_node.style
            and key_node.value.lower() not in ("true", "false")
        ):
            return key_node.value
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise ConstructorError(None, None, "a %s cannot be a key" % type_name(key), key_node.start_mark) from None
        return key

    def _construct_mapping(loader, node, deep=False):
        """Refuse duplicate keys (PyYAML keeps the last one silently). Keys brought in by a merge
        (``<<: *defaults``) may be overridden, as YAML intends."""
        seen = {}
        for key_node, _dummy in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = _key(loader, key_node, deep)
            if key in seen:
                raise ConstructorError(
                    None, None, "duplicate key %r (also on line %d)" % (key, seen[key] + 1), key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
        loader.flatten_mapping(node)
        mapping = {}
        for key_node, value_node in node.value:
            mapping[_key(loader, key_node, deep)] = loader.construct_object(value_node, deep=deep)
        return mapping

    def _construct_int(loader, node):
        # int() refuses more than 4300 decimal digits with a ValueError, and a hex literal has no such
        # limit but cannot be printed back: both become one line here.
        try:
            value = SafeConstructor.construct_yaml_int(loader, node)
        except ValueError:
            value = None
        if value is None or value.bit_length() > 64:
            raise ConstructorError(
                None,
                None,
                "integer %s is out of range (at most 64 bits); quote it to pass a string" % fmt(node.value),
                node.start_mark,
            )
        return value

    def _guarded(construct, what):
        def guarded(loader, node):
            try:
                return construct(loader, node)
            except (ValueError, OverflowError) as e:
                raise ConstructorError(
                    None,
                    None,
                    "%s %s cannot be read (%s); quote it to pass a string" % (what, fmt(node.value), e),
                    node.start_mark,
                ) from e

        return guarded

    class _Constructor(SafeConstructor):
        pass

    _Constructor.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
    _Constructor.add_constructor("tag:yaml.org,2002:int", _construct_int)
    _Constructor.add_constructor("tag:yaml.org,2002:float", _guarded(SafeConstructor.construct_yaml_float, "number"))
    _Constructor.add_constructor(
        "tag:yaml.org,2002:timestamp", _guarded(SafeConstructor.construct_yaml_timestamp, "date")
    )

    class _PyLoader(
        yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _LimitedComposer, _Constructor, Resolver
    ):
        def __init__(self, stream):
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            _LimitedComposer.__init__(self)
            _Constructor.__init__(self)
            Resolver.__init__(self)

    if CParser is not None:
        # libyaml's events, composed by the bounded Python composer (first in the MRO): libyaml's own
        # composer recurses in C and crashes the process on a deep enough file.
        class _CLoader(_LimitedComposer, CParser, _Constructor, Resolver):
            def __init__(self, stream):
                CParser.__init__(self, stream)
                _LimitedComposer.__init__(self)
                _Constructor.__init__(self)
                Resolver.__init__(self)
    else:  # pragma: no cover
        _CLoader = None  # type: ignore[assignment, misc]  # no libyaml: _PyLoader alone (parse_yaml tests it)


def read_yaml(path: str, label: str) -> Any:
    """The parsed file, or one line of :class:`ExperimentError`: not a regular file, over
    :data:`MAX_FILE_BYTES`, not UTF-8, not YAML, over the alias or nesting limits, a duplicate key."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise ExperimentError("%s: %s is a directory, not an experiment file" % (label, path))
        if not stat.S_ISREG(st.st_mode):
            raise ExperimentError("%s: %s is not a regular file" % (label, path))
        if st.st_size > MAX_FILE_BYTES:
            raise ExperimentError(
                "%s: the file is %d bytes, over the %d bytes (1 MiB) an experiment file may have; "
                "keep data, code and long lists out of it (working_dir, the shared volume)"
                % (label, st.st_size, MAX_FILE_BYTES)
            )
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ExperimentError(
            "%s: cannot be read: %s (%s); check that it exists and that you may read it"
            % (label, e.strerror or e, path)
        ) from e
    if len(raw) > MAX_FILE_BYTES:  # it grew while being read
        raise ExperimentError(
            "%s: the file is over the %d bytes (1 MiB) an experiment file may have" % (label, MAX_FILE_BYTES)
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ExperimentError(
            "%s: not UTF-8 text (byte 0x%02x at line %d, column %d); save the file as UTF-8"
            % (label, raw[e.start], line, column)
        ) from e
    return parse_yaml(text, label)


def parse_yaml(text: str, label: str) -> Any:
    try:
        return _load(text, _CLoader or _PyLoader)  # type: ignore[truthy-function]  # None without libyaml
    except yaml.YAMLError as e:
        if _CLoader is not None and isinstance(
            e, (yaml.reader.ReaderError, yaml.scanner.ScannerError, yaml.parser.ParserError)
        ):
            # libyaml words its syntax errors differently: the same file gives the same line anywhere.
            try:
                _load(text, _PyLoader)
            except (yaml.YAMLError, RecursionError) as again:
                e = again
        raise ExperimentError(_yaml_error(e, label, text)) from e
    except RecursionError:  # pragma: no cover - the depth limit comes first
        raise ExperimentError("%s: nested too deeply" % label) from None


def _load(text, loader_class):
    loader = loader_class(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _yaml_error(e, label, text):
    if isinstance(e, RecursionError):
        return "%s: nested too deeply" % label
    mark = getattr(e, "problem_mark", None)
    where = " (line %d, column %d)" % (mark.line + 1, mark.column + 1) if mark else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if isinstance(e, yaml.reader.ReaderError) and isinstance(e.position, int):
        line = text.count("\n", 0, e.position) + 1
        where = " (line %d, column %d)" % (line, e.position - (text.rfind("\n", 0, e.position) + 1) + 1)
        problem = "control character #x%04x is not allowed (in a quoted string, write it as an escape)" % e.character
    if isinstance(e, LimitError):
        return "%s: over a limit%s: %s" % (label, where, problem)
    return "%s: not valid YAML%s: %s" % (label, where, problem)
