"""rlinfra.verl.python_env_sync (module_utils/node/python_env_sync.py) and module_utils/node/python_env.py: exact
installs (uv pip sync semantics).

The choosing is tested on made-up metadata; the module itself runs in-process against a real virtualenv
(made with ``python -m venv``, uv installed into it) with wheels from the sandbox's wheelhouse, offline.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.common import files
from ansible_collections.rlinfra.verl.plugins.module_utils.node import python_env
from ansible_collections.rlinfra.verl.plugins.module_utils.node import python_env_sync as env_sync
from ansible_collections.rlinfra.verl.plugins.modules import python_env_sync

WHEELHOUSE = Path(__file__).resolve().parents[2] / ".sandbox" / "wheelhouse"
REQUIREMENT = "a requirement such as 'ray[default]==2.60.0' (not an option line such as --index-url or -r FILE)"
NEEDED_WHEELS = (
    "uv-",
    "iniconfig-2.3.1",
    "mdurl-0.1.2",
    "six-",
    "requests-",
    "idna-",
    "urllib3-",
    "certifi-",
    "charset_normalizer-",
)


def dist(name, extras=(), requires=()):
    return {
        "name": name,
        "version": "1.0",
        "extras": list(extras),
        "requires": [{"name": r[0], "extras": list(r[1]), "when": list(r[2])} for r in requires],
    }


def root(text, name, extras=(), applies=True):
    return {"text": text, "name": name, "extras": list(extras), "applies": applies}


DISTS = {
    "ray": dist(
        "ray",
        extras=["default", "data"],
        requires=[
            ("click", (), ["", "default", "data"]),
            ("aiohttp", (), ["default"]),
            ("pandas", (), ["data"]),
            ("smart-open", ("s3",), ["default"]),
        ],
    ),
    "click": dist("click"),
    "aiohttp": dist("aiohttp", requires=[("yarl", (), [""])]),
    "yarl": dist("yarl", requires=[("aiohttp", (), [""])]),  # a cycle
    "pandas": dist("pandas"),
    "smart-open": dist("smart_open", extras=["s3"], requires=[("boto3", (), ["s3"]), ("wrapt", (), [""])]),
    "boto3": dist("boto3"),
    "wrapt": dist("wrapt"),
    "iniconfig": dist("iniconfig"),
    "sgl-kernel": dist("sgl_kernel", requires=[("torch", (), [""])]),
    "torch": dist("torch"),
    "pip": dist("pip"),
    "uv": dist("uv"),
    "wheel": dist("wheel", requires=[("packaging", (), [""])]),
    "packaging": dist("packaging"),
}


def test_needed_follows_extras_markers_and_cycles():
    keep = python_env.needed(
        DISTS, [root("ray[Default]==2.60.0", "ray", ["Default"])], no_deps=[root("sgl_kernel==0.3", "sgl-kernel")]
    )
    assert keep == {
        "ray",
        "click",
        "aiohttp",
        "yarl",
        "smart-open",
        "boto3",
        "wrapt",
        "sgl-kernel",
        "pip",
        "uv",
        "wheel",
        "packaging",
    }  # not pandas (extra data), torch (no-deps), iniconfig


def test_unneeded_names_what_the_lists_dropped():
    remove, reason = python_env.unneeded(DISTS, [root("ray==2.60.0", "ray")])
    assert reason is None
    assert remove == ["aiohttp", "boto3", "iniconfig", "pandas", "sgl_kernel", "smart_open", "torch", "wrapt", "yarl"]


def test_root_that_does_not_apply_is_not_required():
    roots = [root("ray", "ray"), root("pywin32; sys_platform == 'win32'", "pywin32", applies=False)]
    remove, reason = python_env.unneeded(DISTS, roots)
    assert reason is None and "click" not in remove


def test_dry_run_leaves_missing_requirements_out():
    remove, reason = python_env.unneeded(DISTS, [root("ray", "ray"), root("new==1", "new")], ignore_missing=True)
    assert reason is None and "iniconfig" in remove and "click" not in remove


@pytest.mark.parametrize(
    "roots, no_deps, words",
    [
        ([root("./local/pkg", None)], [], "cannot tell the project name of './local/pkg'"),
        ([root("ray", "ray"), root("absent==1", "absent")], [], "'absent==1' not installed"),
        ([root("ray", "ray")], [root("gone==1", "gone")], "'gone==1' not installed"),
    ],
)
def test_nothing_removed_when_the_needed_set_is_unknown(roots, no_deps, words):
    remove, reason = python_env.unneeded(DISTS, roots, no_deps)
    assert remove == [] and words in reason


def test_requirement_lines_skip_options_and_comments():
    assert python_env.requirement_lines(["ray==1", " ", "# c", "--extra-index-url https://x", " six "]) == [
        "ray==1",
        "six",
    ]


def test_uv_changes_real_and_dry_run():
    real = (
        "Using Python 3.11.2 environment at: /v\nResolved 2 packages in 2ms\nUninstalled 1 package in 1ms\n"
        "Installed 2 packages in 1ms\n - six==1.16.0\n + six==1.17.0\n + mdurl==0.1.2\n ~ idna==3.20\n"
    )
    assert python_env.uv_changes(real) == (["six==1.17.0", "mdurl==0.1.2", "idna==3.20"], ["six==1.16.0"])
    assert python_env.uv_changes("Would uninstall 1 package\n - six==1.17.0\n") == ([], ["six==1.17.0"])
    assert python_env.uv_changes("Audited 3 packages in 2ms\nWould make no changes\n") == ([], [])


def test_fingerprint_covers_the_interpreter_and_ignores_order():
    a = python_env.fingerprint("Python 3.11.2 (main) [GCC 12.2.0]", ["b==1", "a==1"])
    assert a == python_env.fingerprint("Python 3.11.2 (main) [GCC 12.2.0]", ["a==1", "b==1"])
    assert a != python_env.fingerprint("Python 3.11.7 (main) [GCC 12.2.0]", ["a==1", "b==1"])
    assert a != python_env.fingerprint("Python 3.11.2 (main) [GCC 12.2.0]", ["a==1", "b==2"])


def test_inputs_digest_ignores_order_not_content():
    one = python_env.inputs_digest(["ray==1", "six"], ["flash-attn"], [], "Python 3.11.2")
    assert one == python_env.inputs_digest(["six", "ray==1", "# comment"], ["flash-attn"], [], "Python 3.11.2")
    assert one != python_env.inputs_digest(["six", "ray==1"], [], ["flash-attn"], "Python 3.11.2")
    assert one != python_env.inputs_digest(["ray==1", "six"], ["flash-attn"], [], "Python 3.11.7")


def test_write_if_changed(tmp_path):
    path = str(tmp_path / "f")
    assert files.write_if_changed(path, "x\n", 0o600, check_mode=True) and not os.path.exists(path)
    assert files.write_if_changed(path, "x\n", 0o600)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert not files.write_if_changed(path, "x\n", 0o600)
    assert files.write_if_changed(path, "x\n", 0o644) and os.stat(path).st_mode & 0o777 == 0o644
    assert files.write_if_changed(path, "y\n", 0o644) and open(path).read() == "y\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]  # no temporary file left


def test_write_atomic_leaves_nothing_behind_when_it_fails(tmp_path):
    target = tmp_path / "a-directory"
    target.mkdir()
    with pytest.raises(OSError):
        files.write_atomic(str(target), "x", 0o600, prefix=".rlinfra-fw.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"] and not any(target.iterdir())


# --- the module against a real virtualenv -----------------------------------------------------------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    missing = [w for w in NEEDED_WHEELS if not any(p.name.startswith(w) for p in WHEELHOUSE.glob("*.whl"))]
    if missing:
        pytest.skip("wheels %s not in %s: run sandbox/sandbox.sh wheelhouse" % (", ".join(missing), WHEELHOUSE))
    base = getattr(sys, "_base_executable", sys.executable)
    path = tmp_path_factory.mktemp("pyenv") / "venv"
    subprocess.run([base, "-m", "venv", str(path)], check=True, capture_output=True)
    subprocess.run(
        [
            str(path / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            str(WHEELHOUSE),
            "uv",
        ],
        check=True,
        capture_output=True,
    )
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sync(venv, module_runner):
    def run(packages, check_mode=False, **options):
        args = dict(venv=str(venv), packages=packages, find_links=[str(WHEELHOUSE)], no_index=True)
        args.update(options)
        return module_runner(python_env_sync.main, args, check_mode=check_mode)

    return run


def frozen_names(res):
    return {line.split("==")[0].split(" @ ")[0].lower() for line in res["frozen"]}


def test_module_installs_exactly_and_is_idempotent(sync, venv):
    first = sync(["requests", "iniconfig==2.3.1"])
    assert first.get("failed") is not True, first
    assert {"requests", "idna", "urllib3", "certifi", "iniconfig", "uv"} <= frozen_names(first)
    assert first["python_version"].startswith("Python 3.") and len(first["fingerprint"]) == 64

    again = sync(["requests", "iniconfig==2.3.1"])
    assert again["changed"] is False and again["installed"] == again["removed"] == []
    assert again["fingerprint"] == first["fingerprint"]

    # requests dropped (its dependencies only it needed go too), iniconfig kept, mdurl added; uv and pip stay.
    dry = sync(["iniconfig==2.3.1", "mdurl==0.1.2"], check_mode=True)
    assert dry["changed"] is True and dry["installed"] == ["mdurl==0.1.2"]
    assert {"requests", "idna", "urllib3", "certifi"} <= {r.split("==")[0].lower() for r in dry["removed"]}
    assert frozen_names(dry) == frozen_names(first)  # nothing done

    moved = sync(["iniconfig==2.3.1", "mdurl==0.1.2"])
    assert moved["changed"] is True and "mdurl==0.1.2" in moved["installed"]
    names = frozen_names(moved)
    assert {"iniconfig", "mdurl", "uv", "pip"} <= names
    assert not names & {"requests", "idna", "urllib3", "certifi", "charset-normalizer", "charset_normalizer"}
    assert moved["fingerprint"] != first["fingerprint"]
    assert sync(["iniconfig==2.3.1", "mdurl==0.1.2"])["changed"] is False

    lines = (venv / "rlinfra-fingerprint.txt").read_text().splitlines()
    assert lines[0] == moved["fingerprint"] and lines[1] == "# " + moved["python_version"]
    assert lines[2:] == moved["frozen"]
    state = json.loads((venv / "rlinfra-state.json").read_text())
    assert state == {
        "fingerprint": moved["fingerprint"],
        "inputs": moved["inputs_digest"],
        "python": moved["python_version"],
    }
    assert moved["inputs_digest"] == python_env.inputs_digest(
        ["mdurl==0.1.2", "iniconfig==2.3.1"], [], [], moved["python_version"]
    )


def test_module_keeps_no_deps_packages_alone(sync):
    res = sync(["mdurl==0.1.2"], no_deps_packages=["requests"])
    assert res.get("failed") is not True, res
    names = frozen_names(res)
    assert {"requests", "mdurl"} <= names and "iniconfig" not in names
    assert not names & {"idna", "urllib3", "certifi"}  # installed --no-deps: its dependencies are not its to keep
    assert sync(["mdurl==0.1.2"], no_deps_packages=["requests"])["changed"] is False


def test_module_prune_off_removes_nothing(sync):
    res = sync(["six"], prune=False)
    assert res.get("failed") is not True, res
    assert {"six", "mdurl"} <= frozen_names(res) and res["removed"] == []


def test_module_a_bare_wheel_path_is_refused_and_a_named_one_installs(sync):
    wheel = next(WHEELHOUSE.glob("six-*.whl"))
    res = sync([str(wheel)])
    assert res["failed"] is True and res["msg"].startswith("packages[0] must be " + REQUIREMENT + ", got '")
    sync(["mdurl==0.1.2"])
    res = sync(["six @ " + wheel.as_uri()])  # what prune's "cannot tell the project name" asks for
    assert res.get("failed") is not True, res
    assert "six" in frozen_names(res) and "mdurl" not in frozen_names(res) and "not_removed_reason" not in res


def test_module_failure_is_one_line(sync):
    res = sync(["no-such-package-rlinfra==1.0"])
    assert res["failed"] is True and "\n" not in res["msg"]
    assert res["msg"].startswith("uv pip install of python_env_packages failed (exit ")
    assert "no-such-package-rlinfra" in res["msg"]


def test_module_without_venv(module_runner, tmp_path):
    args = dict(venv=str(tmp_path / "none"), packages=["six"])
    res = module_runner(python_env_sync.main, args)
    assert res["failed"] is True and "has no interpreter" in res["msg"] and "set python" in res["msg"]
    dry = module_runner(python_env_sync.main, args, check_mode=True)
    assert dry.get("failed") is not True and dry["changed"] is True and not (tmp_path / "none").exists()


def test_offline_without_a_wheelhouse_is_one_line(module_runner, tmp_path):
    res = module_runner(
        python_env_sync.main,
        dict(
            venv=str(tmp_path / "v"),
            packages=["six"],
            python=sys.executable,
            wheelhouse=str(tmp_path / "no-wheelhouse"),
            no_index=True,
        ),
    )
    assert res["failed"] is True and "\n" not in res["msg"] and not (tmp_path / "v").exists()
    assert (
        "the wheelhouse %s does not exist" % (tmp_path / "no-wheelhouse") in res["msg"]
        and "python_env_offline" in res["msg"]
    )


def test_uv_wheel_picks_this_machine():
    names = [
        "uv-0.13.9-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        "uv-0.13.9-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
        "uv-0.13.9.tar.gz",
        "six-1.whl",
    ]
    assert python_env.uv_wheel(names, "x86_64") == names[0] and python_env.uv_wheel(names, "arm64") == names[1]
    assert python_env.uv_wheel(names, "ppc64le") is None and python_env.uv_wheel([], "x86_64") is None


def test_ensurepip_wheels_answer(tmp_path):
    wheel = tmp_path / "pip-23.0.1-py3-none-any.whl"
    wheel.touch()
    assert python_env.ensurepip_wheels(json.dumps([["pip", "23.0.1", str(wheel)]])) == [("pip", "23.0.1", str(wheel))]
    assert python_env.ensurepip_wheels(json.dumps([["pip", "23.0.1", str(tmp_path / "gone.whl")]])) is None
    assert python_env.ensurepip_wheels("[]") is None and python_env.ensurepip_wheels("Traceback") is None


def test_new_venv_is_made_fast_and_is_what_python_m_venv_makes(module_runner, venv, tmp_path):
    """The fast path (venv --without-pip, uv from the wheelhouse, ensurepip's wheels installed with uv) leaves the
    same package set as `python -m venv` + `pip install uv` (the fixture's venv), so old and new nodes match."""
    base = getattr(sys, "_base_executable", sys.executable)
    args = dict(venv=str(tmp_path / "new"), python=base, packages=["six"], wheelhouse=str(WHEELHOUSE), no_index=True)
    res = module_runner(python_env_sync.main, args)
    assert res.get("failed") is not True, res
    cfg = (tmp_path / "new" / "pyvenv.cfg").read_text()
    assert "--without-pip" in cfg  # the fast path was taken
    ref = subprocess.run(
        [str(venv / "bin" / "uv"), "pip", "freeze", "--python", str(venv / "bin" / "python")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    tooling = {line for line in ref.splitlines() if line.split("==")[0] in ("pip", "setuptools", "uv", "wheel")}
    assert tooling and tooling <= set(res["frozen"]), (tooling, res["frozen"])
    assert module_runner(python_env_sync.main, args)["changed"] is False


def test_converged_env_installs_nothing_and_a_hand_made_change_is_undone(sync, venv, monkeypatch):
    first = sync(["mdurl==0.1.2"])
    assert first.get("failed") is not True, first
    calls = []
    monkeypatch.setattr(env_sync.Sync, "install", lambda self, *a: calls.append(a))
    again = sync(["mdurl==0.1.2"])
    assert again["changed"] is False and calls == []  # the record matches: no uv pip install at all
    monkeypatch.undo()
    subprocess.run(
        [
            str(venv / "bin" / "uv"),
            "pip",
            "install",
            "-q",
            "--python",
            str(venv / "bin" / "python"),
            "--no-index",
            "--find-links",
            str(WHEELHOUSE),
            "six",
        ],
        check=True,
        capture_output=True,
    )
    fixed = sync(["mdurl==0.1.2"])
    assert fixed["changed"] is True and any(r.lower().startswith("six") for r in fixed["removed"])
    assert fixed["fingerprint"] == first["fingerprint"]


# Option lines and credentials never reach uv: the vocabulary's types refuse them before a venv or a command exists -

URL3 = "an https:// or http:// or file:// URL"
REFUSED = [
    (
        "extra_index_option",
        {"packages": ["six", "--extra-index-url=https://evil.example/simple"]},
        "packages[1] must be %s, got '--extra-index-url=https://evil.example/simple'" % REQUIREMENT,
    ),
    (
        "requirements_file",
        {"packages": ["-r /etc/shadow"]},
        "packages[0] must be %s, got '-r /etc/shadow'" % REQUIREMENT,
    ),
    ("editable", {"packages": ["-e ."]}, "packages[0] must be %s, got '-e .'" % REQUIREMENT),
    (
        "trailing_option",
        {"no_deps_packages": ["sgl_kernel --index-url=http://evil.example"]},
        "no_deps_packages[0] must be %s, got 'sgl_kernel --index-url=http://evil.example'" % REQUIREMENT,
    ),
    (
        "nbi_option",
        {"no_build_isolation_packages": ["--no-binary=:all:"]},
        "no_build_isolation_packages[0] must be %s, got '--no-binary=:all:'" % REQUIREMENT,
    ),
    (
        "index_url_token",
        {"index_url": "https://__token__:pypi-s3cr3t@pypi.example/simple"},
        "index_url must be %s without credentials before '@' (give a token through its own secret option), got "
        "https://********@pypi.example/..." % URL3,
    ),
    (
        "extra_index_query",
        {"extra_index_urls": ["https://pypi.example/simple?token=s3cr3t"]},
        "extra_index_urls[0] must be %s without a query string or fragment (a token does not belong in a URL), got "
        "https://pypi.example/..." % URL3,
    ),
    (
        "index_url_ftp",
        {"index_url": "ftp://pypi.example/simple"},
        "index_url must be %s, got ftp://pypi.example/..." % URL3,
    ),
    (
        "find_links_relative",
        {"find_links": ["wheels"]},
        "find_links[0] must be an absolute path (starting with /), got 'wheels'",
    ),
    ("python_relative", {"python": "python3"}, "python must be an absolute path (starting with /), got 'python3'"),
]


@pytest.mark.parametrize("label,args,expected", REFUSED, ids=[r[0] for r in REFUSED])
def test_module_refuses_option_lines_and_credentials_before_anything(label, args, expected, module_runner, tmp_path):
    params = dict(venv=str(tmp_path / "v"), packages=["six"], python=sys.executable)
    params.update(args)
    res = module_runner(python_env_sync.main, params)
    assert res["failed"] is True and res["msg"] == expected and not res.get("changed")
    assert "s3cr3t" not in json.dumps(res) and not (tmp_path / "v").exists()
