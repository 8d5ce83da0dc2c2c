"""roles/nfs_mount: a mount point that holds files is refused before anything is installed or mounted (a mount would
hide them), through a real ``ansible-playbook`` run of the role on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def play(tmp_path, path):
    book = tmp_path / "play.yml"
    book.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "connection": "local",
                    "roles": [
                        {
                            "role": "rlinfra.verl.nfs_mount",
                            "vars": {
                                "nfs_mount_server": "127.0.0.1",
                                "nfs_mount_export": "/srv/x",
                                "nfs_mount_path": str(path),
                                "nfs_mount_packages": ["rlinfra-no-such-pkg"],
                            },
                        }
                    ],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", HOME=str(tmp_path))
    proc = subprocess.run(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            "localhost,",
            "-e",
            "ansible_python_interpreter=" + sys.executable,
            str(book),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.returncode, " ".join((proc.stdout + proc.stderr).split())


def test_a_mount_point_holding_files_is_refused_and_left_as_it_was(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "checkpoints").mkdir()
    (data / ".notes").write_text("mine")
    (data / "lost+found").mkdir()
    rc, out = play(tmp_path, data)
    assert (
        rc != 0
        and (
            "nfs_mount: refusing to mount 127.0.0.1:/srv/x over %s: the directory is not empty (2 entries: "
            ".notes, checkpoints); nothing was changed. Move them away (a mount would hide them, not delete "
            "them), or set nfs_mount_path to an empty directory." % data
        )
        in out
    ), out[-3000:]
    assert "Install the NFS client" not in out
    assert sorted(os.listdir(data)) == [".notes", "checkpoints", "lost+found"]
