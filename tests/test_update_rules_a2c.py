"""Update rules of the pixel actor-critics, pinned against references written out here.

- A2C TD(0) (:class:`pglab.algos.a2c.A2CTrainer`): one window of two env-steps on a
  scripted batch (continuing, terminated and truncated transitions), compared with a
  float64 reference loss written as a loop over environments, with the closed-form
  gradients of the two heads' biases, and with a hand-written clip + Adam step.
- Stream-AC(lambda) (:func:`pglab.algos.stream_ac.train_stream_ac`): a few transitions
  through the real trainer, replayed by a slow reference loop (per-parameter traces
  ``z <- gamma lambda z + grad``, the TD error, the ObGD step-size bound, trace resets).
- A small learning test: A2C solves a 3x3 pixel-goal board without reward shaping (the
  critic has to carry the goal bonus back); a frozen critic or a flipped policy gradient
  stays far below the threshold (checked by hand when the test was written).

Bootstrapping convention (``not_done = ~(done | trunc)``):
with same-step autoreset ``V(s')`` belongs to the *next* episode's first frame, so
neither a termination nor a truncation is bootstrapped. The references below spell this
out in ``bootstraps``; bootstrapping truncations from ``info["final_obs"]`` instead would
change that one function.
"""

import copy
import json
import math

import pytest
import torch

from pglab.algos.a2c import A2CTrainConfig, A2CTrainer
from pglab.algos.a2c_common import LOG_NAME, build_env, evaluate_policy
from pglab.algos.stream_ac import build_network, train_stream_ac
from pglab.configs.a2c import PixelGoalConfig
from pglab.envs.pixel_goal import PixelGoalEnv
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.seeding import seed_everything

CPU = torch.device("cpu")


def bootstraps(done: bool, trunc: bool) -> bool:
    """Whether V(s') enters the TD target (see the module docstring)."""
    return not (done or trunc)


# -- A2C TD(0) ---------------------------------------------------------------------------
NUM_ENVS = 6
# (done, trunc) per env for the window's two env-steps: continuing, terminated and
# truncated transitions in both steps, and a truncation right after a termination.
FLAGS = (
    ((False, False), (True, False), (False, True), (False, False), (True, False), (False, False)),
    ((False, True), (False, False), (False, False), (True, False), (False, False), (False, True)),
)


def scripted_a2c_trainer():
    """A trainer whose env replays FLAGS with fixed rewards and frames; returns the
    trainer, the record of the transitions it saw and its initial weights."""
    config = A2CTrainConfig(
        num_envs=NUM_ENVS,
        update_every=2,
        total_env_steps=2 * NUM_ENVS,
        device="cpu",
        hidden=16,
        pixel_goal=PixelGoalConfig(grid_size=2),
        gamma=0.8,
        value_coef=0.7,
        entropy_coef=0.05,
        lr=1e-3,
        grad_clip=0.3,
        seed=0,
    )
    torch.manual_seed(0)
    trainer = A2CTrainer(config, device=CPU)
    with torch.no_grad():  # a clearly non-uniform policy, so the entropy gradient is not ~0
        trainer.model.policy_head.weight.mul_(100.0)
        trainer.model.policy_head.bias.copy_(torch.tensor([1.0, -0.5, 0.3, 0.0, -1.0]))
    frames = torch.Generator().manual_seed(1)
    shape = (NUM_ENVS, *trainer.env.observation_shape)
    trainer.obs.value = torch.randint(0, 256, shape, generator=frames, dtype=torch.uint8)
    script = [
        (
            torch.randint(0, 256, shape, generator=frames, dtype=torch.uint8),
            torch.rand(NUM_ENVS, generator=frames) * 2 - 1,
            torch.tensor([d for d, _ in flags]),
            torch.tensor([t for _, t in flags]),
            torch.randint(0, 256, shape, generator=frames, dtype=torch.uint8),
        )  # pre-reset frames: unused
        for flags in FLAGS
    ]
    seen = []

    def step(actions):
        next_obs, reward, done, trunc, final_obs = script[len(seen)]
        seen.append((trainer.obs.value.clone(), actions.clone(), next_obs, reward, done, trunc))
        info = {"final_obs": final_obs, "success": done.clone()}  # as PixelGoalEnv, which defines success
        return next_obs.clone(), reward.clone(), done.clone(), trunc.clone(), info

    trainer.env.step = step
    return trainer, seen, copy.deepcopy(trainer.model)


