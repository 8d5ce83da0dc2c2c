"""Golden tests of the rendered Ray jobs of every shipped experiment, and of override quoting.

The fake cluster is 4 nodes x 8 GPUs; the entrypoints below are compared as exact strings (each
list is joined with single spaces). Quoting is proven twice: ``shlex.split`` (what /bin/sh does
to Ray's entrypoint) gives each override back as one argv item with the exact intended text, and
Hydra's own override parser (what verl does with that item) gives back the intended value.
"""

from __future__ import annotations

import os
import shlex

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from ansible_collections.rlinfra.verl.plugins.module_utils.common import masking
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import _experiment_quote as experiment_quote
from ansible_collections.rlinfra.verl.plugins.module_utils.verl import code_checkout, experiment, experiment_render

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPERIMENTS = os.path.join(REPO, "experiments")
FAKE_NODES = [
    {
        "node_ip": "10.0.0.%d" % i,
        "node_id": "n%d" % i,
        "is_head": i == 1,
        "resources": {"CPU": 96, "GPU": 8, "memory": 10**12},
    }
    for i in range(1, 5)
]

CODE_COMMIT = "4f0c" + "1" * 36  # the commit a code checkout names
GOLDEN = {
    "gsm8k_grpo_qwen05b": [
        "python3 -m verl.trainer.main_ppo",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "data.train_files=/data/datasets/gsm8k/train.parquet",
        "data.val_files=/data/datasets/gsm8k/test.parquet",
        "data.train_batch_size=256",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        "data.filter_overlong_prompts=true",
        "data.truncation=error",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=5",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        "trainer.critic_warmup=0",
        "\"trainer.logger=['console','wandb']\"",
        "trainer.val_before_train=false",
        "trainer.save_freq=20",
        "trainer.test_freq=5",
        "trainer.total_epochs=15",
        "trainer.project_name=verl_grpo_gsm8k",
        "trainer.experiment_name=gsm8k_grpo_qwen05b",
        "trainer.default_local_dir=/data/checkpoints/verl_grpo_gsm8k/default/gsm8k_grpo_qwen05b",
        "trainer.resume_mode=auto",
        "trainer.nnodes=4",
        "trainer.n_gpus_per_node=8",
    ],
    "gsm8k_ppo_qwen05b": [
        "python3 -m verl.trainer.main_ppo",
        "data.train_files=/data/datasets/gsm8k/train.parquet",
        "data.val_files=/data/datasets/gsm8k/test.parquet",
        "data.train_batch_size=256",
        "data.max_prompt_length=512",
        "data.max_response_length=512",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=64",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "critic.optim.lr=1e-5",
        "critic.model.path=Qwen/Qwen2.5-0.5B-Instruct",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "algorithm.kl_ctrl.kl_coef=0.001",
        "\"trainer.logger=['console']\"",
        "trainer.val_before_train=false",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
        "trainer.total_epochs=15",
        "trainer.project_name=verl_examples",
        "trainer.experiment_name=gsm8k_ppo_qwen05b",
        "trainer.default_local_dir=/data/checkpoints/verl_examples/default/gsm8k_ppo_qwen05b",
        "trainer.resume_mode=auto",
        "trainer.nnodes=4",
        "trainer.n_gpus_per_node=8",
    ],
    "math_grpo_qwen14b": [
        "python3 -m verl.trainer.main_ppo",
        "algorithm.adv_estimator=grpo",
        "algorithm.use_kl_in_reward=false",
        "data.train_files=/data/datasets/math/train.parquet",
        "data.val_files=/data/datasets/math/test.parquet",
        "data.train_batch_size=512",
        "data.max_prompt_length=1024",
        "data.max_response_length=2048",
        "data.filter_overlong_prompts=true",
        "data.truncation=error",
        "actor_rollout_ref.model.path=Qwen/Qwen2.5-14B-Instruct",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=128",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.fsdp_config.param_offload=false",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        "trainer.nnodes=4",
        "trainer.n_gpus_per_node=8",
        "trainer.critic_warmup=0",
        "\"trainer.logger=['console','wandb']\"",
        "trainer.val_before_train=false",
        "trainer.save_freq=10",
        "trainer.test_freq=10",
        "trainer.total_epochs=15",
        "trainer.project_name=verl_grpo_math",
        "trainer.experiment_name=math_grpo_qwen14b",
        "trainer.default_local_dir=/data/checkpoints/verl_grpo_math/math14b/math_grpo_qwen14b",
        "trainer.resume_mode=auto",
    ],
    "nemo_rl_grpo_math": [
        "cd /data/code/RL@%s && uv run examples/run_grpo_math.py --config examples/configs/grpo_math_1B.yaml"
        % CODE_COMMIT,
        "policy.model_name=Qwen/Qwen2.5-1.5B",
        "grpo.num_prompts_per_step=32",
        "grpo.num_generations_per_prompt=16",
        "grpo.max_num_steps=500",
        "checkpointing.enabled=true",
        "checkpointing.save_period=10",
        "logger.log_dir=/data/logs/nemo_rl_grpo_math",
        "logger.wandb_enabled=true",
        "logger.wandb.project=nemo_rl_math",
        "logger.wandb.name=grpo_math_qwen15b",
        "checkpointing.checkpoint_dir=/data/checkpoints/nemo_rl_math/default/nemo_rl_grpo_math",
        "cluster.num_nodes=4",
        "cluster.gpus_per_node=8",
    ],
    "smoke": [
        "python3 smoke_rl.py",
        "trainer.total_training_steps=30",
        "trainer.save_freq=10",
        "trainer.step_sleep_s=0",
        "\"trainer.logger=['console']\"",
        "data.num_contexts=8",
        "data.num_actions=4",
        "data.episodes_per_node=4096",
        "algorithm.lr=2.0",
        "seed=1",
        "trainer.project_name=rlinfra_smoke",
        "trainer.experiment_name=smoke",
        "trainer.default_local_dir=/data/checkpoints/rlinfra_smoke/default/smoke",
        "trainer.resume_mode=auto",
        "trainer.nnodes=4",
        "trainer.n_gpus_per_node=8",
    ],
}

