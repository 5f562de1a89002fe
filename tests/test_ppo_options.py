"""PPO options an SB3/RL-Zoo user expects: lr and clip-range schedules, gSDE, callbacks,
and the RL-Zoo hyperparameter files in configs/ppo/."""

from pathlib import Path

import numpy as np
import pytest
import torch

from pglab.algos.policy_update import PolicyUpdate
from pglab.algos.ppo import PPOCallback, PPOConfig, train_ppo
from pglab.commands.ppo import anneal_lr_as_schedule
from pglab.configs.ppo import OnPolicyHyperparams
from pglab.errors import ConfigError
from pglab.nets.actor_critic import GSDEActorCritic
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import load_yaml_config, make_config, parse_flags
from pglab.run.logger import read_metrics

QUIET = dict(tensorboard=False, eval_episodes=0, log_interval=1)
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "ppo"


def tiny(tmp_path, name, **overrides):
    fields = dict(
        env="gym:CartPole-v1",
        num_envs=2,
        num_steps=16,
        total_steps=2 * 16 * 4,
        num_minibatches=2,
        ppo_epochs=1,
        hidden_dims=(8,),
        log_dir=tmp_path / name,
        **QUIET,
    )
    fields.update(overrides)
    return make_config(PPOConfig, **fields)


# -- schedules ---------------------------------------------------------------------------
def test_linear_schedules_reach_the_update(tmp_path, monkeypatch):
    """Iteration k of K=4 uses lr * (1 - (k-1)/K) and clip * (1 - (k-1)/K): recorded from
    the hyperparameters the update receives and from the optimiser it steps."""
    seen = []
    real_update = PolicyUpdate.__call__

    def recording_update(self, flat_obs, flat_actions, batch, hp, generator):
        seen.append((self.optimizer.param_groups[0]["lr"], hp.clip_coef))
        return real_update(self, flat_obs, flat_actions, batch, hp, generator)

    monkeypatch.setattr(PolicyUpdate, "__call__", recording_update)
    train_ppo(tiny(tmp_path, "linear", lr=1e-3, lr_schedule="linear", clip_coef=0.2, clip_schedule="linear"))
    fractions = [1.0, 0.75, 0.5, 0.25]
    assert seen == [pytest.approx((1e-3 * f, 0.2 * f), rel=1e-12) for f in fractions]
    metrics = read_metrics(tmp_path / "linear")
    assert list(metrics["stats/clip_coef"]) == pytest.approx([0.2 * f for f in fractions])
    seen.clear()
    train_ppo(tiny(tmp_path, "constant", lr=1e-3, lr_schedule="constant", clip_coef=0.2))
    assert seen == [(1e-3, 0.2)] * 4


def test_anneal_lr_is_the_old_spelling_of_lr_schedule(tmp_path):
    assert PPOConfig(anneal_lr=False).lr_schedule == "constant" and PPOConfig(anneal_lr=True).lr_schedule == "linear"
    assert PPOConfig(anneal_lr=False).anneal_lr is None  # stored configs hold one field
    parsed = parse_flags(PPOConfig, anneal_lr_as_schedule(["--no-anneal-lr"]), prog="t")
    assert parsed.config.lr_schedule == "constant" and "lr_schedule" in parsed.given
    yaml_file = tmp_path / "old.yaml"
    yaml_file.write_text("anneal_lr: false\n")
    assert load_yaml_config(PPOConfig, yaml_file).lr_schedule == "constant"
    with pytest.raises(ConfigError, match="clip_schedule"):
        OnPolicyHyperparams(clip_schedule="cosine")


# -- gSDE ----------------------------------------------------------------------------------
def test_gsde_log_prob_entropy_and_noise_match_the_definition():
    """log pi and H equal torch.distributions.Normal(mu(s), sqrt(z(s)^2 @ sigma^2 + 1e-6));
    the std differs between states; a sampled action is mu(s) + z(s) @ W of its copy."""
    torch.manual_seed(0)
    net = GSDEActorCritic(3, 2, (8, 8), log_std_init=-1.0)
    with torch.no_grad():
        net.log_std.add_(torch.randn_like(net.log_std) * 0.3)
        net.log_std[:, 1] = -6.0  # a tiny variance, where the 1e-6 floor matters
    obs = torch.randn(5, 3) * 2.0
    latent = torch.tanh(net.actor[2](torch.tanh(net.actor[0](obs))))
    mean = net.actor[4](latent)
    std = (latent.pow(2) @ net.log_std.exp().pow(2) + 1e-6).sqrt()
    reference = torch.distributions.Normal(mean, std)
    actions = mean + 0.5 * torch.randn(5, 2)
    log_probs, entropy, _ = net.evaluate_actions(obs, actions)
    torch.testing.assert_close(log_probs, reference.log_prob(actions).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    assert (std.max(0).values / std.min(0).values > 1.05).all()  # state-dependent
    net.reset_noise(5, torch.Generator().manual_seed(1))
    sampled, sampled_log_probs, _ = net.act(obs)
    torch.testing.assert_close(sampled, mean + torch.bmm(latent.unsqueeze(1), net.exploration_matrices).squeeze(1))
    torch.testing.assert_close(sampled_log_probs, reference.log_prob(sampled).sum(-1))


def test_gsde_features_learn_through_the_mean_only():
    """learn_features=False: the variance's gradient reaches log_std but not the hidden layers."""
    net = GSDEActorCritic(3, 1, (4,), log_std_init=0.0)
    obs, actions = torch.randn(6, 3), torch.randn(6, 1)
    log_probs, entropy, _ = net.evaluate_actions(obs, actions)
    head_mean_grad = torch.autograd.grad(entropy.sum(), [net.log_std, net.actor[0].weight], allow_unused=True)
    assert head_mean_grad[0].abs().sum() > 0 and head_mean_grad[1] is None


@pytest.mark.slow
def test_gsde_run_resumes_exactly_and_discrete_is_refused(tmp_path):
    config = dict(
        env="gym:Pendulum-v1", use_sde=True, sde_sample_freq=4, log_std_init=-2.0, num_steps=32, total_steps=2 * 32 * 4
    )
    straight = train_ppo(tiny(tmp_path, "straight", **config))
    train_ppo(tiny(tmp_path, "split", **config), stop_after=2)
    resumed = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", **QUIET))
    a, b = (load_checkpoint_file(r.run_dir, kinds=["ppo"])["models"]["agent"] for r in (straight, resumed))
    assert a["log_std"].shape == (8, 1) and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ConfigError, match="use_sde"):
        train_ppo(tiny(tmp_path, "discrete", use_sde=True))


