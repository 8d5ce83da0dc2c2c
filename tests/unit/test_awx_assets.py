"""Consistency of the AWX assets (awx/), the execution environment and the collection's dependencies.

- every job template names a playbook of the repository, and every survey variable is one its
  playbook (or a role it uses) reads;
- the experiment survey offers exactly the shipped experiments/NAME.yml;
- the survey specs are valid for AWX, the workflow chains site -> submit -> merge;
- the credential injectors are protected from templating (!unsafe) and reach AWX verbatim, secrets
  are no_log and never rendered into the dump;
- awx/configure.yml passes --syntax-check and ansible-lint --profile production;
- execution-environment.yml is an ansible-builder v3 definition that names every third-party Python
  package the plugins import, and the collections the roles use; meta/execution-environment.yml
  feeds requirements.txt / bindep.txt to ansible-builder's introspection.

The assets are checked as awx/configure.yml renders them (rlinfra_awx_dump: no controller needed).
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
# The running interpreter's bin directory: its venv may live anywhere (a worktree links the checkout's).
VENV_BIN = Path(sys.executable).parent
AWX = ROOT / "awx"
CONFIGURE = AWX / "configure.yml"
EE_FILE = ROOT / "execution-environment.yml"
META_EE = ROOT / "meta" / "execution-environment.yml"
SURVEY_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}
EXPERIMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")  # plugins/module_utils/verl/experiment.py NAME_RE
# Import name -> distribution, for packages that may not be installed where the tests run.
KNOWN_DISTRIBUTIONS = {"yaml": "PyYAML", "hydra": "hydra-core", "omegaconf": "omegaconf", "verl": "verl"}
# Fake secrets given to the dump: none of them may appear in it or in its output.
FAKE = {
    "HYPERBOLIC_API_KEY": "hyp_FAKE_unit_0d1e2f3a4b5c",
    "HF_TOKEN": "hf_FAKE_unit_5a6b7c8d9e0f",
    "WANDB_API_KEY": "wandb_FAKE_unit_1a2b3c4d5e6f",
    "ray": "ray_FAKE_unit_9f8e7d6c5b4a",
    "ssh": "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKEunitKEY0a1b2c3d\n-----END OPENSSH PRIVATE KEY-----",
}


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HYPERBOLIC_", "CONTROLLER_"))}
    env.pop("HF_TOKEN", None)
    env.pop("WANDB_API_KEY", None)
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "/usr/bin:/bin")),
    )
    env.update(extra)
    return env


def _tool(name):
    path = VENV_BIN / name
    return str(path) if path.exists() else name


# --------------------------------------------------------------------------------------------
# Static view of the vars files (!unsafe kept visible) and the rendered assets
# --------------------------------------------------------------------------------------------


class Unsafe(str):
    """A string that was tagged !unsafe in the YAML file."""


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!unsafe", lambda loader, node: Unsafe(loader.construct_scalar(node)))


def load_static(path):
    return yaml.load(Path(path).read_text(), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


STATIC_ASSETS = load_static(AWX / "vars" / "assets.yml")
STATIC_JTS = STATIC_ASSETS["rlinfra_awx_job_templates"]


@pytest.fixture(scope="module")
def dump(tmp_path_factory):
    """awx/configure.yml rendered to JSON, with every credential's (fake) secret given."""
    tmp = tmp_path_factory.mktemp("awx_dump")
    out = tmp / "assets.json"
    secrets_file = tmp / "secrets.yml"
    secrets_file.write_text(
        yaml.safe_dump({"rlinfra_awx_ray_auth_token": FAKE["ray"], "rlinfra_awx_ssh_private_key": FAKE["ssh"]})
    )
    proc = subprocess.run(
        [
            _tool("ansible-playbook"),
            "-i",
            "localhost,",
            str(CONFIGURE),
            "-e",
            "rlinfra_awx_dump=%s" % out,
            "-e",
            "@%s" % secrets_file,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=_env(
            HYPERBOLIC_API_KEY=FAKE["HYPERBOLIC_API_KEY"],
            HF_TOKEN=FAKE["HF_TOKEN"],
            WANDB_API_KEY=FAKE["WANDB_API_KEY"],
        ),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "PLAY RECAP" in proc.stdout
    return {
        "data": json.loads(out.read_text()),
        "text": out.read_text(),
        "output": proc.stdout + proc.stderr,
        "mode": out.stat().st_mode & 0o777,
    }


def shipped_experiments():
    names = set()
    for path in (ROOT / "experiments").iterdir():
        if path.is_file() and path.suffix in (".yml", ".yaml") and EXPERIMENT_RE.match(path.stem):
            names.add(path.stem)
    return sorted(names)


def jt_by_key(dump, key):
    return next(jt for jt in dump["data"]["job_templates"] if jt["key"] == key)


# --------------------------------------------------------------------------------------------
# Which variables a playbook reads (the playbook, the collection playbooks it imports, its roles)
# --------------------------------------------------------------------------------------------

CONDITIONAL_KEYS = {"when", "that", "failed_when", "changed_when", "until", "loop", "with_items"}
JINJA_BLOCK = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
STRING_LITERAL = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
IDENTIFIER = re.compile(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)")


def _resolve_playbook(ref, base):
    if ref.startswith("rlinfra.verl."):
        return ROOT / "playbooks" / (ref.split(".", 2)[2] + ".yml")
    return (base.parent / ref).resolve()


def _role_dir(name):
    return ROOT / "roles" / (name.split(".", 2)[2] if name.startswith("rlinfra.verl.") else name)


def _roles_of(node, found):
    """Role names used anywhere in a play or task list (roles:, include_role, import_role)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "roles" and isinstance(value, list) and "hosts" in node:  # a play's, not check_settings' roles:
                for r in value:
                    found.add(r if isinstance(r, str) else (r.get("role") or r.get("name")))
            elif key in ("ansible.builtin.include_role", "ansible.builtin.import_role", "include_role", "import_role"):
                found.add(value["name"])
            else:
                _roles_of(value, found)
    elif isinstance(node, list):
        for item in node:
            _roles_of(item, found)
    return found


def playbook_sources(playbook):
    """Files a playbook reads variables from: itself, imported playbooks, its roles and their dependencies."""
    files, roles, seen = [], set(), set()
    queue = [ROOT / playbook]
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        files.append(path)
        doc = yaml.safe_load(path.read_text()) or []
        for play in doc:
            ref = play.get("ansible.builtin.import_playbook") or play.get("import_playbook")
            if ref:
                queue.append(_resolve_playbook(ref, path))
        _roles_of(doc, roles)
    pending = list(roles)
    while pending:
        role = _role_dir(pending.pop())
        meta = role / "meta" / "main.yml"
        if meta.is_file():
            for dep in (yaml.safe_load(meta.read_text()) or {}).get("dependencies") or []:
                name = dep if isinstance(dep, str) else (dep.get("role") or dep.get("name"))
                if name not in roles:
                    roles.add(name)
                    pending.append(name)
    for name in sorted(roles):
        role = _role_dir(name)
        assert role.is_dir(), "%s uses role %s, which is not in roles/" % (playbook, name)
        files.extend(sorted(p for p in role.rglob("*") if p.suffix in (".yml", ".yaml", ".j2") and p.is_file()))
    return files


def _expressions(node, key=None):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _expressions(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item, key)
    elif isinstance(node, str):
        if key in CONDITIONAL_KEYS and "{{" not in node:
            yield node
        for m in JINJA_BLOCK.finditer(node):
            yield m.group(1) or m.group(2)


def variables_read(files):
    """Names used as variables in Jinja expressions and conditionals (not attributes, not literals)."""
    names = set()
    for path in files:
        text = path.read_text()
        if path.suffix == ".j2":
            exprs = [m.group(1) or m.group(2) for m in JINJA_BLOCK.finditer(text)]
        else:
            exprs = list(_expressions(yaml.safe_load(text)))
        for expr in exprs:
            names.update(IDENTIFIER.findall(STRING_LITERAL.sub("''", expr)))
    return names


# --------------------------------------------------------------------------------------------
# Job templates, surveys, experiments, workflow
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("jt", STATIC_JTS, ids=[jt["key"] for jt in STATIC_JTS])
def test_job_template_playbook_exists(jt):
    path = ROOT / jt["playbook"]
    assert path.is_file(), "job template %s names %s, which is not in the repository" % (jt["key"], jt["playbook"])
    assert "/" not in jt["playbook"], "AWX playbooks are relative to the project root"
    for f in playbook_sources(jt["playbook"]):  # imported collection playbooks and roles exist too
        assert f.is_file(), f


def test_every_entry_point_has_a_job_template():
    entry_points = {
        p.name
        for p in ROOT.glob("*.yml")
        if any("import_playbook" in str(play) for play in (yaml.safe_load(p.read_text()) or []))
    }
    assert entry_points >= {"site.yml", "submit.yml", "stop.yml", "status.yml"}
    assert entry_points <= {jt["playbook"] for jt in STATIC_JTS}, "an entry point playbook without a job template"


@pytest.mark.parametrize("jt", STATIC_JTS, ids=[jt["key"] for jt in STATIC_JTS])
def test_survey_variables_are_read_by_the_playbook(dump, jt):
    rendered = jt_by_key(dump, jt["key"])
    if not rendered["survey_enabled"]:
        assert rendered["survey_spec"] == {}
        return
    read = variables_read(playbook_sources(jt["playbook"]))
    for question in rendered["survey_spec"]["spec"]:
        assert question["variable"] in read, "%s survey asks for %r, which %s (and its roles) never reads" % (
            jt["key"],
            question["variable"],
            jt["playbook"],
        )


def test_variable_scan_sees_the_cli_variables():
    """The scan is not vacuous: submit.yml reads exp/run/cluster/dry_run/wait, and not e.g. `trainer`."""
    read = variables_read(playbook_sources("submit.yml"))
    assert {"exp", "run", "cluster", "dry_run", "wait", "verl_job_experiment"} <= read
    assert "trainer" not in read and "Submit" not in read


def test_submit_survey_has_experiment_and_dry_run(dump):
    spec = {q["variable"]: q for q in jt_by_key(dump, "submit")["survey_spec"]["spec"]}
    assert spec["exp"]["type"] == "multiplechoice" and spec["exp"]["required"]
    assert spec["dry_run"]["type"] == "multiplechoice" and spec["dry_run"]["choices"] == ["false", "true"]
    assert spec["dry_run"]["default"] == "false"


def test_experiment_choices_are_the_shipped_experiments(dump):
    shipped = shipped_experiments()
    assert "smoke" in shipped
    assert dump["data"]["experiments"] == shipped
    surveys = [jt["survey_spec"] for jt in dump["data"]["job_templates"] if jt["survey_enabled"]]
    surveys.append(dump["data"]["workflow"]["survey_spec"])
    checked = 0
    for survey in surveys:
        for q in survey["spec"]:
            if q["variable"] != "exp":
                continue
            checked += 1
            assert q["choices"] == shipped, "%s: survey choices %s != experiments/ %s" % (
                survey["name"],
                q["choices"],
                shipped,
            )
            for name in q["choices"]:
                assert (ROOT / "experiments" / (name + ".yml")).is_file() or (
                    ROOT / "experiments" / (name + ".yaml")
                ).is_file()
            assert q["default"] == "smoke"
    assert checked >= 5  # submit, stop, status, merge, workflow


def test_survey_specs_are_valid_for_awx(dump):
    surveys = [jt["survey_spec"] for jt in dump["data"]["job_templates"] if jt["survey_enabled"]]
    surveys.append(dump["data"]["workflow"]["survey_spec"])
    for survey in surveys:
        assert survey["name"] and isinstance(survey["description"], str) and survey["spec"], survey
        variables = [q["variable"] for q in survey["spec"]]
        assert len(variables) == len(set(variables)), "duplicate survey variables in %s" % survey["name"]
        for q in survey["spec"]:
            assert q["type"] in SURVEY_TYPES, q
            assert q["question_name"] and isinstance(q["required"], bool), q
            assert re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", q["variable"]), q
            assert not q["variable"].startswith(("awx_", "tower_", "ansible_")), "reserved name %s" % q["variable"]
            if q["type"] in ("multiplechoice", "multiselect"):
                assert isinstance(q["choices"], list) and q["choices"], q
                assert all(isinstance(c, str) for c in q["choices"]) and len(set(q["choices"])) == len(q["choices"])
                assert q["default"] in q["choices"], q
            if q["type"] in ("text", "textarea", "password"):
                assert 0 <= q["min"] <= q["max"], q
                assert q["min"] <= len(q["default"]) <= q["max"], q
            if q["required"]:
                assert q.get("default") not in (None, ""), (
                    "required %s needs a default (workflow nodes)" % q["variable"]
                )


def test_workflow_is_site_submit_merge(dump):
    wf = dump["data"]["workflow"]
    assert wf["chain"] == ["site", "submit", "merge"]
    names = {jt["key"]: jt["name"] for jt in dump["data"]["job_templates"]}
    nodes = {n["identifier"]: n for n in wf["nodes"]}
    assert list(nodes) == ["site", "submit", "merge"]
    for key, nxt in (("site", "submit"), ("submit", "merge"), ("merge", None)):
        node = nodes[key]
        assert node["unified_job_template"] == {
            "name": names[key],
            "type": "job_template",
            "organization": {"name": dump["data"]["organization"]},
        }
        assert node["related"]["success_nodes"] == ([{"identifier": nxt}] if nxt else [])
    read = set()
    for key in wf["chain"]:
        playbook = next(jt["playbook"] for jt in STATIC_JTS if jt["key"] == key)
        read |= variables_read(playbook_sources(playbook))
    for q in wf["survey_spec"]["spec"]:
        assert q["variable"] in read, "workflow survey variable %s is read by no node" % q["variable"]


def test_no_playbook_is_missing(dump):
    missing = sorted(jt["playbook"] for jt in STATIC_JTS if not (ROOT / jt["playbook"]).is_file())
    assert missing == [], "job templates for playbooks that do not exist: %s" % missing
    assert [jt["key"] for jt in dump["data"]["job_templates"]] == [jt["key"] for jt in STATIC_JTS]


def test_job_templates_get_their_credentials(dump):
    data = dump["data"]
    creds = {c["name"]: c for c in data["credentials"]}
    assert all(c["created"] for c in creds.values()), "every secret was given to the dump"
    for jt in data["job_templates"]:
        expected = sorted(c["name"] for c in creds.values() if jt["key"] in c["attach_to"])
        assert sorted(jt["credentials"]) == expected
    submit = jt_by_key(dump, "submit")["credentials"]
    assert any("HF" in c for c in submit) and any("SSH" in c for c in submit) and any("Ray" in c for c in submit)
    assert (
        data["inventory"]["credential"]
        and creds[data["inventory"]["credential"]]["credential_type"] == "Hyperbolic API"
    )
    assert data["inventory"]["source_path"] == "inventories/hyperbolic.yml"
    assert (ROOT / data["inventory"]["source_path"]).is_file()
    assert yaml.safe_load((ROOT / data["inventory"]["source_path"]).read_text())["plugin"] == "rlinfra.verl.hyperbolic"


# --------------------------------------------------------------------------------------------
# Credential types: injectors protected from templating, secrets never rendered or logged
# --------------------------------------------------------------------------------------------


def test_injectors_are_unsafe_and_reach_awx_verbatim(dump):
    from jinja2 import Environment, meta

    static = STATIC_ASSETS["rlinfra_awx_credential_types"]
    rendered = dump["data"]["credential_types"]
    assert [t["name"] for t in rendered] == ["Hyperbolic API", "Hugging Face / W&B tokens", "Ray auth token"]
    injected_env = set()
    for static_type, ctype in zip(static, rendered):
        name = ctype["name"]
        fields = {f["id"]: f for f in ctype["inputs"]["fields"]}
        used = set()
        static_injectors = static_type["injectors"]
        for kind, entries in ctype["injectors"].items():
            assert kind in ("env", "extra_vars", "file"), kind
            for var, template in entries.items():
                assert isinstance(static_injectors[kind][var], Unsafe), "%s %s.%s is not !unsafe" % (name, kind, var)
                assert template == static_injectors[kind][var], "injector rendered by Ansible: %r" % template
                assert "{{" in template
                refs = meta.find_undeclared_variables(Environment().parse(template))
                assert refs and refs <= set(fields), "%s.%s uses %s, not inputs %s" % (name, var, refs, set(fields))
                used |= refs
                if kind == "env":
                    injected_env.add(var)
        for fid, field in fields.items():
            if field.get("secret"):
                assert fid in used, "secret input %s of %s is injected nowhere" % (fid, name)
        for fid in ctype["inputs"].get("required", []):
            assert fid in fields
        assert ctype["kind"] == "cloud"
    assert injected_env >= {"HYPERBOLIC_API_KEY", "HYPERBOLIC_API_URL", "HF_TOKEN", "WANDB_API_KEY", "RAY_AUTH_TOKEN"}


def test_injected_variables_are_read(dump):
    ray = next(t for t in dump["data"]["credential_types"] if t["name"] == "Ray auth token")
    read = variables_read(playbook_sources("site.yml")) | variables_read(playbook_sources("submit.yml"))
    for var in ray["injectors"]["extra_vars"]:
        assert var in read, "the Ray credential injects %s, which no playbook reads" % var
    hyperbolic = (ROOT / "plugins" / "inventory" / "hyperbolic.py").read_text()
    assert "HYPERBOLIC_API_KEY" in hyperbolic and "HYPERBOLIC_API_URL" in hyperbolic


def test_dump_holds_no_secret(dump):
    for name, value in FAKE.items():
        for line in value.splitlines():
            if len(line) > 12:
                assert line not in dump["text"], "secret %s in the dump" % name
                assert line not in dump["output"], "secret %s in the output" % name
    assert dump["mode"] == 0o600


def _tasks(node):
    if isinstance(node, dict):
        if "name" in node and any("." in k for k in node):
            yield node
        for value in node.values():
            yield from _tasks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _tasks(item)


def test_tasks_handling_secrets_are_no_log():
    plays = yaml.safe_load(CONFIGURE.read_text())
    checked = 0
    for task in _tasks(plays):
        text = json.dumps(task)
        loop = str(task.get("loop", ""))
        if "awx.awx.credential" in task or "rlinfra_awx_credential_specs" in text or "rlinfra_awx__credentials" in loop:
            checked += 1
            assert task.get("no_log") is True, "task %r handles secrets without no_log" % task["name"]
    assert checked >= 3


# --------------------------------------------------------------------------------------------
# The configuration playbook itself
# --------------------------------------------------------------------------------------------


def test_configure_playbook_syntax_check():
    proc = subprocess.run(
        [_tool("ansible-playbook"), "-i", "localhost,", "--syntax-check", str(CONFIGURE)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production():
    proc = subprocess.run(
        [
            _tool("ansible-lint"),
            "--profile",
            "production",
            "--offline",
            "--nocolor",
            "awx/",
            "execution-environment.yml",
            "meta/execution-environment.yml",
        ],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]


# --------------------------------------------------------------------------------------------
# Execution environment and dependencies
# --------------------------------------------------------------------------------------------


def _requirements(path):
    reqs = []
    for line in Path(path).read_text().splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            reqs.append(Requirement(line))
    return reqs


def ee_python_requirements(ee):
    deps = ee["dependencies"]["python"]
    reqs = _requirements(ROOT / deps) if isinstance(deps, str) else [Requirement(d) for d in deps]
    names = {canonicalize_name(r.name) for r in reqs}
    steps = ee.get("additional_build_steps", {})
    for lines in steps.values():
        for line in [lines] if isinstance(lines, str) else lines:
            m = re.search(r"pip install (.*)$", line)
            if m:
                names |= {
                    canonicalize_name(Requirement(tok).name) for tok in m.group(1).split() if not tok.startswith("-")
                }
    return names


def test_ee_definition_is_ansible_builder_v3():
    ee = yaml.safe_load(EE_FILE.read_text())
    assert ee["version"] == 3
    deps = ee["dependencies"]
    assert Requirement(deps["ansible_core"]["package_pip"]).name == "ansible-core"
    assert Requirement(deps["ansible_runner"]["package_pip"]).name == "ansible-runner"
    assert (ROOT / deps["python"]).is_file() and (ROOT / deps["system"]).is_file()
    user_definition = pytest.importorskip("ansible_builder.user_definition")
    definition = user_definition.UserDefinition(str(EE_FILE))
    definition.validate()  # ansible-builder's own schema and checks
    assert definition.version == 3


def test_ee_build_context_is_created(tmp_path):
    if not (VENV_BIN / "ansible-builder").exists():
        pytest.skip("ansible-builder is not installed")
    proc = subprocess.run(
        [
            _tool("ansible-builder"),
            "create",
            "-f",
            str(EE_FILE),
            "-c",
            str(tmp_path / "ctx"),
            "--output-filename",
            "Containerfile",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (tmp_path / "ctx" / "Containerfile").read_text()
    assert "introspect" in containerfile and "pip install --no-cache-dir --no-deps verl==" in containerfile
    assert (tmp_path / "ctx" / "_build" / "requirements.txt").read_text() == (ROOT / "requirements.txt").read_text()


def _third_party_imports(path):
    """(name, guarded) for every absolute import of a non-stdlib, non-ansible top-level module, and
    every importlib.util.find_spec("name") probe. guarded: inside try/except ImportError or a probe."""
    tree = ast.parse(path.read_text(), str(path))
    guarded_nodes = set()

    def catches_import_error(handler):
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any(
            isinstance(t, ast.Name) and t.id in ("ImportError", "ModuleNotFoundError", "Exception") for t in types
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(catches_import_error(h) for h in node.handlers):
            for inner in node.body:
                guarded_nodes.update(id(n) for n in ast.walk(inner))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "find_spec"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.args[0].value.split(".")[0], True))
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in ("ansible", "ansible_collections", "__future__"):
                continue
            found.append((top, id(node) in guarded_nodes))
    return found


def _plugin_files():
    return sorted(p for p in (ROOT / "plugins").rglob("*.py") if "__pycache__" not in p.parts)


def _distribution(import_name):
    dists = importlib.metadata.packages_distributions().get(import_name)
    return canonicalize_name(dists[0] if dists else KNOWN_DISTRIBUTIONS.get(import_name, import_name))


def test_ee_names_every_python_package_the_plugins_import():
    ee = yaml.safe_load(EE_FILE.read_text())
    listed = ee_python_requirements(ee)
    imports = {name for path in _plugin_files() for name, _ in _third_party_imports(path)}
    assert "yaml" in imports and "hydra" in imports  # the scan sees them
    missing = {name: _distribution(name) for name in imports if _distribution(name) not in listed}
    assert not missing, "imported by plugins/ but not in execution-environment.yml: %s" % missing
    # And the collection's own requirements.txt (ansible-builder introspection) covers the same.
    collection_reqs = {canonicalize_name(r.name) for r in _requirements(ROOT / "requirements.txt")}
    for name in imports - {"verl"}:  # verl: --no-deps build step only (its deps are the GPU stack)
        assert _distribution(name) in collection_reqs, name


def test_modules_need_only_the_standard_library_on_targets():
    """Modules (and the module_utils they import) import nothing third-party unguarded."""
    utils = ROOT / "plugins" / "module_utils"
    for module in sorted((ROOT / "plugins" / "modules").glob("*.py")):
        pending, seen = [module], set()
        while pending:
            path = pending.pop()
            if path in seen:
                continue
            seen.add(path)
            for name, guarded in _third_party_imports(path):
                assert guarded, "%s (used by module %s) imports %s unguarded" % (path.name, module.name, name)
            for m in re.finditer(
                r"ansible_collections\.rlinfra\.verl\.plugins\.module_utils((?:\.\w+)*) import ([\w ,]+)",
                path.read_text(),
            ):
                base = utils.joinpath(*m.group(1).split(".")[1:])
                if base.with_suffix(".py").is_file():  # from ...module_utils.ray.client import RayClient
                    pending.append(base.with_suffix(".py"))
                    continue
                for name in m.group(2).split(","):  # from ...module_utils.ray import client as ray_client, job_poll
                    dep = base / (name.split()[0] + ".py") if name.split() else None
                    if dep is not None and dep.is_file():
                        pending.append(dep)


def test_ee_has_the_collections_the_roles_use():
    ee = yaml.safe_load(EE_FILE.read_text())
    galaxy = ee["dependencies"]["galaxy"]
    galaxy = yaml.safe_load((ROOT / galaxy).read_text()) if isinstance(galaxy, str) else galaxy
    listed = {c["name"] for c in galaxy["collections"]}
    used = set()
    fqcn = re.compile(r"^\s*-?\s*([a-z0-9_]+)\.([a-z0-9_]+)\.[a-z0-9_]+:", re.M)
    for path in [
        *ROOT.glob("*.yml"),
        *(ROOT / "playbooks").glob("*.yml"),
        *(ROOT / "roles").rglob("*.yml"),
        *AWX.rglob("*.yml"),
    ]:
        for ns, name in fqcn.findall(path.read_text()):
            used.add("%s.%s" % (ns, name))
    used -= {"ansible.builtin", "ansible.legacy", "rlinfra.verl"}
    assert {"ansible.posix", "community.general", "awx.awx"} <= used
    assert used <= listed, "collections used but not in the EE: %s" % sorted(used - listed)


def test_collection_meta_feeds_ansible_builder_introspection():
    meta_ee = yaml.safe_load(META_EE.read_text())
    assert meta_ee == {"version": 1, "dependencies": {"python": "requirements.txt", "system": "bindep.txt"}}
    introspect = pytest.importorskip("ansible_builder._target_scripts.introspect")
    data = introspect.process(data_dir=str(ROOT / "collections"))
    python = introspect.strip_comments(data["python"])["rlinfra.verl"]
    assert [canonicalize_name(Requirement(r).name) for r in python] == [
        canonicalize_name(r.name) for r in _requirements(ROOT / "requirements.txt")
    ]
    system = data["system"]["rlinfra.verl"]
    assert "openssh-clients [platform:rpm]" in system and "openssh-client [platform:dpkg]" in system


def test_requirement_files_parse():
    reqs = _requirements(ROOT / "requirements.txt")
    assert {canonicalize_name(r.name) for r in reqs} == {"pyyaml", "hydra-core", "omegaconf"}
    for line in (ROOT / "bindep.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.match(r"^[A-Za-z0-9][\w.+-]*( \[[\w:! -]+\])?$", line), line


def test_changelog_names_the_awx_assets():
    changelog = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
    minor = [
        item
        for release in changelog["releases"].values()
        for item in release.get("changes", {}).get("minor_changes", [])
    ]
    assert any(item.startswith("awx/configure.yml - ") for item in minor), minor
    assert any(item.startswith("execution-environment.yml - ") for item in minor), minor