def reference_window(model, seen, config):
    """The window's loss in float64, one environment at a time, plus the closed-form
    gradients of the policy-head and value-head biases; returns
    ``(loss, bias_grads, logged)`` (``logged``: the window means the trainer logs)."""
    ref = copy.deepcopy(model).double()

    def forward(obs):
        features = ref.torso(obs.double() / 255.0)
        return ref.policy_head(features), ref.value_head(features).squeeze(1)

    steps = len(seen)
    total = torch.zeros((), dtype=torch.float64)
    policy_bias = torch.zeros(5, dtype=torch.float64)
    value_bias = torch.zeros((), dtype=torch.float64)
    logged = {"loss/policy": 0.0, "loss/value": 0.0, "loss/entropy": 0.0, "stats/advantage_mean": 0.0}
    for obs, actions, next_obs, reward, done, trunc in seen:
        logits, values = forward(obs)
        with torch.no_grad():
            _, next_values = forward(next_obs)
        for i in range(NUM_ENVS):
            probs = torch.softmax(logits[i], dim=0)
            log_probs = torch.log(probs)
            entropy = -(probs * log_probs).sum()
            a = int(actions[i])
            target = float(reward[i]) + (
                config.gamma * float(next_values[i]) if bootstraps(bool(done[i]), bool(trunc[i])) else 0.0
            )
            advantage = target - values[i].item()  # a number: no gradient through the advantage
            policy_term = -log_probs[a] * advantage
            value_term = config.value_coef * (target - values[i]) ** 2
            entropy_term = -config.entropy_coef * entropy
            total = total + (policy_term + value_term + entropy_term) / (NUM_ENVS * steps)
            # d/dz_j [-log p_a adv] = -(1[j=a] - p_j) adv;  d/dz_j [-c H] = c p_j (log p_j + H)
            p, lp = probs.detach(), log_probs.detach()
            onehot = torch.nn.functional.one_hot(torch.tensor(a), 5).double()
            policy_bias += (-(onehot - p) * advantage + config.entropy_coef * p * (lp + entropy.detach())) / (
                NUM_ENVS * steps
            )
            value_bias += 2 * config.value_coef * (values[i].item() - target) / (NUM_ENVS * steps)
            for name, term in (
                ("loss/policy", policy_term),
                ("loss/value", value_term),
                ("loss/entropy", entropy_term),
            ):
                logged[name] += term.item() / (NUM_ENVS * steps)
            logged["stats/advantage_mean"] += advantage / (NUM_ENVS * steps)
    grads = torch.autograd.grad(total, list(ref.parameters()))
    return grads, (policy_bias, value_bias), logged


def test_a2c_td0_window_matches_the_reference_gradient_and_adam_step():
    trainer, seen, initial = scripted_a2c_trainer()
    config = trainer.config
    trainer.env_step(None, last_in_window=False)  # (reuses its bootstrap forward as step 2's forward)
    trainer.env_step(None, last_in_window=True)
    assert len(seen) == 2
    grads, (policy_bias, value_bias), logged = reference_window(initial, seen, config)
    names = [name for name, _ in trainer.model.named_parameters()]
    got = {name: p.grad.double() for name, p in trainer.model.named_parameters()}
    # the heads' biases against the hand-derived gradient (not autograd)
    torch.testing.assert_close(got["policy_head.bias"], policy_bias, rtol=1e-4, atol=1e-7)
    torch.testing.assert_close(got["value_head.bias"], value_bias.view(1), rtol=1e-4, atol=1e-7)
    # every parameter, torso included, against the float64 reference loss
    for name, ref in zip(names, grads, strict=False):
        torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-7, msg=name)
    summary = trainer.stats.summary()
    for key, value in logged.items():
        assert summary[key] == pytest.approx(value, rel=1e-4, abs=1e-7), key

    # optimizer_step: clip to grad_clip by the global norm, then Adam's first step,
    # p -= lr * m_hat / (sqrt(v_hat) + eps) with m_hat = g, v_hat = g^2
    norm = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
    assert norm > config.grad_clip  # the clip is active
    grad_norm = trainer.optimizer_step()
    assert float(grad_norm) == pytest.approx(norm, rel=1e-5)
    scale = min(1.0, config.grad_clip / (norm + 1e-6))
    for (name, after), before, grad in zip(trainer.model.named_parameters(), initial.parameters(), grads, strict=False):
        clipped = grad * scale
        expected = before.detach().double() - config.lr * clipped / (clipped.abs() + config.adam_eps)
        torch.testing.assert_close(after.detach().double(), expected, rtol=0, atol=2e-7, msg=name)
    assert trainer.counters == {"env_steps": 2 * NUM_ENVS, "opt_steps": 1}
    # the next window starts from a zero gradient
    assert all(p.grad is None for p in trainer.model.parameters())