# -- callbacks -----------------------------------------------------------------------------
class Recorder(PPOCallback):
    def __init__(self, stop_at_iteration=None):
        self.steps, self.rollouts, self.stop_at_iteration = [], [], stop_at_iteration

    def on_step(self, info):
        self.steps.append((info.iteration, info.rollout_step, info.env_steps, float(info.rewards.sum())))

    def on_rollout_end(self, info):
        self.rollouts.append(
            (
                info.iteration,
                info.env_steps,
                info.rollout["rewards"].shape,
                info.episode_returns.tolist(),
                info.episode_lengths.tolist(),
            )
        )
        return False if info.iteration == self.stop_at_iteration else None


@pytest.mark.slow
def test_callbacks_see_every_step_and_rollout_and_can_stop_cleanly(tmp_path):
    """on_step is called N*T... once per vector step with the running env-step count;
    on_rollout_end once per iteration with the [N, T] buffers and the finished episodes
    (CartPole: return == length). Returning False at iteration 2 of 4 saves a checkpoint
    there; --resume finishes the run bit for bit like an uninterrupted one."""
    recorder = Recorder()
    straight = train_ppo(tiny(tmp_path, "straight"), callbacks=[recorder])
    assert [s[2] for s in recorder.steps] == [2 * (i + 1) for i in range(4 * 16)]
    assert [s[:2] for s in recorder.steps[:17]] == [(1, t) for t in range(16)] + [(2, 0)]
    assert all(s[3] == 2.0 for s in recorder.steps)  # raw CartPole rewards, 1 per copy
    assert [(r[0], r[1], tuple(r[2])) for r in recorder.rollouts] == [(k, 32 * k, (2, 16)) for k in range(1, 5)]
    episodes = [(ret, length) for r in recorder.rollouts for ret, length in zip(r[3], r[4], strict=False)]
    assert episodes and all(ret == length for ret, length in episodes)

    stopper = Recorder(stop_at_iteration=2)
    stopped = train_ppo(tiny(tmp_path, "split"), callbacks=[stopper])
    assert stopped.iterations == 2 and stopped.interrupted and stopped.stopped_by_callback
    assert len(stopper.rollouts) == 2
    resumed = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", **QUIET))
    a, b = (load_checkpoint_file(r.run_dir, kinds=["ppo"])["models"]["agent"] for r in (straight, resumed))
    assert resumed.iterations == 4 and all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ConfigError, match="callbacks"):
        train_ppo(tiny(tmp_path, "bad"), callbacks=[object()])


# -- RL-Zoo files --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "cartpole.yaml",
        "acrobot.yaml",
        "mountaincar_continuous.yaml",
        "pendulum.yaml",
        "lunarlander.yaml",
        "cartpole_cleanrl.yaml",
        "pendulum_nosde.yaml",
    ],
)
def test_rl_zoo_files_load(name):
    config = load_yaml_config(PPOConfig, CONFIGS / name)
    assert config.env.startswith("gym:") and config.batch_size % config.update.num_minibatches == 0


def test_lunarlander_file_trains_with_box2d(tmp_path):
    # The zoo file's environment and hyperparameters (Box2D from the box2d extra), on a tiny
    # budget: rollouts of 16 x 32 steps, 4 epochs of 8 minibatches. Box2D keeps its world in
    # C objects, so the checkpoint holds no env snapshot (it once held a NumPy scalar that a
    # weights_only load refused): the run resumes from fresh envs, with a warning, and the
    # agent API loads it.
    import dataclasses

    import pglab

    config = load_yaml_config(PPOConfig, CONFIGS / "lunarlander.yaml")
    config = dataclasses.replace(
        config,
        num_steps=32,
        total_steps=2 * 16 * 32,
        update=dataclasses.replace(config.update, num_minibatches=8),
        log_dir=tmp_path / "lander",
        device="cpu",
        **QUIET,
    )
    first = train_ppo(config, stop_after=1)
    assert first.env_steps == 16 * 32 and load_checkpoint_file(first.run_dir)["extra"]["env"] is None
    with pytest.warns(UserWarning, match="not bit-identical"):
        resumed = train_ppo(dataclasses.replace(config, log_dir=None, resume=tmp_path / "lander"))
    assert resumed.env_steps == 2 * 16 * 32 and resumed.exit_code == 0
    agent = pglab.load_checkpoint(resumed.run_dir, device="cpu")
    actions = agent.predict(np.zeros((3, 8), dtype=np.float32), deterministic=True)
    assert actions.shape == (3,) and set(np.asarray(actions).tolist()) <= {0, 1, 2, 3}
