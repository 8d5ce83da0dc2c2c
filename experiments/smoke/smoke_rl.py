# Copyright: rlinfra maintainers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""CPU-only distributed RL smoke test for a Ray cluster: standard library + ray, nothing else.

REINFORCE with a per-context baseline on a softmax policy over a small contextual bandit.
One rollout actor per alive node (pinned there with a hard NodeAffinitySchedulingStrategy)
samples episodes with the current policy and returns its share of the policy gradient; the
learner (this driver) averages them and takes a step. The policy is evaluated before and after
on a fixed-seed set of contexts (exact expected reward, so the comparison has no sampling noise).

It behaves like a verl trainer where the infrastructure can see it:

* parameters are Hydra-style overrides on the command line (``trainer.total_training_steps=30``);
  an unknown key fails at once, like Hydra;
* each step prints ``step:N - reward/mean:0.412 - pg_loss:-0.031 - ...``;
* checkpoints use verl's layout: ``<trainer.default_local_dir>/global_step_N/policy.json``, one
  ``actor/model_world_size_W_rank_R.pt`` marker per rank (W = the rollout nodes, like verl's FSDP
  shards name the world size that wrote them) and ``latest_checkpointed_iteration.txt`` (written
  atomically, after the step directory is complete);
* ``trainer.resume_mode=auto`` resumes from the latest checkpoint, ``disable`` starts over,
  ``resume_path`` loads ``trainer.resume_from_path``;
* a deadline in ``MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`` (epoch seconds) forces a save once the time
  left is at most 60 s (its save) + the longest step so far + ``trainer.esi_redundant_time``, as verl's
  ``should_save_ckpt_esi`` does (with ``trainer.save_freq`` above 0 only), printing verl's line;
* the last line is ``SMOKE_RESULT {json}`` naming every node that did rollouts and the reward
  before and after.

If HF_TOKEN is set, only its sha256 is printed (by the driver and by each rollout actor), which
proves that a secret reached the job through runtime_env without ever showing it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import random
import socket
import sys
import time

DEFAULTS = {
    "trainer.total_training_steps": 30,
    "trainer.save_freq": 10,
    "trainer.default_local_dir": "checkpoints/${trainer.project_name}/${trainer.experiment_name}",
    "trainer.project_name": "rlinfra_smoke",
    "trainer.experiment_name": "smoke",
    "trainer.resume_mode": "auto",
    "trainer.resume_from_path": None,
    "trainer.nnodes": 0,  # wait until at least this many nodes are alive (0: use whatever is there)
    "trainer.n_gpus_per_node": 0,  # accepted for verl compatibility; this program uses no GPU
    "trainer.logger": ["console"],
    "trainer.step_sleep_s": 0.0,  # per-step sleep, to make a run long enough to stop mid-way
    "trainer.max_ckpt_to_keep": None,
    "trainer.esi_redundant_time": 0,  # verl's margin before a capacity block's end (see should_save_esi)
    "trainer.node_wait_timeout_s": 120,
    # Fault injection for the watchdog's tests: after printing this step, a run that did not resume
    # from a checkpoint stops printing steps and hangs, like a verl run stuck in an NCCL collective.
    "trainer.stall_at_step": None,
    "data.num_contexts": 8,
    "data.num_actions": 4,
    "data.episodes_per_node": 4096,  # per rollout actor and step
    "data.eval_contexts": 4000,
    "algorithm.lr": 2.0,
    "algorithm.entropy_coeff": 0.0,
    "rollout.num_cpus": 0.0,  # CPUs each rollout actor reserves (0: never blocked by a busy cluster)
    "seed": 1,
}


class ConfigError(Exception):
    pass


def should_save_esi(max_steps_duration, redundant_time, save_ckpt_duration=60):
    """verl's ``should_save_ckpt_esi`` (verl/utils/checkpoint/checkpoint_manager.py) for the MLP variable."""
    expiration = os.getenv("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP")
    if not expiration:
        return False
    try:
        remaining = float(expiration) - time.time()
    except ValueError:
        return False
    return remaining > 0 and max_steps_duration > 0 and remaining <= save_ckpt_duration + max_steps_duration + redundant_time


