"""Where an experiment comes from and where its artifacts go (module_utils/verl/experiment_source.py): the user's
project, an explicit directory, or the collection's bundled examples by their explicit name only.

Checked on the pure rule (temporary project trees) and end to end: ``ansible-playbook rlinfra.verl.submit``
(the installed collection's playbook) run from a subdirectory of a user's project, as a dry run, reads the
project's experiment - not the bundled one of the same name - and prints its path and the artifacts directory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ansible_collections.rlinfra.verl.plugins.module_utils.verl import experiment, experiment_source

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
CUSTOM = "framework: custom\nentrypoint: {command: 'echo %s'}\n"


def project(root, names=("mine",), inventory="inventory.yml"):
    """A user's project: experiments/, an inventory, a subdirectory."""
    (root / "experiments").mkdir(parents=True)
    for name in names:
        (root / "experiments" / (name + ".yml")).write_text(CUSTOM % name)
    (root / "sub" / "deeper").mkdir(parents=True)
    inv = root / inventory
    inv.parent.mkdir(parents=True, exist_ok=True)
    inv.write_text("all: {}\n")
    return root


def locate(ref, **kw):
    kw.setdefault("environ", {})
    kw.setdefault("collection_root", REPO)
    return experiment_source.locate(ref, **kw)


def test_bundled_examples_only_by_their_explicit_name(tmp_path):
    root = project(tmp_path / "p")
    src = locate("rlinfra.verl:smoke", cwd=str(root), inventory_sources=[str(root / "inventory.yml")])
    assert (src.how, src.path, src.name) == ("bundled", os.path.join(REPO, "experiments", "smoke.yml"), "smoke")
    assert src.artifacts_dir == str(root / "artifacts")  # the current directory's: the user's, not the collection's
    # A plain name never reads the bundled examples, and the line says how to name them.
    with pytest.raises(experiment.ExperimentError) as err:
        locate("smoke", cwd=str(root), inventory_sources=[str(root / "inventory.yml")])
    line = str(err.value)
    assert "\n" not in line
    assert line.startswith(
        "experiment 'smoke' not found: no smoke.yml or smoke.yaml; searched %s, %s ("
        % (root / "experiments", tmp_path / "experiments")
    )
    assert "experiments there: mine" in line and line.endswith("-e exp=rlinfra.verl:smoke")
    with pytest.raises(experiment.ExperimentError) as err:
        locate("rlinfra.verl:smok", cwd=str(root))
    assert str(err.value).startswith("the collection has no example 'smok' (did you mean 'smoke'?); its examples: ")
    assert "rlinfra.verl:gsm8k_grpo_qwen05b" in str(err.value)


def test_the_project_is_found_from_a_subdirectory_and_from_the_inventory(tmp_path):
    root = project(tmp_path / "p")
    # From a subdirectory: the current directory's parent holds experiments/.
    src = locate("mine", cwd=str(root / "sub"))
    assert (src.how, src.path) == ("project", str(root / "experiments" / "mine.yml"))
    assert src.artifacts_dir == str(root / "artifacts")
    assert src.searched[:2] == [str(root / "sub" / "experiments"), str(root / "experiments")]
    # Two levels down, the inventory (-i ../../inventory.yml) names the project.
    src = locate("mine", cwd=str(root / "sub" / "deeper"), inventory_sources=[str(root / "inventory.yml")])
    assert src.path == str(root / "experiments" / "mine.yml")
    assert src.searched[0] == str(root / "experiments")
    # An inventories/ directory: its parent is the project.
    other = project(tmp_path / "q", inventory="inventories/prod.yml")
    src = locate("mine", cwd=str(tmp_path), inventory_sources=[str(other / "inventories" / "prod.yml")])
    assert src.path == str(other / "experiments" / "mine.yml") and src.artifacts_dir == str(other / "artifacts")


def test_search_order_and_the_collection_playbooks(tmp_path):
    inv_project = project(tmp_path / "inv", names=("both",))
    cwd_project = project(tmp_path / "cwd", names=("both", "only_cwd"))
    inv = str(inv_project / "inventory.yml")
    # The inventory's project comes before the current directory's.
    assert locate("both", cwd=str(cwd_project), inventory_sources=[inv]).path == str(
        inv_project / "experiments" / "both.yml"
    )
    assert locate("only_cwd", cwd=str(cwd_project), inventory_sources=[inv]).path == str(
        cwd_project / "experiments" / "only_cwd.yml"
    )
    # The user's own wrapper playbook elsewhere: its directory (and parent) are searched ...
    wrapper = project(tmp_path / "wrap", names=("wrapped",))
    (wrapper / "playbooks").mkdir()
    assert locate("wrapped", cwd=str(tmp_path), playbook_dir=str(wrapper / "playbooks")).path == str(
        wrapper / "experiments" / "wrapped.yml"
    )
    # ... the collection's own playbooks/ are not (its experiments/ are the bundled examples).
    searched = experiment_source.project_dirs([], os.path.join(REPO, "playbooks"), str(tmp_path), REPO)
    assert os.path.join(REPO, "experiments") not in searched
    assert searched == [str(tmp_path / "experiments"), os.path.join(os.path.dirname(str(tmp_path)), "experiments")]
    # A host list (-i 'a,b,') is no directory: skipped, never a crash.
    assert experiment_source.project_dirs(["localhost,"], "", str(tmp_path), REPO)[0] == str(tmp_path / "experiments")