SUBMISSION_IDS = {
    "gsm8k_grpo_qwen05b": "rlinfra-gsm8k_grpo_qwen05b-default",
    "gsm8k_ppo_qwen05b": "rlinfra-gsm8k_ppo_qwen05b-default",
    "math_grpo_qwen14b": "rlinfra-math_grpo_qwen14b-math14b",
    "nemo_rl_grpo_math": "rlinfra-nemo_rl_grpo_math-default",
    "smoke": "rlinfra-smoke-default",
}


def load(name):
    return experiment.load_experiment(name, EXPERIMENTS)


def checked_out(exp, commit=None):
    """What rlinfra.verl.code_checkout returns for the experiment's code (None without code)."""
    if not exp.code:
        return None
    commit = commit or CODE_COMMIT
    return {
        "commit": commit,
        "dir": "/data/code/%s@%s" % (exp.code["name"], commit),
        "workdir": code_checkout.workdir("/data/code", exp.code, commit),
    }


def make(data, name="q", experiments_dir=None, **kw):
    path = os.path.join(experiments_dir or EXPERIMENTS, name + ".yml")
    return experiment.validate(name, path, data, **kw)


def test_every_shipped_experiment_has_a_golden_entrypoint():
    assert sorted(GOLDEN) == experiment.experiment_names(EXPERIMENTS)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_entrypoint(name):
    exp = load(name)
    rendered = experiment_render.render(exp, FAKE_NODES, code=checked_out(exp))
    assert rendered["entrypoint"] == " ".join(GOLDEN[name])
    assert rendered["submission_id"] == SUBMISSION_IDS[name]
    # What the program receives: the shell gives back exactly the overrides, one argv item each.
    argv = shlex.split(rendered["entrypoint"])
    assert argv[len(argv) - len(rendered["overrides"]) :] == rendered["overrides"]