def parse_value(text):
    """A Hydra-like reading of an override value: null, bools, numbers, quoted strings, lists."""
    raw = text.strip()
    low = raw.lower()
    if low in ("null", "none", "~"):
        return None
    if low in ("true", "false"):
        return low == "true"
    if raw[:1] in ("'", '"', "[", "{"):
        try:
            return ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            pass
        try:  # Hydra spells the constants true/false/null
            import re

            return ast.literal_eval(re.sub(r"\b(true|false|null)\b",
                                           lambda m: {"true": "True", "false": "False", "null": "None"}[m.group(1)], raw))
        except (ValueError, SyntaxError) as e:
            raise ConfigError("cannot parse value %r: %s" % (text, e))
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def parse_overrides(argv):
    cfg = dict(DEFAULTS)
    for arg in argv:
        if "=" not in arg:
            raise ConfigError("expected key=value, got %r" % arg)
        key, value = arg.split("=", 1)
        key = key.lstrip("+")
        if key not in cfg:
            close = [k for k in cfg if k.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1] or k.startswith(key)]
            raise ConfigError("Could not override '%s': no such key%s" % (
                key, " (did you mean '%s'?)" % close[0] if close else ""))
        cfg[key] = parse_value(value)
    # The one interpolation this program needs, verl style.
    for key in ("trainer.default_local_dir",):
        value = str(cfg[key])
        for ref in ("trainer.project_name", "trainer.experiment_name"):
            value = value.replace("${%s}" % ref, str(cfg[ref]))
        cfg[key] = value
    if cfg["trainer.resume_mode"] not in ("auto", "disable", "resume_path"):
        raise ConfigError("trainer.resume_mode must be auto, disable or resume_path, got %r" % cfg["trainer.resume_mode"])
    for key in ("trainer.total_training_steps", "data.num_contexts", "data.num_actions", "data.episodes_per_node"):
        if not isinstance(cfg[key], int) or cfg[key] < 1:
            raise ConfigError("%s must be a positive integer, got %r" % (key, cfg[key]))
    return cfg


# ------------------------------------------------------------------------------------------
# The environment and the policy (pure Python)
# ------------------------------------------------------------------------------------------

def make_bandit(num_contexts, num_actions, seed):
    """Success probability of each action in each context; one clearly best action per context."""
    rng = random.Random(seed * 7919 + 17)
    probs = []
    for dummy in range(num_contexts):
        row = [rng.uniform(0.05, 0.55) for dummy in range(num_actions)]
        row[rng.randrange(num_actions)] = rng.uniform(0.75, 0.95)
        probs.append(row)
    return probs


def softmax(row):
    top = max(row)
    exps = [math.exp(x - top) for x in row]
    total = sum(exps)
    return [e / total for e in exps]


def evaluate(logits, probs, contexts):
    """Exact expected reward of the greedy-free stochastic policy on a fixed set of contexts."""
    policy = [softmax(row) for row in logits]
    return sum(sum(p * r for p, r in zip(policy[c], probs[c])) for c in contexts) / len(contexts)


