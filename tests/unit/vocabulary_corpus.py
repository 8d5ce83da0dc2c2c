"""The bad values of each kind of module_utils/common/vocabulary and of the surfaces' own kinds (their corpus), from
which tests/unit/test_bad_input_generated.py builds a case for every field of every surface and
tests/unit/test_vocabulary.py checks each kind's own refusals. They live here, with the tests, rather than in the types:
the types go to the nodes in every scripted call, these values never need to, and nothing in plugins/ makes them.

:func:`corpus` gives a type's values: the generator registered (:func:`generates`) for the nearest class of
``type(t).__mro__``, so a kind without a generator of its own has its parent's; a generator adds to its parent's with
:func:`inherited`. The vocabulary's kinds come first, then the surfaces' own (common/settings.py,
verl/experiment_schema.py, ray/firewall.py), each adding to the kind it is built on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ansible_collections.rlinfra.verl.plugins.module_utils.common import paths, settings
from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary as v
from ansible_collections.rlinfra.verl.plugins.module_utils.ray import firewall
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment_schema


class Corpus(list):
    """Bad values of a type: ``(label, value, typed)``; ``typed`` marks a value of the wrong Python type, which only
    surfaces without their own type conversion (experiment files, role variables, switches) see as such."""

    def add(self, label: str, value: Any, typed: bool = False) -> Corpus:
        self.append((label, value, typed))
        return self


Generator = Callable[[Any], Corpus]

# The generator of each kind's bad values, by class (:func:`generates`).
CORPORA: dict[type, Generator] = {}


def generates(cls: type) -> Callable[[Generator], Generator]:
    """Registers the decorated function as the generator of ``cls``'s bad values."""

    def register(generator: Generator) -> Generator:
        CORPORA[cls] = generator
        return generator

    return register


def corpus(t: v.Type) -> Corpus:
    """``t``'s bad values, ``(label, value, typed)``, from the generator of the nearest class of ``type(t).__mro__``."""
    for cls in type(t).__mro__:
        if cls in CORPORA:
            return CORPORA[cls](t)
    raise LookupError("no bad values for %s" % type(t).__name__)


def inherited(cls: type, t: v.Type) -> Corpus:
    """What ``cls``'s parent kind gives ``t``: the generator of the nearest class after ``cls`` in ``type(t).__mro__``."""
    mro = type(t).__mro__
    for base in mro[mro.index(cls) + 1 :]:
        if base in CORPORA:
            return CORPORA[base](t)
    raise LookupError("no bad values above %s" % cls.__name__)


def confined(c: Corpus, purpose: str | None) -> Corpus:
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


# -- base and text --------------------------------------------------------------------------------------------


@generates(v.Type)
def _type(t: v.Type) -> Corpus:
    c = Corpus()
    if not t.nullable:
        c.add("null", None, typed=True)
    return c


@generates(v.Text)
def _text(t: v.Text) -> Corpus:
    c = inherited(v.Text, t).add("nul", "a\x00b").add("too_long", "x" * (t.max_len + 1))
    if not t.lines:
        c.add("newline", "a\nb").add("private_key", "-----BEGIN OPENSSH PRIVATE KEY-----\ns3cr3tKeyBody\n")
    c.add("list", ["x"], typed=True).add("list_credentials", ["https://user:s3cr3t@example.org/x"], typed=True)
    if not t.empty:
        c.add("empty", "").add("blank", "  ")
    return c


@generates(v.Name)
def _name(t: v.Name) -> Corpus:
    return (
        inherited(v.Name, t)
        .add("slash", "a/b")
        .add("space", "a b")
        .add("dash_first", "-x")
        .add("dotdot", "..")
        .add("unicode", "j\u00f6b")
        .add("url_credentials", "https://user:s3cr3t@example.org")
        .add("token", "ghp_s3cr3t" + "A" * 36)
    )


@generates(v.Choice)
def _choice(t: v.Choice) -> Corpus:
    c = inherited(v.Choice, t).add("unknown", "no-such-choice")
    if "" not in t.choices:
        c.add("empty", "")
    return c


