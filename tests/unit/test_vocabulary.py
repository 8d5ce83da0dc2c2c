"""The vocabulary of value types itself: every type refuses every value of its own corpus with one line that never
shows a secret, accepts its own sample, and the lines read as the docs say."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import vocabulary
from tests.unit.vocabulary_corpus import corpus

TYPES = {
    "text": vocabulary.Text(),
    "text_nonempty": vocabulary.Text(empty=False),
    "name": vocabulary.Name(),
    "choice": vocabulary.Choice(("a", "b")),
    "env_name": vocabulary.EnvName(),
    "secret": vocabulary.Secret(),
    "secret_key": vocabulary.Secret(multiline=True),
    "int": vocabulary.Int(1, 10),
    "int_low": vocabulary.Int(0),
    "number": vocabulary.Number(0.1, 5),
    "seconds": vocabulary.Seconds(),
    "switch": vocabulary.Switch(),
    "abs_path": vocabulary.AbsPath(),
    "confined": vocabulary.AbsPath(under="/data/models"),
    "rel_path": vocabulary.RelPath(),
    "url": vocabulary.Url(),
    "url_https": vocabulary.Url(schemes=("https",)),
    "git_url": vocabulary.GitUrl(),
    "git_ref": vocabulary.GitRef(),
    "hf_repo": vocabulary.HfRepoId(),
    "host": vocabulary.Host(),
    "address": vocabulary.Address(),
    "cidr": vocabulary.Cidr(),
    "port": vocabulary.Port(),
    "ifname": vocabulary.IfName(),
    "requirement": vocabulary.Requirement(),
    "submission_id": vocabulary.SubmissionId(),
    "list": vocabulary.ListOf(vocabulary.Name()),
    "map": vocabulary.MapOf(vocabulary.Name(), vocabulary.Int(0)),
    "env": vocabulary.EnvMap(),
    "required_text": vocabulary.Text(required=True),
    "networks": vocabulary.Networks(world_switch="allow_world"),
    "image": vocabulary.ImageRef(),
    "seconds_int": vocabulary.Seconds(1, integer=True),
    "image_ref": vocabulary.ImageRef(),
    "path_or_url": vocabulary.PathOrUrl(),
}
SECRETS = ("s3cr3t", "ghp_")


def _fill(value):
    if isinstance(value, str):
        return value.replace("{tmp}", "/tmp/x").replace("{stub}", "http://127.0.0.1:1")
    if isinstance(value, list):
        return [_fill(v) for v in value]
    if isinstance(value, dict):
        return dict((k, _fill(v)) for k, v in value.items())
    return value


CASES = [(name, label, value) for name, t in sorted(TYPES.items()) for label, value, typed in corpus(t)]


@pytest.mark.parametrize("name,label,value", CASES, ids=["%s-%s" % (n, l) for n, l, v in CASES])
def test_every_corpus_value_is_refused_in_one_line(name, label, value):
    t = TYPES[name]
    with pytest.raises(vocabulary.Bad) as err:
        t.validate(value)
    line = t.line("field", value, str(err.value))
    assert line.startswith("field must ") and "\n" not in line, line
    # Every type: a corpus value that carries a secret mark is one a careless user could write with a real token.
    assert not any(s in line for s in SECRETS), line


@pytest.mark.parametrize("name", sorted(TYPES))
def test_the_sample_is_good(name):
    t = TYPES[name]
    t.validate(_fill(t.sample()))


def test_lines():
    assert (
        vocabulary.Int(1, 10).line("n", 0, "be a whole number from 1 to 10")
        == "n must be a whole number from 1 to 10, got 0"
    )
    t = vocabulary.Secret()
    with pytest.raises(vocabulary.Bad) as err:
        t.validate("abc\ndef")
    assert t.line("token", "abc\ndef", str(err.value)) == (
        "token must be the secret alone, without spaces, line breaks "
        "or other characters a token cannot have (the value is not "
        "shown)"
    )
    u = vocabulary.Url()
    bad = "https://user:s3cr3t@example.org:8443/a/b?x=1"
    with pytest.raises(vocabulary.Bad) as err:
        u.validate(bad)
    assert u.line("endpoint", bad, str(err.value)) == (
        "endpoint must be an https:// or http:// URL without credentials before '@' (give a token through its own secret "
        "option), got https://********@example.org:8443/..."
    )


URL_WORDS = "be an https:// or http:// URL"
IMAGE_CREDENTIALS = (
    "be a container image reference without credentials: set ray_container_registry_username and "
    "ray_container_registry_password instead (the value, which may hold credentials, is not shown)"
)


@pytest.mark.parametrize(
    "t,value,expected",
    [
        # urlsplit's own reasons quote the netloc or the port: a token written there stays unseen.
        (
            vocabulary.Url(),
            "https://user:s3cr3tTok",
            URL_WORDS + " (the port is not a number), got a value that is not a URL (not shown)",
        ),
        (
            vocabulary.Url(),
            "https://[user:s3cr3tTok@example.org]/",
            URL_WORDS + " (a host in [ ] must be an IPv6 address), got a value that is not a URL (not shown)",
        ),
        (
            vocabulary.Url(),
            "https://s3cr3t\u2100@example.org/",
            URL_WORDS + " (the host has characters a host name cannot have), got a value that is not a URL (not shown)",
        ),
        (
            vocabulary.Url(),
            "HTTPS://s3cr3t@example.org/x",
            URL_WORDS + " without credentials before '@' (give a token "
            "through its own secret option), got https://********@example.org/...",
        ),
        (
            vocabulary.Url(),
            "https://s3cr3t%40x@example.org/",
            URL_WORDS + " without credentials before '@' (give a token "
            "through its own secret option), got https://********@example.org",
        ),
        (
            vocabulary.Url(),
            "https://example.org\\@s3cr3t.evil/",
            URL_WORDS + " without credentials before '@' (give a token "
            "through its own secret option), got https://********@s3cr3t.evil",
        ),
        (
            vocabulary.Url(),
            "https://:s3cr3t@[::1]:8443/",
            URL_WORDS + " without credentials before '@' (give a token "
            "through its own secret option), got https://********@[::1]:8443",
        ),
        (
            vocabulary.Url(),
            " https://s3cr3t@example.org/",
            URL_WORDS + " without spaces, got https://********@example.org",
        ),
        (
            vocabulary.Url(),
            "git+https://s3cr3t@example.org/x",
            URL_WORDS + ", got git+https://********@example.org/...",
        ),
        # A URL written without its // is read as a URL, never shown back as a bad path.
        (
            vocabulary.PathOrUrl(),
            "https:user:s3cr3t@example.org/simple",
            "be an absolute path or a URL (https://, http://, file://), got a value that is not a URL (not shown)",
        ),
        (
            vocabulary.PathOrUrl(),
            "user:s3cr3t@example.org/simple",
            "be an absolute path or a URL (https://, http://, file://), got a value that is not a URL (not shown)",
        ),
        # An '@' anywhere but before a digest may be user:password@.
        (vocabulary.ImageRef(), "https://user:s3cr3t@registry.example/x:1", IMAGE_CREDENTIALS),
        (vocabulary.ImageRef(), "registry.example/user:s3cr3t@x:1", IMAGE_CREDENTIALS),
        (vocabulary.ImageRef(), "registry.example/x:1@user:s3cr3t", IMAGE_CREDENTIALS),
        (vocabulary.ImageRef(), "user:s3cr3t@registry.example/x@sha256:" + "a" * 64, IMAGE_CREDENTIALS),
    ],
)
def test_credentials_in_fresh_forms_are_never_shown(t, value, expected):
    with pytest.raises(vocabulary.Bad) as err:
        t.validate(value)
    assert t.line("f", value, err.value) == "f must " + expected
    assert value in t.conceal(value)


@pytest.mark.parametrize(
    "value,world",
    [
        ("0.0.0.0/0", False),
        ("::/0", False),
        ("0.0.0.0/1", False),
        ("10.0.0.0/8", True),
        ("192.168.0.0/16", True),
        ("1.2.3.0/24", True),
        ("fd00::/8", True),
        ("2001:db8::/32", True),
        # IPv6 networks of IPv4 addresses are judged by the IPv4 they carry
        ("::ffff:0:0/96", False),
        ("::/96", False),
        ("64:ff9b::/96", False),
        ("2002::/16", False),
        ("::/80", False),
        ("0::0/0", False),
        ("::ffff:10.0.0.0/104", True),
        ("2002:a00::/24", True),
        ("::ffff:1.2.3.0/120", True),
    ],
)
def test_world_open_networks(value, world):
    if world:
        vocabulary.Cidr().validate(value)
    else:
        with pytest.raises(vocabulary.Bad, match="opens to the whole internet"):
            vocabulary.Cidr(world_switch="ray_firewall_allow_world").validate(value)
        vocabulary.Cidr(world=True).validate(value)


@pytest.mark.parametrize(
    "good",
    [
        "ray[default]==2.60.0",
        "torch==2.13.0+cpu",
        "verl",
        "numpy>=1.26,<2",
        "pkg @ https://example.org/p.whl",
        "x; python_version<'3.12'",
        "a_b.c-d~=1.0",
    ],
)
def test_requirements_that_stay_good(good):
    vocabulary.Requirement().validate(good)


@pytest.mark.parametrize(
    "good",
    [
        "pkg @ git+https://github.com/org/x.git@v1#egg=x",
        "pkg @ git+ssh://git@github.com/org/x.git",
        "pkg @ file:///data/wheels/p.whl",
        "pkg @ https://h.example/p.whl#sha256=abc",
        "pkg @ https://h.example/p.whl ; python_version>'3'",
    ],
)
def test_requirement_urls_that_stay_good(good):
    vocabulary.Requirement().validate(good)


def test_a_requirement_url_with_credentials_is_never_shown():
    t, bad = vocabulary.Requirement(), "ray @ https://user:s3cr3tPass@example.org/ray.whl"
    with pytest.raises(vocabulary.Bad) as err:
        t.validate(bad)
    line = t.line("python_env_packages[0]", bad, err.value)
    assert "s3cr3t" not in line and line.endswith("got 'ray' @ https://********@example.org/..."), line
    assert t.conceal(bad) == [bad]


@pytest.mark.parametrize(
    "good",
    [
        ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "1.2.3.0/24"],
        ["1.0.0.0/8", "1.0.0.0/8"],
        ["1.0.0.0/8", "2.3.0.0/16"],
        ["fd00::/8", "2001:db8::/32"],
        [],
    ],
)
def test_networks_that_stay_good_together(good):
    vocabulary.Networks(world_switch="allow_world").validate(good)


def test_networks_together_world_open_only_with_the_switch():
    every = ["%d.0.0.0/8" % i for i in range(256)]
    with pytest.raises(vocabulary.Bad, match="these 256 networks together open to the whole internet"):
        vocabulary.Networks(world_switch="allow_world").validate(every)
    assert len(vocabulary.Networks(world_switch="allow_world").validate(every, {"allow_world": True})) == 256


@pytest.mark.parametrize("good", ["10.0.0.5", "127.0.0.1", "::1", "fd00::5", "::ffff:10.0.0.5"])
def test_addresses_that_stay_good(good):
    vocabulary.Address().validate(good)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "::ffff:127.0.0.1",
        "localhost",
        "LocalHost.",
        "localhost.localdomain",
        "ip6-localhost",
        "ip6-loopback",
        "gpu.localhost",
    ],
)
def test_loopback_is_refused_only_where_a_host_must_be_another_machine(host):
    """An inventory source's or a provider's host (loopback=False) on loopback is the controller itself; an address
    a node binds (Address, ray_private_ip) may be loopback: a one-node cluster on 127.0.0.1."""
    assert vocabulary.unreachable(host, loopback=False) == "not %s (this machine's own loopback)" % host
    assert vocabulary.unreachable(host) is None


@pytest.mark.parametrize(
    "host",
    [
        "10.0.0.5",
        "203.0.113.7",
        "fd00::5",
        "gpu.example",
        "localhost-1.example",
        "mylocalhost",
        "localhost.example.org",
    ],
)
def test_machines_stay_good_where_loopback_is_refused(host):
    assert vocabulary.unreachable(host, loopback=False) is None


def test_no_machine_stays_refused_either_way():
    assert vocabulary.unreachable("0.0.0.0") == vocabulary.unreachable("0.0.0.0", loopback=False) == "not 0.0.0.0"
    assert vocabulary.unreachable("::ffff:0.0.0.0", loopback=False) == "not ::ffff:0.0.0.0"
    with pytest.raises(vocabulary.Bad, match="be an address the other nodes can reach, not ::ffff:0:0"):
        vocabulary.Address().validate("::ffff:0.0.0.0")


def test_mapped_networks_keep_their_prefix():
    import ipaddress

    assert str(vocabulary.ipv4_mapped_network(ipaddress.ip_network("::ffff:10.0.0.0/104"))) == "10.0.0.0/8"
    assert str(vocabulary.ipv4_mapped_network(ipaddress.ip_network("::ffff:10.0.0.5"))) == "10.0.0.5/32"
    assert str(vocabulary.ipv4_mapped_network(ipaddress.ip_network("fd00::/8"))) == "fd00::/8"


def test_args_spec_and_errors():
    args = vocabulary.Args(
        path=vocabulary.AbsPath(required=True),
        token=vocabulary.Secret(default=""),
        n=vocabulary.Int(0, default=3),
        word=vocabulary.Choice(("a", "b"), default="a"),
        flag=vocabulary.Switch(default=False),
        note=vocabulary.Text(no_log=False),
    )
    assert args.spec == {
        "path": {"type": "path", "required": True},
        "token": {"type": "str", "default": "", "no_log": True},
        "n": {"type": "int", "default": 3},
        "word": {"type": "str", "default": "a", "choices": ["a", "b"]},
        "flag": {"type": "bool", "default": False},
        "note": {"type": "str", "no_log": False},
    }
    assert args.errors({"path": "rel", "token": "a b", "n": -1, "word": "a", "flag": False, "note": None}) == [
        "path must be an absolute path (starting with /), got 'rel'",
        "token must be the secret alone, without spaces, line breaks or other characters a token cannot have (the value "
        "is not shown)",
        "n must not be negative, got -1",
    ]
    assert args.samples() == {"path": "{tmp}/sample"}


def test_overlap():
    assert vocabulary.overlap("/data/ckpt", "/data/ckpt/a") and vocabulary.overlap("/data/ckpt/a", "/data/ckpt")
    assert vocabulary.overlap("/data/ckpt/", "/data/ckpt") and not vocabulary.overlap("/data/ckpt2", "/data/ckpt")
    # Linux reads //data as /data (os.path.normpath keeps the two slashes)
    assert vocabulary.overlap("//data/ckpt", "/data/ckpt/a") and vocabulary.inside("/data//./ckpt", "//data")
    assert vocabulary.normpath("//data/./x/") == "/data/x" and vocabulary.normpath("///x") == "/x"


def test_leads_outside_follows_links_on_both_sides(tmp_path):
    import os

    base, out = tmp_path / "base", tmp_path / "out"
    (base / "d").mkdir(parents=True)
    out.mkdir()
    os.symlink(str(out), base / "to_out")
    os.symlink("/", base / "to_root")
    os.symlink("d", base / "to_d")
    os.symlink("..", base / "d" / "up")  # back to base itself: inside
    os.symlink(str(out / "missing"), base / "nowhere")  # leads nowhere: reading it fails on its own
    os.symlink(str(base), tmp_path / "base_alias")
    assert vocabulary.leads_outside(base / "to_out", base) and vocabulary.leads_outside(base / "to_root", base)
    assert vocabulary.leads_outside(base / "to_out" / "x", base) is False  # missing below the link: nothing to read
    assert not any(vocabulary.leads_outside(base / p, base) for p in ("d", "to_d", "d/up", "nowhere", "absent"))
    assert not vocabulary.leads_outside(tmp_path / "base_alias" / "to_d", base)  # the base reached through a link
    assert vocabulary.leads_outside(base / "d" / "up", base / "d")


def test_a_plain_relative_path_is_a_bad_path_shown_as_such():
    t = vocabulary.PathOrUrl()
    with pytest.raises(vocabulary.Bad) as err:
        t.validate("wheels")
    assert t.line("f", "wheels", err.value) == "f must be an absolute path (starting with /), got 'wheels'"


def test_where_a_secret_is_kept_is_no_secret():
    """secrets_file, secrets_dir, RAY_AUTH_TOKEN_PATH name a place: a line about them shows the path."""
    assert (
        vocabulary.credential_strings(
            {"secrets_file": "/data/s/x.env", "secrets_dir": "/data/s", "RAY_AUTH_TOKEN_PATH": "/etc/ray/auth_token"}
        )
        == []
    )
    assert vocabulary.credential_strings({"HF_TOKEN": "abc", "api_key": "k"}) == ["abc", "k"]


def test_no_plugin_code_makes_bad_values():
    """The bad values are the tests' (tests/unit/vocabulary_corpus.py, by class): a ``corpus`` method, a ``Corpus`` or a
    ``CORPORA`` in plugins/ would go to every node in every scripted call, and a kind's method there would be passed
    over by :func:`corpus`, which reads only what the tests register."""
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    found = []
    for path in sorted(plugins.rglob("*.py")):
        if "vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(node, "name", None) or getattr(node, "id", None) or getattr(node, "attr", None)
            if isinstance(name, str) and ("corpus" in name.lower() or name == "CORPORA"):
                found.append("%s:%d %s" % (path.relative_to(plugins), node.lineno, name))
    assert not found, found


def test_a_surfaces_own_kind_adds_to_its_parents_values():
    """A kind of common/settings.py, verl/experiment_schema.py or ray/firewall.py gets its parent kind's values and then
    its own, through the same dispatch as the vocabulary's."""
    from ansible_collections.rlinfra.verl.plugins.module_utils.common import settings

    either = [label for label, value, typed in corpus(settings.RULES["ray_num_gpus"])]  # _Either, a _Whole, a Type
    assert either == ["word", "below", "above", "fraction", "boolean", "exponent", "upper"]