class Rollout:
    """Samples episodes on one node and returns that node's share of the REINFORCE gradient."""

    def __init__(self, index, probs):
        self.index = index
        self.probs = probs
        self.node_ip = _node_ip()
        self.hostname = socket.gethostname()

    def info(self):
        token = os.environ.get("HF_TOKEN")
        return {"index": self.index, "node_ip": self.node_ip, "hostname": self.hostname, "pid": os.getpid(),
                "hf_token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None}

    def rollout(self, logits, baseline, step, episodes, seed):
        rng = random.Random(hash((seed, step, self.index)) & 0xFFFFFFFF)
        n_ctx, n_act = len(logits), len(logits[0])
        policy = [softmax(row) for row in logits]
        grad = [[0.0] * n_act for dummy in range(n_ctx)]
        reward_sum = reward_ctx = loss = 0.0
        ctx_reward = [0.0] * n_ctx
        ctx_count = [0] * n_ctx
        started = time.time()
        for dummy in range(episodes):
            c = rng.randrange(n_ctx)
            pi = policy[c]
            a = rng.choices(range(n_act), weights=pi)[0]
            r = 1.0 if rng.random() < self.probs[c][a] else 0.0
            adv = r - baseline[c]
            g = grad[c]
            for j in range(n_act):  # d log pi(a|c) / d logits[c][j] = 1[j == a] - pi[j]
                g[j] += adv * ((1.0 if j == a else 0.0) - pi[j])
            loss -= adv * math.log(max(pi[a], 1e-12))
            reward_sum += r
            ctx_reward[c] += r
            ctx_count[c] += 1
        return {"node_ip": self.node_ip, "grad": grad, "reward_sum": reward_sum, "loss_sum": loss,
                "episodes": episodes, "ctx_reward": ctx_reward, "ctx_count": ctx_count,
                "seconds": time.time() - started}


def _node_ip():
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:
        return socket.gethostbyname(socket.gethostname())


# ------------------------------------------------------------------------------------------
# Checkpoints, verl layout
# ------------------------------------------------------------------------------------------

def latest_step(ckpt_dir):
    path = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def save_checkpoint(ckpt_dir, step, state, keep=None, world_size=1):
    os.makedirs(ckpt_dir, exist_ok=True)
    final = os.path.join(ckpt_dir, "global_step_%d" % step)
    tmp = "%s.tmp-%d" % (final, os.getpid())
    os.makedirs(os.path.join(tmp, "actor"), exist_ok=True)
    with open(os.path.join(tmp, "policy.json"), "w") as f:
        json.dump(state, f)
        f.flush()
        os.fsync(f.fileno())
    for rank in range(world_size):
        with open(os.path.join(tmp, "actor", "model_world_size_%d_rank_%d.pt" % (world_size, rank)), "w") as f:
            f.write('{"rank": %d, "step": %d}\n' % (rank, step))
    if os.path.isdir(final):  # a re-run of the same step: replace it whole
        old = final + ".old-%d" % os.getpid()
        os.replace(final, old)
        os.replace(tmp, final)
        _rmtree(old)
    else:
        os.replace(tmp, final)
    # Only now that global_step_N is complete does the tracker point at it.
    tracker = os.path.join(ckpt_dir, "latest_checkpointed_iteration.txt")
    with open(tracker + ".tmp", "w") as f:
        f.write(str(step))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tracker + ".tmp", tracker)
    if keep:
        steps = sorted(int(d.split("_")[-1]) for d in os.listdir(ckpt_dir)
                       if d.startswith("global_step_") and d.split("_")[-1].isdigit())
        for old_step in steps[:-keep]:
            _rmtree(os.path.join(ckpt_dir, "global_step_%d" % old_step))
    return final


def load_checkpoint(path):
    with open(os.path.join(path, "policy.json")) as f:
        return json.load(f)


def _rmtree(path):
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
        for name in dirs:
            os.rmdir(os.path.join(root, name))
    os.rmdir(path)


# ------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------

def fmt(x):
    return "%.4f" % x if isinstance(x, float) else str(x)


def progress_line(step, metrics):
    return " - ".join(["step:%d" % step] + ["%s:%s" % (k, fmt(v)) for k, v in metrics.items()])


def alive_nodes(ray):
    return [n for n in ray.nodes() if n.get("Alive")]