def test_verl_quickstart_overrides_and_filled_keys():
    r = experiment_render.render(load("gsm8k_ppo_qwen05b"), FAKE_NODES, venv="/opt/rlinfra/venv")
    assert "trainer.logger=['console']" in r["overrides"]
    assert "actor_rollout_ref.actor.optim.lr=1e-6" in r["overrides"]
    assert r["filled"] == [
        "trainer.project_name=verl_examples",
        "trainer.experiment_name=gsm8k_ppo_qwen05b",
        "trainer.default_local_dir=/data/checkpoints/verl_examples/default/gsm8k_ppo_qwen05b",
        "trainer.resume_mode=auto",
        "trainer.nnodes=4",
        "trainer.n_gpus_per_node=8",
    ]
    assert r["checkpoint_dir"] == "/data/checkpoints/verl_examples/default/gsm8k_ppo_qwen05b"
    assert r["runtime_env"] == {
        "env_vars": {
            "PYTHONUNBUFFERED": "1",
            "HF_HOME": "/data/hf_home",
            "HF_HUB_ENABLE_HF_TRANSFER": "0",
            "PATH": "/opt/rlinfra/venv/bin:${PATH}",
        }
    }
    assert r["metadata"] == {
        "rlinfra_experiment": "gsm8k_ppo_qwen05b",
        "rlinfra_cluster": "default",
        "rlinfra_project": "verl_examples",
        "rlinfra_framework": "verl",
        "rlinfra_run": "",
        "rlinfra_checkpoint_dir": "/data/checkpoints/verl_examples/default/gsm8k_ppo_qwen05b",
        "rlinfra_attempt": "1",
        "rlinfra_nodes": "4",
    }


def test_explicit_cluster_shape_is_kept():
    r = experiment_render.render(load("math_grpo_qwen14b"), FAKE_NODES[:2])
    assert "trainer.nnodes=4" in r["overrides"] and "trainer.n_gpus_per_node=8" in r["overrides"]
    assert not any(o.startswith(("trainer.nnodes", "trainer.n_gpus_per_node")) for o in r["filled"])
    assert (r["nnodes"], r["gpus_per_node"]) == (4, 8)


def test_shape_comes_from_the_live_cluster():
    nodes = [
        dict(FAKE_NODES[0], resources={"CPU": 64, "GPU": 4}),
        dict(FAKE_NODES[1], resources={"CPU": 64, "GPU": 4}),
        dict(FAKE_NODES[2], resources={"CPU": 8}),
    ]  # a CPU-only node does not count
    r = experiment_render.render(load("gsm8k_grpo_qwen05b"), nodes)
    assert r["filled"][-2:] == ["trainer.nnodes=2", "trainer.n_gpus_per_node=4"]
    cpu_only = experiment_render.render(load("smoke"), [dict(n, resources={"CPU": 2}) for n in FAKE_NODES[:3]])
    assert cpu_only["filled"][-2:] == ["trainer.nnodes=3", "trainer.n_gpus_per_node=0"]


def test_nemo_rl_fills_its_own_keys_and_runs_in_its_code():
    exp = load("nemo_rl_grpo_math")
    r = experiment_render.render(exp, FAKE_NODES, code=checked_out(exp))
    assert r["filled"] == [
        "checkpointing.checkpoint_dir=/data/checkpoints/nemo_rl_math/default/nemo_rl_grpo_math",
        "cluster.num_nodes=4",
        "cluster.gpus_per_node=8",
    ]
    assert shlex.split(r["entrypoint"])[:4] == ["cd", "/data/code/RL@" + CODE_COMMIT, "&&", "uv"]
    assert r["metadata"]["rlinfra_code"] == "https://github.com/NVIDIA-NeMo/RL.git@" + CODE_COMMIT
    assert r["code"] == {
        "repo": "https://github.com/NVIDIA-NeMo/RL.git",
        "ref": "main",
        "commit": CODE_COMMIT,
        "workdir": "/data/code/RL@" + CODE_COMMIT,
    }
    # A dry run does not resolve the ref: the directory says which commit it will be.
    dry = experiment_render.render(exp, FAKE_NODES)
    assert (
        shlex.split(dry["entrypoint"])[:2] == ["cd", "/data/code/RL@<commit of main>"] and dry["code"]["commit"] is None
    )