def test_an_explicit_directory_is_the_only_one_read(tmp_path):
    root = project(tmp_path / "p", names=("mine",))
    elsewhere = tmp_path / "shared-exps"
    elsewhere.mkdir()
    (elsewhere / "team.yml").write_text(CUSTOM % "team")
    src = locate("team", explicit_dir=str(elsewhere), cwd=str(root))
    assert (src.how, src.path, src.artifacts_dir) == ("explicit", str(elsewhere / "team.yml"), str(root / "artifacts"))
    # The environment variable, when the variable is empty; the variable wins over it.
    assert locate("team", environ={experiment_source.ENV_VAR: str(elsewhere)}, cwd=str(root)).how == "explicit"
    assert locate(
        "mine",
        explicit_dir=str(root / "experiments"),
        environ={experiment_source.ENV_VAR: str(elsewhere)},
        cwd=str(tmp_path),
    ).path == str(root / "experiments" / "mine.yml")
    with pytest.raises(experiment.ExperimentError) as err:
        locate("mine", explicit_dir=str(elsewhere), cwd=str(root))
    assert str(err.value) == (
        "experiment 'mine' not found: no mine.yml or mine.yaml; searched %s "
        "(verl_job_experiments_dir); experiments there: team; set verl_job_experiments_dir (or "
        "RLINFRA_EXPERIMENTS_DIR) to read another directory" % elsewhere
    )
    with pytest.raises(experiment.ExperimentError) as err:
        locate("mine", environ={experiment_source.ENV_VAR: str(tmp_path / "nope")}, cwd=str(root))
    assert str(err.value) == (
        "experiments directory %s (RLINFRA_EXPERIMENTS_DIR) does not exist; point "
        "RLINFRA_EXPERIMENTS_DIR at the directory of your experiment files" % (tmp_path / "nope")
    )


def test_artifacts_dir_given_wins_and_bad_names_are_one_line(tmp_path):
    root = project(tmp_path / "p")
    assert locate("mine", cwd=str(root), artifacts_dir=str(tmp_path / "out")).artifacts_dir == str(tmp_path / "out")
    for ref, start in (
        ("", "name the experiment: -e exp=NAME"),
        ("rlinfra.verl:", "name the experiment"),
        ("../etc/passwd", "invalid experiment name '../etc/passwd'"),
        ("rlinfra.verl:../x", "invalid experiment name '../x'"),
    ):
        with pytest.raises(experiment.ExperimentError) as err:
            locate(ref, cwd=str(root))
        assert str(err.value).startswith(start) and "\n" not in str(err.value)


