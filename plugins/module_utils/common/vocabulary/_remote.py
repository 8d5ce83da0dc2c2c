# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Remote names: URLs (shown as scheme and host only), git remotes and refs, container images, Hugging Face
repositories, a path or a URL, Python requirements."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.rlinfra.verl.plugins.module_utils.common.masking import MASK, holds_credentials
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._base import (
    Bad,
    Type,
    _leaves,
    _shown,
    one_line,
    type_word,
)
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._network import _HOST, _ip
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._paths import AbsPath
from ansible_collections.rlinfra.verl.plugins.module_utils.common.vocabulary._text import Text

_GIT_REF = re.compile(r"^[A-Za-z0-9_.][A-Za-z0-9_./-]{0,199}$")
_HF_REPO = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,\s-]*\])?\s*"
    r"(?:(?:[<>=!~]=?|===)\s*[A-Za-z0-9*+!._-]+\s*(?:,\s*(?:[<>=!~]=?|===)\s*[A-Za-z0-9*+!._-]+\s*)*)?"
    r"(?:\s*@\s*\S+)?(?:\s*;\s*[^;]+)?$"
)


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


class GitRef(Text):
    words = "a branch, tag or 40-character commit"
    empty, max_len, pattern = False, 200, _GIT_REF
    what = "a branch, a tag or a full 40-character commit"
    sample_value = "main"
    # What git refuses in a ref name, of what _GIT_REF lets through: "..", "//", "@{", a part starting with "." or
    # ending in ".lock", a trailing "/" or "." ("." alone would be `git checkout .`, every file of the work tree).
    refused = re.compile(r"\.\.|//|@\{|/\Z|\.lock\Z|(?:\A|/)\.|\.\Z")


class HfRepoId(Text):
    words = "a Hugging Face repository id (org/name)"
    empty, max_len, pattern = False, 192, _HF_REPO
    what = "a Hugging Face repository id (org/name: letters, digits, _ - .; no '--' or '..')"
    sample_value = "org/name"
    refused = re.compile(r"--|\.\.")


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