# -- stream-AC(lambda) ---------------------------------------------------------------------
def stream_config(run_dir, steps):
    return A2CTrainConfig(
        algo="stream-ac",
        num_envs=1,
        lr=1.0,
        gamma=0.9,
        trace_lambda=0.7,
        kappa_value=2.0,
        entropy_coef=0.05,
        total_env_steps=steps,
        save_interval=1000,
        hidden=8,
        threads=1,
        device="cpu",
        seed=3,
        pixel_goal=PixelGoalConfig(grid_size=2, max_steps=2),
        log_dir=run_dir,
    )


class ReferenceScaler:
    """The reference code's ScaleReward: r / sqrt(var(G) + 1e-8), the sample variance of
    every running return G so far (G = gamma G (1 - finished) + r: an episode's last step
    restarts it at r), from the stored list (variance 1 before two returns)."""

    def __init__(self, gamma):
        self.gamma, self.ret, self.history = gamma, 0.0, []

    def __call__(self, reward, finished):
        self.ret = self.gamma * self.ret * (0.0 if finished else 1.0) + reward
        self.history.append(self.ret)
        var = torch.tensor(self.history, dtype=torch.float64).var().item() if len(self.history) > 1 else 1.0
        return reward / math.sqrt(var + 1e-8)


def categorical_terms(params, action):
    """``(log pi(a|s), H(pi(.|s)))`` of a softmax policy, in float64."""
    log_probs = torch.log_softmax(params[0][0].double(), dim=0)
    return log_probs[int(action)], -(log_probs.exp() * log_probs).sum()


def reference_stream_ac(model, transitions, config, terms=categorical_terms):
    """Replay ``transitions`` with a slow ObGD(lambda) loop; returns the final model,
    the traces (actor, critic) and the per-step step sizes (actor, critic). ``terms(params,
    action)`` gives the policy's log-probability and entropy."""
    model = copy.deepcopy(model)
    groups = {
        "actor": (model.actor_parameters(), config.kappa_policy),
        "critic": (model.critic_parameters(), config.kappa_value),
    }
    traces = {name: [torch.zeros(p.shape, dtype=torch.float64) for p in params] for name, (params, _) in groups.items()}
    scaler = ReferenceScaler(config.gamma)
    step_sizes = []
    model.observe(transitions[0][0])
    for obs, action, next_obs, reward, done, trunc, final_obs in transitions:
        params, value = model(obs)
        finished = bool(done) or bool(trunc)
        scaled = scaler(float(reward), finished)
        if finished:  # the statistics see every observation: the episode's last, then the next
            model.observe(final_obs)
        model.observe(next_obs)
        with torch.no_grad():
            v_next = float(model(next_obs)[1])
        target = scaled + (config.gamma * v_next if bootstraps(bool(done), bool(trunc)) else 0.0)
        delta = target - value.item()
        log_prob, entropy = terms(params, action)
        # the actor ascends log pi(a|s) + c_H sign(delta) H, the critic ascends V(s)
        objectives = {
            "actor": log_prob + config.entropy_coef * math.copysign(1.0, delta) * entropy,
            "critic": value[0],
        }
        sizes = {}
        for name, (members, kappa) in groups.items():
            grads = torch.autograd.grad(objectives[name], members, retain_graph=True)
            z = traces[name]
            for k in range(len(z)):
                z[k] = config.gamma * config.trace_lambda * z[k] + grads[k].double()
            z_l1 = sum(float(t.abs().sum()) for t in z)
            bound = config.lr * kappa * max(abs(delta), 1.0) * z_l1  # M = alpha kappa max(|delta|, 1) ||z||_1
            sizes[name] = config.lr / max(bound, 1.0)
            with torch.no_grad():
                for param, trace in zip(members, z, strict=False):
                    param += (sizes[name] * delta * trace).to(param.dtype)
            if finished:  # traces end with the episode
                traces[name] = [torch.zeros_like(t) for t in z]
        step_sizes.append((sizes["actor"], sizes["critic"]))
    return model, traces, step_sizes