def test_code_path_and_other_frameworks_run_in_the_checkout():
    exp = make(
        {
            "framework": "custom",
            "entrypoint": {"command": "python3 train.py"},
            "secrets": ["HF_TOKEN"],
            "code": {"repo": "git@github.com:org/trainer.git", "ref": "v1.2", "path": "src/app", "submodules": False},
        }
    )
    assert exp.code == {
        "repo": "git@github.com:org/trainer.git",
        "ref": "v1.2",
        "submodules": False,
        "path": "src/app",
        "name": "trainer",
        "token_secret": None,
        "ssh_key_secret": None,
    }
    r = experiment_render.render(
        exp, FAKE_NODES, code=checked_out(exp), secret_names_present=["HF_TOKEN"], secrets_dir="/data/s"
    )
    head = "cd /data/code/trainer@%s/src/app && python3 train.py" % CODE_COMMIT
    assert r["entrypoint"].endswith(head) and r["entrypoint"].startswith("set -a;")
    # A recovery renders the job again from its template: still in the checkout.
    assert experiment_render.reshape(r["job_template"], FAKE_NODES[:1])[0] == r["entrypoint"]
    round_trip = experiment.Experiment.from_summary(exp.summary())
    assert round_trip.code == exp.code


def test_submission_id_is_deterministic_with_run_suffix_and_cluster():
    exp = load("smoke")
    assert (
        experiment_render.render(exp, FAKE_NODES)["submission_id"]
        == experiment_render.render(exp, FAKE_NODES[:1])["submission_id"]
    )
    assert experiment_render.render(exp, FAKE_NODES, run="2")["submission_id"] == "rlinfra-smoke-default-2"
    assert (
        experiment_render.render(exp, FAKE_NODES, cluster="gpu2", run="retry.3")["submission_id"]
        == "rlinfra-smoke-gpu2-retry.3"
    )
    with pytest.raises(experiment.ExperimentError, match="invalid run suffix"):
        experiment_render.submission_id("smoke", "default", "2; rm -rf /")


def test_checkpoint_root_and_extra_params():
    exp = experiment.load_experiment(
        "smoke", EXPERIMENTS, extra_params={"trainer": {"total_training_steps": 5, "new_key": "x"}}
    )
    r = experiment_render.render(exp, FAKE_NODES[:1], checkpoint_root="/tmp/ck/")
    assert "trainer.total_training_steps=5" in r["overrides"]  # replaced in place
    assert r["overrides"].index("trainer.total_training_steps=5") == 0
    assert "trainer.new_key=x" in r["overrides"]
    assert "trainer.default_local_dir=/tmp/ck/rlinfra_smoke/default/smoke" in r["overrides"]


def test_secrets_are_masked_in_display_and_absent_from_runtime_env():
    exp = make(
        {
            "framework": "custom",
            "entrypoint": {"command": "python3 x.py"},
            "secrets": ["WANDB_API_KEY"],
            "optional_secrets": ["HF_TOKEN"],
            "env": {"A": 1},
        }
    )
    r = experiment_render.render(exp, FAKE_NODES[:1], secret_names_present=["WANDB_API_KEY"])
    assert r["runtime_env"]["env_vars"] == {"PYTHONUNBUFFERED": "1", "A": "1"}
    assert r["runtime_env_display"]["env_vars"] == {"PYTHONUNBUFFERED": "1", "A": "1", "WANDB_API_KEY": "********"}
    assert "WANDB" not in r["entrypoint"]
    assert masking.mask_values("key=abc123 and abc123x", ["abc123", ""]) == "key=******** and ********x"


# Quoting ------------------------------------------------------------------------------------

PARSER = OverridesParser.create()

QUOTING = [
    # (value in the YAML, the exact argv item the program must receive)
    (["console", "wandb"], "k=['console','wandb']"),
    ([1, 2.5, True, None, "a b"], "k=[1,2.5,true,null,'a b']"),
    ([{"a": 1, "b": "x y"}], "k=[{a:1,b:'x y'}]"),
    ({}, "k={}"),
    ([], "k=[]"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "k=Qwen/Qwen2.5-0.5B-Instruct"),
    ("my run 1", "k='my run 1'"),
    ("it's", "k='it\\'s'"),
    ('say "hi"', "k='say \"hi\"'"),
    ("cost $HOME ${PATH}", "k='cost $HOME ${PATH}'"),
    ("a;b && rm -rf /", "k='a;b && rm -rf /'"),
    ("`id` $(id)", "k='`id` $(id)'"),
    ("back\\slash", "k='back\\slash'"),
    ("trailing\\", "k='trailing\\\\'"),
    ("quote\\'s", "k='quote\\\\\\'s'"),
    ("50%", "k=50%"),
    ("~/data", "k='~/data'"),
    ("tab\there", "k='tab\there'"),
    ("line\nbreak", "k='line\nbreak'"),
    ("a=b,c", "k='a=b,c'"),
    ("", "k=''"),
    ("wow!", "k='wow!'"),
    ("it's $5!", "k='it\\'s $5!'"),
    (None, "k=null"),
    (False, "k=false"),
    (0.001, "k=0.001"),
]


