# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Text and its kinds: one line of text, a name, a choice, an environment variable's name, a secret, a regular
expression, a Ray submission id."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import holds_credentials
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import Bad, Type, one_line

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTS = re.compile(r"^\.\.?\Z")  # "." and "..": a directory's own names, never a name of a thing


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


class SubmissionId(Text):
    words = "a Ray submission id"
    empty, max_len, pattern = False, 200, re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$")
    what = (
        "1-200 letters, digits, '_', '.' or '-', starting with a letter or digit (Ray cannot read, stop nor delete a "
        "job whose id has '/' or other characters)"
    )
    sample_value = "rlinfra-sample"