def test_stream_ac_updates_match_a_slow_reference_loop(tmp_path, monkeypatch):
    steps = 5
    config = stream_config(tmp_path / "run", steps)
    transitions = []
    real_step = PixelGoalEnv.step

    def recording_step(env, actions):
        before = env.frames.clone()
        out = real_step(env, actions)
        recorded = (before, actions.clone(), *(x.clone() for x in out[:4]), out[4]["final_obs"].clone())
        transitions.append(recorded)
        return out

    monkeypatch.setattr(PixelGoalEnv, "step", recording_step)
    train_stream_ac(config, echo=lambda *a, **k: None)
    monkeypatch.setattr(PixelGoalEnv, "step", real_step)
    # the trainer's initial network: the shell seeds, then the trainer builds env and model
    seed_everything(config.seed)
    env = build_env(config, CPU, seed=config.seed)
    initial = build_network(config, env)
    dones = [bool(t[4]) for t in transitions]
    truncs = [bool(t[5]) for t in transitions]
    # the script is what the test needs: a termination, a truncation, a trace carried
    # across a step (gamma lambda decay) and a trace that restarts after an episode end
    assert len(transitions) == steps and any(dones) and any(truncs)
    assert not (dones[-1] or truncs[-1]) and not (dones[0] or truncs[0])

    model, traces, step_sizes = reference_stream_ac(initial, transitions, config)
    checkpoint = load_checkpoint_file(tmp_path / "run")
    trained = checkpoint["models"]["model"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(trained[name].double(), value.double(), rtol=1e-4, atol=1e-6, msg=name)
    for name in ("actor", "critic"):
        saved = checkpoint["extra"][f"{name}_traces"]["traces"]
        assert len(saved) == len(traces[name])
        for got, expected in zip(saved, traces[name], strict=False):
            torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-6)
    # the ObGD bound is active (alpha_eff < alpha) and the logged mean step sizes match
    assert all(actor < config.lr and critic < config.lr for actor, critic in step_sizes)
    record = json.loads((tmp_path / "run" / LOG_NAME).read_text().splitlines()[-1])
    assert record["stats/lr/actor"] == pytest.approx(sum(a for a, _ in step_sizes) / steps, rel=1e-5)
    assert record["stats/lr/critic"] == pytest.approx(sum(c for _, c in step_sizes) / steps, rel=1e-5)


# -- a small learning test -------------------------------------------------------------------
LEARN_BOARD = PixelGoalConfig(
    grid_size=3, cell_px=1, frames_per_step=1, max_steps=6, step_cost=0.0, alpha=0.0, goal_bonus=1.0
)


@pytest.mark.slow
def test_a2c_learns_to_reach_the_goal_on_a_tiny_board():
    """200 optimiser steps on 128 envs: the greedy policy reaches the goal in >= 80 % of
    512 episodes (the initial network: 18 %). Without distance shaping the only reward is
    the goal bonus, so the critic must propagate it: with ``values`` detached in the loss
    (critic frozen) the same run ends at 20 %, with the policy loss's sign flipped at 0 %."""
    config = A2CTrainConfig(
        num_envs=128,
        update_every=1,
        total_env_steps=128 * 200,
        pixel_goal=LEARN_BOARD,
        hidden=32,
        lr=1e-2,
        gamma=0.9,
        entropy_coef=0.01,
        device="cpu",
        seed=0,
    )
    torch.manual_seed(config.seed)
    trainer = A2CTrainer(config, device=CPU)

    def greedy_success_rate():
        def greedy(obs):  # the argmax action
            return trainer.model(obs)[0].argmax(dim=1).to(torch.int32)

        return evaluate_policy(greedy, PixelGoalEnv(256, LEARN_BOARD, seed=123), episodes=512)["success_rate"]

    before = greedy_success_rate()
    for _ in range(config.total_opt_steps()):
        trainer.window()
    after = greedy_success_rate()
    assert before < 0.3 and after >= 0.8, (before, after)