@pytest.mark.parametrize("value, item", QUOTING, ids=[repr(v)[:30] for v, _ in QUOTING])
def test_override_survives_shell_and_hydra(value, item):
    exp = make({"framework": "custom", "entrypoint": {"command": "python3 prog.py"}, "params": {"k": value}})
    r = experiment_render.render(exp, FAKE_NODES[:1])
    assert r["overrides"] == [item]
    argv = shlex.split(r["entrypoint"])
    assert argv == ["python3", "prog.py", item]
    parsed = PARSER.parse_override(argv[2]).value()
    assert parsed == value and type(parsed) is type(value)


def test_numbers_written_like_yaml_floats_stay_numbers_for_hydra():
    # PyYAML reads 1e-6 as a string: it is passed bare, so Hydra (and verl) read a float, as on a command line.
    exp = make({"framework": "custom", "entrypoint": {"command": "p"}, "params": {"lr": "1e-6"}})
    item = shlex.split(experiment_render.render(exp, FAKE_NODES[:1])["entrypoint"])[1]
    assert item == "lr=1e-6"
    assert PARSER.parse_override(item).value() == 1e-6


def test_hydra_prefixes_and_flat_keys():
    exp = make(
        {
            "framework": "custom",
            "entrypoint": {"command": "p"},
            "params": {"+trainer.extra": "x y", "~trainer.old": None, "trainer": {"a.b": 1}},
        }
    )
    r = experiment_render.render(exp, FAKE_NODES[:1])
    assert r["overrides"] == ["+trainer.extra='x y'", "~trainer.old", "trainer.a.b=1"]
    assert [o.key_or_group for o in PARSER.parse_overrides(shlex.split(r["entrypoint"])[1:])] == [
        "trainer.extra",
        "trainer.old",
        "trainer.a.b",
    ]


@pytest.mark.parametrize("text", ["plain", "a b", "it's", 'q"x', "$x", "`x`", "\\", "!", "it's!", "", "\n"])
def test_shell_quote_roundtrip(text):
    assert shlex.split("x " + experiment_quote.shell_quote(text)) == ["x", text]


def test_a_resume_by_path_replaces_the_experiments_resume_keys():
    template = {
        "head": "python3 -m verl.trainer.main_ppo",
        "shape_keys": ["trainer.nnodes", "trainer.n_gpus_per_node"],
        "filled": [True, True],
        "pairs": [["trainer.resume_mode", "auto"], ["trainer.nnodes", 2], ["trainer.n_gpus_per_node", 8]],
    }
    by_path = experiment_render.reshape(template, resume_from="/ckpt/run/global_step_4")[0]
    assert shlex.split(by_path) == [
        "python3",
        "-m",
        "verl.trainer.main_ppo",
        "trainer.nnodes=2",
        "trainer.n_gpus_per_node=8",
        "trainer.resume_mode=resume_path",
        "trainer.resume_from_path=/ckpt/run/global_step_4",
    ]
    assert shlex.split(experiment_render.reshape(template, resume_from="")[0])[-1] == "trainer.resume_mode=disable"
    assert "trainer.resume_mode=auto" in experiment_render.reshape(template)[0]


# recovery.deadline: the run is told when its machines end --------------------------------------------------

NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def with_deadline(name, deadline, margin=None, **params):
    data = experiment.read_yaml(os.path.join(EXPERIMENTS, name + ".yml"), name)
    data["recovery"] = dict(
        data.get("recovery") or {}, deadline=deadline, **({} if margin is None else {"deadline_margin": margin})
    )
    for key, value in params.items():
        section, leaf = key.split("__")
        data["params"].setdefault(section, {})[leaf] = value
    return make(data, name=name)