def main(argv):
    try:
        cfg = parse_overrides(argv)
    except ConfigError as e:
        print("smoke_rl: configuration error: %s" % e, file=sys.stderr)
        return 2

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    started = time.time()
    ray.init(logging_level="WARNING", log_to_driver=True)
    token = os.environ.get("HF_TOKEN")
    print("smoke_rl: HF_TOKEN %s" % ("sha256:" + hashlib.sha256(token.encode()).hexdigest() if token else "not set"),
          flush=True)

    want = int(cfg["trainer.nnodes"] or 0)
    deadline = time.time() + float(cfg["trainer.node_wait_timeout_s"])
    nodes = alive_nodes(ray)
    while len(nodes) < want and time.time() < deadline:
        time.sleep(1)
        nodes = alive_nodes(ray)
    if len(nodes) < want:
        print("smoke_rl: only %d of trainer.nnodes=%d nodes are alive after %ss" % (
            len(nodes), want, cfg["trainer.node_wait_timeout_s"]), file=sys.stderr)
        return 3
    nodes = sorted(nodes, key=lambda n: (n.get("NodeManagerAddress") or "", n["NodeID"]))
    print("smoke_rl: %d alive node(s): %s" % (len(nodes), ", ".join(n.get("NodeManagerAddress", "?") for n in nodes)),
          flush=True)

    seed = int(cfg["seed"])
    n_ctx, n_act = cfg["data.num_contexts"], cfg["data.num_actions"]
    probs = make_bandit(n_ctx, n_act, seed)
    eval_rng = random.Random(seed * 104729 + 3)
    eval_contexts = [eval_rng.randrange(n_ctx) for dummy in range(int(cfg["data.eval_contexts"]))]
    best = sum(max(probs[c]) for c in eval_contexts) / len(eval_contexts)

    logits = [[0.0] * n_act for dummy in range(n_ctx)]
    baseline = [0.5] * n_ctx
    start_step = 0
    resumed_from = None
    ckpt_dir = cfg["trainer.default_local_dir"]
    mode = cfg["trainer.resume_mode"]
    resume_path = None
    if mode == "auto":
        step = latest_step(ckpt_dir)
        if step is not None:
            resume_path = os.path.join(ckpt_dir, "global_step_%d" % step)
    elif mode == "resume_path":
        resume_path = cfg["trainer.resume_from_path"]
        if not resume_path:
            print("smoke_rl: trainer.resume_mode=resume_path needs trainer.resume_from_path", file=sys.stderr)
            return 2
    if resume_path:
        state = load_checkpoint(resume_path)
        if len(state["logits"]) != n_ctx or len(state["logits"][0]) != n_act:
            print("smoke_rl: checkpoint %s has another shape than data.num_contexts x data.num_actions" % resume_path,
                  file=sys.stderr)
            return 2
        logits, baseline, start_step = state["logits"], state["baseline"], int(state["step"])
        resumed_from = start_step
        print("smoke_rl: resumed from %s (step %d)" % (resume_path, start_step), flush=True)
    else:
        print("smoke_rl: starting from scratch; checkpoints go to %s" % ckpt_dir, flush=True)

    initial = evaluate([[0.0] * n_act for dummy in range(n_ctx)], probs, eval_contexts)
    reward_before = evaluate(logits, probs, eval_contexts)
    print("smoke_rl: eval reward before: %.4f (uniform policy %.4f, best possible %.4f)"
          % (reward_before, initial, best), flush=True)

    remote_cls = ray.remote(Rollout)
    actors = [
        remote_cls.options(num_cpus=float(cfg["rollout.num_cpus"]),
                           scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False))
        .remote(i, probs)
        for i, n in enumerate(nodes)
    ]
    infos = ray.get([a.info.remote() for a in actors])
    for info in infos:
        print("smoke_rl: rollout actor %d on node %s (%s, pid %d)%s" % (
            info["index"], info["node_ip"], info["hostname"], info["pid"],
            ", HF_TOKEN sha256:%s" % info["hf_token_sha256"] if info["hf_token_sha256"] else ""), flush=True)

    total = int(cfg["trainer.total_training_steps"])
    save_freq = int(cfg["trainer.save_freq"] or 0)
    episodes = int(cfg["data.episodes_per_node"])
    lr = float(cfg["algorithm.lr"])
    ent_coef = float(cfg["algorithm.entropy_coeff"])
    sleep_s = float(cfg["trainer.step_sleep_s"] or 0)
    last_saved = None
    max_step_s = 0.0
    step = start_step
    rollout_ips = set()
    for step in range(start_step + 1, total + 1):
        t0 = time.time()
        results = ray.get([a.rollout.remote(logits, baseline, step, episodes, seed) for a in actors])
        t_gen = time.time() - t0
        n = sum(r["episodes"] for r in results)
        reward_mean = sum(r["reward_sum"] for r in results) / n
        pg_loss = sum(r["loss_sum"] for r in results) / n
        entropy = 0.0
        for c in range(n_ctx):
            pi = softmax(logits[c])
            entropy -= sum(p * math.log(max(p, 1e-12)) for p in pi) / n_ctx
            for j in range(n_act):
                g = sum(r["grad"][c][j] for r in results) / n
                if ent_coef:  # gradient of the mean entropy wrt logits[c][j]
                    h = -sum(p * math.log(max(p, 1e-12)) for p in pi)
                    g += ent_coef * -pi[j] * (math.log(max(pi[j], 1e-12)) + h) / n_ctx
                logits[c][j] += lr * n_ctx * g
            count = sum(r["ctx_count"][c] for r in results)
            if count:
                baseline[c] = 0.9 * baseline[c] + 0.1 * sum(r["ctx_reward"][c] for r in results) / count
        rollout_ips.update(r["node_ip"] for r in results)
        if sleep_s > 0:
            time.sleep(sleep_s)
        metrics = {"reward/mean": reward_mean, "pg_loss": pg_loss, "policy/entropy": entropy,
                   "rollout/episodes": n, "rollout/nodes": len(results), "timing_s/gen": t_gen,
                   "timing_s/step": time.time() - t0}
        max_step_s = max(max_step_s, metrics["timing_s/step"])
        esi = should_save_esi(max_step_s, float(cfg["trainer.esi_redundant_time"] or 0))
        if esi and save_freq > 0:
            print("Force saving checkpoint: ESI instance expiration approaching.", flush=True)
        if save_freq > 0 and (step % save_freq == 0 or step == total or esi):
            path = save_checkpoint(ckpt_dir, step, {"step": step, "logits": logits, "baseline": baseline, "seed": seed,
                                                    "reward_eval": evaluate(logits, probs, eval_contexts)},
                                   keep=cfg["trainer.max_ckpt_to_keep"], world_size=len(actors))
            last_saved = step
            metrics["checkpoint/saved"] = 1
        print(progress_line(step, metrics), flush=True)
        if last_saved == step:
            print("smoke_rl: saved checkpoint %s" % path, flush=True)
        if cfg["trainer.stall_at_step"] is not None and step == int(cfg["trainer.stall_at_step"]) and resumed_from is None:
            print("smoke_rl: stalling after step %d (trainer.stall_at_step)" % step, flush=True)
            while True:
                time.sleep(60)

    reward_after = evaluate(logits, probs, eval_contexts)
    print("smoke_rl: eval reward after: %.4f (before %.4f)" % (reward_after, reward_before), flush=True)
    result = {
        "rollout_nodes": sorted(rollout_ips or {i["node_ip"] for i in infos}),
        "alive_nodes": len(nodes),
        "reward_initial": round(initial, 6),
        "reward_before": round(reward_before, 6),
        "reward_after": round(reward_after, 6),
        "reward_best": round(best, 6),
        "resumed_from": resumed_from,
        "final_step": step if total > start_step else start_step,
        "last_checkpoint": latest_step(ckpt_dir),
        "checkpoint_dir": os.path.abspath(ckpt_dir),
        "hf_token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
        "hf_token_seen_by_rollouts": sum(1 for i in infos if i["hf_token_sha256"]),
        "seconds": round(time.time() - started, 2),
    }
    print("SMOKE_RESULT " + json.dumps(result, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