def test_installed_playbook_from_a_subdirectory_uses_the_users_experiment(tmp_path):
    """rlinfra.verl.submit (the collection's playbook) from <project>/sub, -i ../inventory.yml, dry run."""
    root = tmp_path / "proj"
    (root / "experiments").mkdir(parents=True)
    # The user's own `smoke`, unlike the bundled one: the run must use this file.
    (root / "experiments" / "smoke.yml").write_text(
        "description: the user's own smoke\nframework: custom\nentrypoint: {command: 'echo users-own-smoke'}\n"
    )
    (root / "sub").mkdir()
    (root / "inventory.yml").write_text(
        json.dumps(
            {
                "all": {
                    "children": {
                        "ray_head": {
                            "hosts": {
                                "localhost": {
                                    "ansible_connection": "local",
                                    "ansible_python_interpreter": sys.executable,
                                }
                            }
                        }
                    }
                }
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_COLLECTIONS_PATH=os.path.join(REPO, "collections"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "atmp"),
    )

    def run(*args):
        return subprocess.run(
            [
                ANSIBLE_PLAYBOOK,
                "-i",
                "../inventory.yml",
                "rlinfra.verl.submit",
                "-e",
                "dry_run=true",
                "-e",
                "verl_job_preflight=false",
                *args,
            ],
            cwd=root / "sub",
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )

    proc = run("-e", "exp=smoke")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "smoke (custom) from %s" % (root / "experiments" / "smoke.yml") in out
    assert "echo users-own-smoke" in out
    assert '"artifacts": "%s"' % (root / "artifacts") in out
    # The bundled example, by its explicit name.
    proc = run("-e", "exp=rlinfra.verl:smoke")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    shown = re.search(r'"experiment": "smoke \(custom\) from (\S+)"', out)
    assert shown and os.path.realpath(shown.group(1)) == os.path.join(
        os.path.realpath(REPO), "experiments", "smoke.yml"
    )
    assert "users-own-smoke" not in out and "smoke_rl" in out
    # Unknown: one line naming every directory searched; nothing else happens.
    proc = run("-e", "exp=mine")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert (
        "experiment 'mine' not found: no mine.yml or mine.yaml; searched %s, %s"
        % (root / "experiments", tmp_path / "experiments")
    ) in out
    assert not (root / "artifacts").exists()


def test_an_experiments_directory_that_is_a_file_is_named_so(tmp_path):
    root = project(tmp_path / "p")
    (tmp_path / "exps.txt").write_text("not a directory")
    with pytest.raises(experiment.ExperimentError) as err:
        locate("mine", explicit_dir=str(tmp_path / "exps.txt"), cwd=str(root))
    assert str(err.value) == (
        "experiments directory %s (verl_job_experiments_dir) is not a directory; point "
        "verl_job_experiments_dir at the directory of your experiment files" % (tmp_path / "exps.txt")
    )
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("mine", str(tmp_path / "exps.txt"))
    assert str(err.value) == "experiments directory %s is not a directory (set verl_job_experiments_dir)" % (
        tmp_path / "exps.txt"
    )


@pytest.mark.parametrize("how", ["explicit", "project", "load"])
def test_an_experiment_that_links_outside_its_directory_is_not_read(tmp_path, how):
    """A link to a file elsewhere (a key, /etc/shadow) was followed, and the unknown-key error showed its first line."""
    root = project(tmp_path / "p")
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    os.symlink(secret, root / "experiments" / "leak.yml")
    with pytest.raises(experiment.ExperimentError) as err:
        if how == "explicit":
            locate("leak", explicit_dir=str(root / "experiments"), cwd=str(root))
        elif how == "project":
            locate("leak", cwd=str(root))
        else:
            experiment.load_experiment("leak", str(root / "experiments"))
    line = str(err.value)
    # Neither the file's content nor where the link leads (a key's path says whose it is).
    assert line == (
        "%s is a symbolic link that leads outside the experiments directory %s: copy the experiment into "
        "the directory, or point verl_job_experiments_dir at the directory that holds it"
        % (root / "experiments" / "leak.yml", root / "experiments")
    )
    assert "BEGIN" not in line and "b3Bl" not in line and "id_rsa" not in line
    # A link inside the directory (an alias of another experiment) stays allowed.
    os.symlink(root / "experiments" / "mine.yml", root / "experiments" / "alias.yml")
    assert experiment.load_experiment("alias", str(root / "experiments")).name == "alias"


def test_a_link_out_through_a_relative_target_or_to_root_is_refused_and_bundled_examples_still_load(tmp_path):
    root = project(tmp_path / "p")
    (tmp_path / "outside.yml").write_text(CUSTOM % "outside")
    os.symlink("../../outside.yml", root / "experiments" / "up.yml")
    os.symlink("/", root / "experiments" / "root.yml")
    for name in ("up", "root"):
        with pytest.raises(experiment.ExperimentError) as err:
            locate(name, cwd=str(root))
        assert str(err.value) == (
            "%s is a symbolic link that leads outside the experiments directory %s: copy the experiment into the "
            "directory, or point verl_job_experiments_dir at the directory that holds it"
            % (root / "experiments" / (name + ".yml"), root / "experiments")
        )
    # A link to the directory itself leads nowhere outside: reading it says what it is.
    os.symlink(".", root / "experiments" / "self.yml")
    with pytest.raises(experiment.ExperimentError) as err:
        experiment.load_experiment("self", str(root / "experiments"))
    assert "outside" not in str(err.value)
    # The experiments directory may itself be a link: what lies in it is inside.
    os.symlink(root / "experiments", tmp_path / "linked")
    assert experiment.load_experiment("mine", str(tmp_path / "linked")).name == "mine"
    for name in experiment_source.bundled_names(REPO):
        src = locate(experiment_source.BUNDLED_PREFIX + name, cwd=str(root))
        assert experiment.load_experiment_file(name, src.path).name == name