@generates(v.EnvName)
def _env_name(t: v.EnvName) -> Corpus:
    return (
        inherited(v.EnvName, t)
        .add("equals", "A=B")
        .add("digit_first", "1A")
        .add("dash", "A-B")
        .add("token", "ghp_s3cr3tAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
        .add("name_and_value", "HF_TOKEN=hf_s3cr3t")
    )


@generates(v.Secret)
def _secret(t: v.Secret) -> Corpus:
    c = inherited(v.Secret, t).add("nul", "tok\x00en")
    if not t.empty:
        c.add("empty", "")
    if not t.multiline:
        c.add("newline", "s3cr3t-sample-value\nHost: evil").add("space", "s3cr3t sample").add("cr", "tok\ren")
    return c


@generates(v.Regex)
def _regex(t: v.Regex) -> Corpus:
    return inherited(v.Regex, t).add("unbalanced", "(").add("nothing_to_repeat", "*x")


@generates(v.SubmissionId)
def _submission_id(t: v.SubmissionId) -> Corpus:
    return inherited(v.SubmissionId, t).add("slash", "team/run").add("query", "x?delete=1").add("dotdot", "..")


# -- numbers, times and switches ------------------------------------------------------------------------------


def _bounds(t: v.Int | v.Number, c: Corpus) -> Corpus:
    """The bad values every number has: a boolean, digits as text where only a number is read, each side of its range."""
    c.add("boolean", True, typed=True)
    if t.strict:
        c.add("number_as_text", "2", typed=True)
    if t.low is not None:
        c.add("below", t.low - 1)
    if t.high is not None:
        c.add("above", t.high + 1)
    return c


@generates(v.Int)
def _int(t: v.Int) -> Corpus:
    return _bounds(t, inherited(v.Int, t).add("word", "soon").add("fraction", 1.5))


@generates(v.Number)
def _number(t: v.Number) -> Corpus:
    return _bounds(t, inherited(v.Number, t).add("nan", float("nan")).add("inf", float("inf")).add("word", "lots"))


@generates(v.Seconds)
def _seconds(t: v.Seconds) -> Corpus:
    # An int option given inf or nan: Ansible's own conversion raises OverflowError before any check of ours.
    return Corpus(c for c in inherited(v.Seconds, t) if not (t.integer and isinstance(c[1], float)))


@generates(v.Time)
def _time(t: v.Time) -> Corpus:
    return (
        inherited(v.Time, t)
        .add("no_zone", "2026-12-01T18:00:00")
        .add("word", "tomorrow")
        .add("month_13", "2026-13-01T00:00:00Z")
        .add("milliseconds", 1796140800000)
        .add("boolean", True, typed=True)
    )


@generates(v.Switch)
def _switch(t: v.Switch) -> Corpus:
    return (
        inherited(v.Switch, t)
        .add("typo", "treu")
        .add("word", "maybe")
        .add("two", 2, typed=True)
        .add("list", [True], typed=True)
    )


# -- paths --------------------------------------------------------------------------------------------------------


@generates(v.AbsPath)
def _abs_path(t: v.AbsPath) -> Corpus:
    c = (
        inherited(v.AbsPath, t)
        .add("dotdot", "/data/../etc")
        .add("newline", "/data/a\nb")
        .add("nul", "/data/a\x00b")
        .add("number", 5, typed=True)
    )
    if not t.relative:
        c.add("relative", "data/x").add("dot_relative", "./x")
    if not t.empty:
        c.add("empty", "")
    if t.under:
        c.add("outside", "/etc")
    return confined(c, t.purpose)


@generates(v.RelPath)
def _rel_path(t: v.RelPath) -> Corpus:
    return (
        inherited(v.RelPath, t)
        .add("absolute", "/etc")
        .add("dotdot", "../x")
        .add("inner_dotdot", "a/../../x")
        .add("nul", "a\x00b")
        .add("empty", "")
    )


# -- network --------------------------------------------------------------------------------------------------


@generates(v.Host)
def _host(t: v.Host) -> Corpus:
    return (
        inherited(v.Host, t)
        .add("option", "-oProxyCommand=x")
        .add("url", "http://h/")
        .add("space", "a b")
        .add("url_credentials", "https://s3cr3t@example.org")
    )


@generates(v.Address)
def _address(t: v.Address) -> Corpus:
    return (
        inherited(v.Address, t)
        .add("any", "0.0.0.0")
        .add("any6", "::")
        .add("name", "node-1")
        .add("multicast", "224.0.0.1")
        .add("broadcast", "255.255.255.255")
        .add("mapped_any", "::ffff:0.0.0.0")
        .add("scoped", "fe80::1%eth0")
        .add("spaces", " 10.0.0.5")
    )


@generates(v.Cidr)
def _cidr(t: v.Cidr) -> Corpus:
    return (
        inherited(v.Cidr, t)
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


@generates(v.Networks)
def _networks(t: v.Networks) -> Corpus:
    c = Corpus(corpus(t.list))
    # Each alone is narrow enough; together they open every IPv4 address, or as much as a /7.
    return (
        c.add("together_world", ["%d.0.0.0/8" % i for i in range(256)])
        .add("two_public_eights", ["1.0.0.0/8", "2.0.0.0/8"])
        .add("mapped_and_plain", ["::ffff:100.0.0.0/104", "101.0.0.0/8"])
    )


@generates(v.IfName)
def _if_name(t: v.IfName) -> Corpus:
    return (
        inherited(v.IfName, t).add("slash", "eth/0").add("long", "e" * 16).add("space", "eth 0").add("colon", "eth0:1")
    )


@generates(v.HostPort)
def _host_port(t: v.HostPort) -> Corpus:
    return (
        inherited(v.HostPort, t)
        .add("no_port", "10.0.0.5")
        .add("port_range", "10.0.0.5:70000")
        .add("option", "-oProxyCommand=x:22")
        .add("space", "a b:6379")
        .add("url", "http://10.0.0.5:6379")
    )


# -- remote names ---------------------------------------------------------------------------------------------


@generates(v.Url)
def _url(t: v.Url) -> Corpus:
    c = (
        inherited(v.Url, t)
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
    if not t.default_scheme:
        c.add("not_url", "example.org")
    if "file" not in t.schemes:
        c.add("file", "file:///etc/passwd")
    if not t.empty:
        c.add("empty", "")
    if not t.path:
        c.add("path", "http://127.0.0.1:8265/api/jobs")
    return c


@generates(v.GitUrl)
def _git_url(t: v.GitUrl) -> Corpus:
    return (
        inherited(v.GitUrl, t)
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


@generates(v.ImageRef)
def _image_ref(t: v.ImageRef) -> Corpus:
    return (
        inherited(v.ImageRef, t)
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


@generates(v.GitRef)
def _git_ref(t: v.GitRef) -> Corpus:
    return (
        inherited(v.GitRef, t)
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


@generates(v.HfRepoId)
def _hf_repo_id(t: v.HfRepoId) -> Corpus:
    return (
        inherited(v.HfRepoId, t)
        .add("url", "https://huggingface.co/org/x")
        .add("three_parts", "a/b/c")
        .add("dashes", "org/a--b")
        .add("dotdot", "org/..")
    )


@generates(v.PathOrUrl)
def _path_or_url(t: v.PathOrUrl) -> Corpus:
    c = inherited(v.PathOrUrl, t)
    for kind, sub in (("path", t.path), ("url", t.url)):
        for label, value, typed in corpus(sub):
            if value is not None:
                c.add("%s_%s" % (kind, label), value, typed)
    return c.add("url_no_slashes", "https:user:s3cr3tPass@example.org/x").add(
        "url_one_slash", "https:/s3cr3t@example.org/x"
    )


@generates(v.Requirement)
def _requirement(t: v.Requirement) -> Corpus:
    return (
        inherited(v.Requirement, t)
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


# -- containers and declarations ------------------------------------------------------------------------------


@generates(v.ListOf)
def _list_of(t: v.ListOf) -> Corpus:
    c = inherited(v.ListOf, t).add("scalar", "x", typed=True).add("too_many", [t.item.sample()] * (t.max_items + 1))
    for label, value, typed in corpus(t.item):
        if value is not None:
            c.add("item_" + label, [value], typed=typed)
    if not t.empty:
        c.add("empty", [])
    if t.unique:
        c.add("duplicate", [t.item.sample()] * 2)
    return c


@generates(v.MapOf)
def _map_of(t: v.MapOf) -> Corpus:
    c = inherited(v.MapOf, t).add("list", ["x"], typed=True)
    for label, value, _typed in corpus(t.key):
        if isinstance(value, str):
            c.add("key_" + label, {value: t.value.sample()})
    for label, value, typed in corpus(t.value):
        if value is not None:
            c.add("value_" + label, {t.key.sample(): value}, typed=typed)
    return c


@generates(v.EnvMap)
def _env_map(t: v.EnvMap) -> Corpus:
    return (
        inherited(v.EnvMap, t)
        .add("secret_value_newline", {"HF_TOKEN": "s3cr3t\nx"})
        .add("secret_value_list", {"WANDB_API_KEY": ["s3cr3t"]}, typed=True)
    )


@generates(v.Section)
def _section(t: v.Section) -> Corpus:
    c = inherited(v.Section, t).add("list", ["x"], typed=True).add("unknown_key", dict(t.sample(), no_such_key=1))
    if t.suboptions:
        for key, sub in t.fields.items():
            for label, bad, typed in corpus(sub):
                c.add("%s_%s" % (key, label), dict(t.sample(), **{key: bad}), typed=typed)
    return c


@generates(v.OneOf)
def _one_of(t: v.OneOf) -> Corpus:
    c = inherited(v.OneOf, t)
    for sub in t.types:
        for label, value, typed in corpus(sub):
            if value is not None and not typed:
                c.add(label, value)
    return c


@generates(v.Custom)
def _custom(t: v.Custom) -> Corpus:
    c = inherited(v.Custom, t)
    for i, item in enumerate(t._bad):
        c.add(*(item if isinstance(item, tuple) else ("bad%d" % i, item)))
    return c


@generates(v.Raw)
def _raw(t: v.Raw) -> Corpus:
    return Corpus()


# -- the roles' own kinds (common/settings.py) ------------------------------------------------------------------


@generates(settings.PrivateIp)
def _private_ip(t: settings.PrivateIp) -> Corpus:
    return inherited(settings.PrivateIp, t).add("empty", "")


@generates(settings._Pattern)
def _pattern(t: settings._Pattern) -> Corpus:
    c = inherited(settings._Pattern, t).add("newline", "a\nb")
    for item in t.bad:
        c.add(repr(item), item)
    return c


@generates(settings._Whole)
def _whole(t: settings._Whole) -> Corpus:
    return (
        inherited(settings._Whole, t)
        .add("word", "2h")
        .add("below", t.low - 1)
        .add("above", t.high + 1)
        .add("fraction", 1.5)
        .add("boolean", True, typed=True)
        .add("exponent", "1e400")
    )


@generates(settings._Either)
def _either(t: settings._Either) -> Corpus:
    return inherited(settings._Either, t).add("upper", "AUTO")


@generates(settings._Path)
def _settings_path(t: settings._Path) -> Corpus:
    c = (
        inherited(settings._Path, t)
        .add("relative", "ray")
        .add("space", "/work space/ray")
        .add("newline", "/x\ny")
        .add("dotdot", "/data/../etc")
        .add("specifier", "/data/%n")
        .add("variable", "/data/$HOME")
        .add("colon", "/data:/etc")
        .add("backslash", "/data/a\\x")
        .add("quote", "/data/a'b")
    )
    if t.max_len:
        c.add("too_long", "/" + "x" * t.max_len)
    return confined(c, t.purpose)


@generates(settings._Umask)
def _umask(t: settings._Umask) -> Corpus:
    return (
        inherited(settings._Umask, t)
        .add("not_octal", "0999")
        .add("word", "27a")
        .add("world_writable", "0000")
        .add("group_only", "0020")
        .add("unquoted", 22, typed=True)
    )


@generates(settings._MountOptions)
def _mount_options(t: settings._MountOptions) -> Corpus:
    return (
        inherited(settings._MountOptions, t)
        .add("empty", "")
        .add("space", "rw, hard")
        .add("empty_word", "rw,,hard")
        .add("newline", "rw\n/dev/sda / ext4 defaults 0 0")
    )


@generates(settings._Mode)
def _mode(t: settings._Mode) -> Corpus:
    return inherited(settings._Mode, t).add("unquoted", 755).add("not_octal", "0999").add("word", "rwx")


@generates(settings._RayEnv)
def _ray_env(t: settings._RayEnv) -> Corpus:
    return inherited(settings._RayEnv, t).add("nested", {"X": {"y": 1}}).add("string", "A=1")


@generates(settings._SecretPattern)
def _secret_pattern(t: settings._SecretPattern) -> Corpus:
    return inherited(settings._SecretPattern, t).add("unbalanced", "(TOKEN").add("newline", "a\nb")


@generates(settings._Resources)
def _resources(t: settings._Resources) -> Corpus:
    return (
        inherited(settings._Resources, t)
        .add("gpu", {"GPU": 2})
        .add("word", {"accel": "lots"})
        .add("negative", {"accel": -1})
        .add("list", ["x"])
        .add("infinite", {"accel": float("inf")})
        .add("nan", {"accel": float("nan")})
    )


@generates(settings._Devices)
def _devices(t: settings._Devices) -> Corpus:
    return (
        inherited(settings._Devices, t)
        .add("string", "/dev/sdb")
        .add("no_dev", ["sdb"])
        .add("dotdot", ["/dev/../etc/x"])
    )


@generates(settings._RayArg)
def _ray_arg(t: settings._RayArg) -> Corpus:
    return (
        inherited(settings._RayArg, t)
        .add("space", "--x y")
        .add("specifier", "--x=%n")
        .add("variable", "--x=$HOME")
        .add("quote", '--system-config={"a":1}')
        .add("dashboard_host", "--dashboard-host=0.0.0.0")
        .add("node_ip_apart", "--node-ip-address")
    )


# -- the experiment file's own kinds (verl/experiment_schema.py) ------------------------------------------------


@generates(experiment_schema._Params)
def _params(t: experiment_schema._Params) -> Corpus:
    return (
        inherited(experiment_schema._Params, t)
        .add("bad_key", {"a b": 1})
        .add("nul", {"x": "a\x00b"})
        .add("delete_value", {"~x": 1})
        .add("inner_prefix", {"trainer": {"+x": 1}})
        .add("secret", {"reward_model": {"api_key": "sk-s3cr3t-value"}})
        .add("secret_token", {"hf_token": "hf_s3cr3t"})
        .add("dict_key", {"x": {"a b": 1}})
        .add("secret_camel", {"wandbApiKey": "s3cr3t"})
        .add("secret_list", {"api_keys": ["sk-s3cr3t"]})
        .add("secret_number", {"db": {"password": 123456}})
        .add("secret_in_list_item", {"rm": [{"api_key": "s3cr3t"}]})
        .add("secret_header", {"++headers": {"Authorization": "Bearer s3cr3t-value"}})
        .add("url_credentials", {"data": {"train_files": "https://user:s3cr3t@example.org/x.parquet"}})
        .add("url_token_user", {"model": {"path": ["https://s3cr3t@example.org/m"]}})
        .add("list", ["trainer.total_epochs=1"], typed=True)
    )


@generates(experiment_schema._Env)
def _experiment_env(t: experiment_schema._Env) -> Corpus:
    return (
        inherited(experiment_schema._Env, t)
        .add("secret_name", {"WANDB_API_KEY": "s3cr3t"})
        .add("secret_password", {"DB_PASSWORD": "s3cr3t"})
        .add("secret_lowercase", {"wandb_api_key": "s3cr3t"})
        .add("url_credentials", {"PIP_INDEX_URL": "https://__token__:s3cr3t@example.org/simple"})
        .add("url_token_user", {"HF_ENDPOINT": "https://s3cr3t@example.org"})
    )


@generates(experiment_schema._Quantity)
def _quantity(t: experiment_schema._Quantity) -> Corpus:
    return inherited(experiment_schema._Quantity, t).add("below_precision", 0.00001)


@generates(experiment_schema._ByFramework)
def _by_framework(t: experiment_schema._ByFramework) -> Corpus:
    return inherited(experiment_schema._ByFramework, t).add("list", ["x"], typed=True)


@generates(experiment_schema._OnCommandLine)
def _on_command_line(t: experiment_schema._OnCommandLine) -> Corpus:
    return inherited(experiment_schema._OnCommandLine, t).add(
        "url_credentials", "git clone https://s3cr3t@example.org/x.git && python3 x.py"
    )


# -- the firewall's own kind (ray/firewall.py) ------------------------------------------------------------------


@generates(firewall.PortsType)
def _ports(t: firewall.PortsType) -> Corpus:
    return (
        inherited(firewall.PortsType, t)
        .add("empty", {})
        .add("word", {"gcs": "soon"})
        .add("reversed", {"workers": "20-10"})
        .add("out_of_range", {"gcs": 70000})
        .add("overlap", {"gcs": 6379, "workers": "6000-7000"})
        .add("ssh", {"ssh": 22})
        .add("boolean", {"gcs": True})
    )