def test_a_deadline_tells_verl_when_the_machines_end():
    import datetime

    # YAML's own timestamp (unquoted in the file) is kept as UTC text
    exp = with_deadline(
        "gsm8k_ppo_qwen05b",
        datetime.datetime(2027, 1, 15, 10, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        trainer__save_freq=10,
    )
    assert exp.recovery["deadline"] == "2027-01-15T08:00:00Z"
    exp = with_deadline("gsm8k_ppo_qwen05b", "2027-01-15T12:00:00Z", trainer__save_freq=10)
    r = experiment_render.render(exp, FAKE_NODES, now=NOW)
    assert r["runtime_env"]["env_vars"]["MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"] == "%d" % (NOW + 4 * 3600)
    assert "trainer.esi_redundant_time=600" in r["filled"]  # verl's margin on top of its save and one step
    mine = with_deadline(
        "gsm8k_ppo_qwen05b", "2027-01-15T12:00:00Z", trainer__save_freq=10, trainer__esi_redundant_time=60
    )
    assert not any(
        o.startswith("trainer.esi_redundant_time")
        for o in experiment_render.render(mine, FAKE_NODES, now=NOW)["filled"]
    )
    # without a deadline: neither
    plain = experiment_render.render(load("gsm8k_ppo_qwen05b"), FAKE_NODES, now=NOW)
    assert "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP" not in plain["runtime_env"]["env_vars"]
    assert not any("esi_redundant_time" in o for o in plain["filled"])


def test_a_deadline_margin_set_to_null_keeps_its_default():
    exp = with_deadline("gsm8k_ppo_qwen05b", "2027-01-15T12:00:00Z", trainer__save_freq=10)
    exp.raw["recovery"]["deadline_margin"] = None
    null = make(dict(exp.raw), name="gsm8k_ppo_qwen05b")
    assert null.recovery["deadline_margin"] == 600
    assert "trainer.esi_redundant_time=600" in experiment_render.render(null, FAKE_NODES, now=NOW)["filled"]


def test_a_deadline_verl_would_never_save_before_is_refused():
    with pytest.raises(experiment.ExperimentError) as e:
        with_deadline("gsm8k_ppo_qwen05b", "2027-01-15T12:00:00Z", trainer__save_freq=-1)
    assert str(e.value) == (
        "gsm8k_ppo_qwen05b.yml: recovery.deadline needs params.trainer.save_freq above 0: verl saves "
        "before the deadline only when it saves checkpoints at all (got -1)"
    )


def test_a_deadline_within_its_margin_refuses_the_submit_in_one_line():
    exp = with_deadline("gsm8k_ppo_qwen05b", "2027-01-15T08:05:00Z", trainer__save_freq=10)
    with pytest.raises(experiment.ExperimentError) as e:
        experiment_render.render(exp, FAKE_NODES, now=NOW)
    assert str(e.value) == (
        "gsm8k_ppo_qwen05b.yml: recovery.deadline 2027-01-15T08:05:00Z is 300 s away, within recovery.deadline_margin "
        "(600 s): the run could not save before it; set a later deadline (when the machines really end) or a smaller "
        "deadline_margin; nothing was submitted"
    )
    assert (
        experiment_render.render(
            with_deadline("gsm8k_ppo_qwen05b", "2027-01-15T08:05:00Z", 60, trainer__save_freq=10), FAKE_NODES, now=NOW
        )["filled"][-1]
        == "trainer.esi_redundant_time=60"
    )


def test_nemo_rl_saves_by_a_time_counted_from_each_attempt():
    exp = with_deadline("nemo_rl_grpo_math", "2027-01-16T10:30:00Z", 900)
    r = experiment_render.render(exp, FAKE_NODES, code=checked_out(exp), now=NOW)
    # 1 d 2 h 30 min away, less the 15 min margin
    assert "checkpointing.checkpoint_must_save_by=01:02:15:00" in r["filled"]
    assert "checkpointing.checkpoint_must_save_by=01:02:15:00" in shlex.split(r["entrypoint"])
    # the next attempt, 2 h 10 min later: counted again from its own start
    entry, dummy, dummy = experiment_render.reshape(r["job_template"], FAKE_NODES, now=NOW + 7800)
    assert "checkpointing.checkpoint_must_save_by=01:00:05:00" in shlex.split(entry)
    assert experiment_render.save_by(NOW + 100, 900, NOW) == "00:00:00:01"
