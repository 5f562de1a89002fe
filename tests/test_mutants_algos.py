"""Tests that the mutation run of the algos update functions asked for
(docs/mutation-testing.md): edges of the update rules that the reference tests in
tests/test_update_rules_*.py left unpinned. Each asserts a property of the rule (a
reference value, an exact count, an invariant), not the line that a mutant changed.
"""

import copy
import math
from typing import Any

import numpy as np
import pytest
import torch
from test_update_rules_onpolicy import (
    LR,
    SEED,
    LinearActorCritic,
    assert_params_equal,
    assert_stats_equal,
    fixed_batch,
    forward,
    reference_ppo,
    run_update,
)

from pglab.algos.onpolicy import OnPolicyHyperparams, explained_variance, onpolicy_update


# -- REINFORCE / VPG+GAE / PPO (pglab.algos.onpolicy) --------------------------------------
def test_ppo_with_one_sample_per_minibatch_matches_the_reference():
    """num_minibatches == batch size: minibatches of one sample, one step each (a
    minimum minibatch of 2 would take half as many steps, on pairs)."""
    model = LinearActorCritic()
    obs, actions, batch = fixed_batch(model, 5)
    hp = OnPolicyHyperparams(
        algo="ppo",
        ppo_epochs=2,
        num_minibatches=5,
        normalize_advantages=False,
        value_coef=0.7,
        entropy_coef=0.2,
        max_grad_norm=1e6,
    )
    sizes = []

    def evaluate(index):
        sizes.append(len(index))
        return forward(dict(model.named_parameters()), obs[index], actions[index])

    reference, stats, rows = reference_ppo(model, obs, actions, batch, hp)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    metrics = onpolicy_update(
        evaluate, batch, model.parameters(), optimizer, hp, generator=torch.Generator().manual_seed(SEED)
    )
    assert sizes == [1] * 10 and len(rows) == 10
    assert_params_equal(model, reference)
    assert_stats_equal(metrics, stats)


def test_ppo_kl_early_stop_compares_the_epoch_mean_strictly_with_the_target(monkeypatch):
    """One minibatch per epoch, so the epoch's mean KL is that minibatch's KL exactly:
    a target just below it stops after the first epoch (a mean over more minibatches
    than ran would not), a target equal to it does not ("exceeds" is strict)."""
    import pglab.algos.onpolicy as onpolicy

    kls: list[float] = []

    def recording(*args, **kwargs):
        out = clip_loss(*args, **kwargs)
        kls.append(float(out["stats/approx_kl"]))
        return out

    clip_loss = onpolicy.ppo_clip_loss
    monkeypatch.setattr(onpolicy, "ppo_clip_loss", recording)
    model = LinearActorCritic()
    obs, actions, batch = fixed_batch(model, 6)
    base: dict[str, Any] = dict(algo="ppo", ppo_epochs=2, num_minibatches=1, max_grad_norm=1e6)
    run_update(copy.deepcopy(model), obs, actions, batch, OnPolicyHyperparams(**base))
    first_kl = kls[0]
    assert first_kl > 0.01
    below = run_update(
        copy.deepcopy(model), obs, actions, batch, OnPolicyHyperparams(**base, target_kl=first_kl * (1 - 1e-4))
    )
    equal = run_update(copy.deepcopy(model), obs, actions, batch, OnPolicyHyperparams(**base, target_kl=first_kl))
    assert kls[2] == kls[3] == first_kl  # the same first epoch each time
    assert float(below["stats/epochs"]) == 1
    assert float(equal["stats/epochs"]) == 2


def test_update_metrics_are_exactly_the_documented_keys():
    """The summed loss is not a metric (its parts are); every mode reports the
    documented keys, PPO adds approx_kl and clipfrac; REINFORCE has no critic loss."""
    single = {
        "loss/policy",
        "loss/value",
        "loss/entropy",
        "stats/entropy",
        "stats/grad_norm",
        "stats/epochs",
        "stats/explained_variance",
    }
    for mode in ("reinforce_raw", "vpg_gae", "ppo"):
        model = LinearActorCritic()
        obs, actions, batch = fixed_batch(model, 8)
        metrics = run_update(model, obs, actions, batch, OnPolicyHyperparams(algo=mode, num_minibatches=2))
        expected = single | {"stats/approx_kl", "stats/clipfrac"} if mode == "ppo" else single
        assert set(metrics) == expected, mode
        if mode == "reinforce_raw":
            assert float(metrics["loss/value"]) == 0.0


def test_explained_variance_reference_values_and_constant_targets():
    targets = torch.tensor([0.1, 0.3, 0.2, 0.6], dtype=torch.float64)  # variance 0.047, below 1
    predicted = torch.tensor([0.0, 0.35, 0.25, 0.5], dtype=torch.float64)
    expected = 1 - float((targets - predicted).var() / targets.var())
    assert float(explained_variance(predicted, targets)) == pytest.approx(expected, rel=1e-12)
    assert float(explained_variance(targets, targets)) == 1.0
    # Constant targets: nothing to explain; 0 by convention (not 0/0 = NaN).
    assert float(explained_variance(predicted, torch.full((4,), 2.0, dtype=torch.float64))) == 0.0


# -- A2C TD(0) (pglab.algos.a2c, pglab.algos.a2c_common) ------------------------------------
def count_forwards(model):
    """Counts the model's forward passes with and without autograd (a forward hook)."""
    counts = {"grad": 0, "no_grad": 0}

    def hook(module, inputs, output):
        counts["grad" if torch.is_grad_enabled() else "no_grad"] += 1

    model.register_forward_hook(hook)
    return counts


@pytest.mark.parametrize("reuse", [True, False])
def test_a2c_window_forwards_once_per_env_step_plus_one_bootstrap(reuse):
    """update_every env-steps and one optimiser step. Reusing the bootstrap forward
    V(s') as the next step's forward takes update_every forwards with autograd and one
    without (the last V(s'), whose graph would outlive the optimiser step); without reuse,
    one of each per env-step. The parameters come out the same either way."""
    from test_update_rules_a2c import NUM_ENVS, scripted_a2c_trainer

    trainer, seen, _ = scripted_a2c_trainer()
    trainer.reuse_forward = reuse
    counts = count_forwards(trainer.model)
    trainer.window()
    steps = trainer.config.update_every
    assert len(seen) == steps == 2
    assert counts == ({"grad": steps, "no_grad": 1} if reuse else {"grad": steps, "no_grad": steps})
    assert trainer.counters == {"env_steps": steps * NUM_ENVS, "opt_steps": 1}
    assert all(isinstance(value, int) for value in trainer.counters.values())
    other, _, _ = scripted_a2c_trainer()
    other.reuse_forward = not reuse
    other.window()
    for mine, theirs in zip(trainer.model.parameters(), other.model.parameters(), strict=False):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-7)


def test_a2c_window_defers_the_gradient_sync_to_its_last_env_step():
    """DDP's no_sync() wraps every env-step of a window but the last, whose backward
    all-reduces the accumulated gradient; the forward reuse carries across no_sync steps
    (3 env-steps: 3 forwards with autograd, 1 without)."""
    from pglab.algos.a2c import A2CTrainConfig, A2CTrainer
    from pglab.configs.a2c import PixelGoalConfig

    config = A2CTrainConfig(
        num_envs=2,
        update_every=3,
        total_env_steps=6,
        device="cpu",
        hidden=8,
        pixel_goal=PixelGoalConfig(grid_size=2),
        seed=0,
    )
    trainer = A2CTrainer(config, device=torch.device("cpu"))
    inside, during = [], []

    class NoSync:
        def __enter__(self):
            inside.append(True)

        def __exit__(self, *exc):
            inside.pop()

    step = trainer.env.step

    def watched(actions):
        during.append(bool(inside))
        return step(actions)

    trainer.env.step = watched
    counts = count_forwards(trainer.model)
    trainer.window(no_sync=NoSync)
    assert during == [True, True, False]
    assert counts == {"grad": 3, "no_grad": 1}


def test_a2c_window_sums_the_returns_and_lengths_of_the_episodes_it_finished():
    """Episode statistics against a loop over the scripted transitions: an episode
    ends at a termination or a truncation, and its return is the sum of its rewards."""
    from test_update_rules_a2c import NUM_ENVS, scripted_a2c_trainer

    trainer, seen, _ = scripted_a2c_trainer()
    trainer.window()
    running, length = [0.0] * NUM_ENVS, [0] * NUM_ENVS
    total_return, total_length, episodes = 0.0, 0, 0
    for _, _, _, reward, done, trunc in seen:
        for i in range(NUM_ENVS):
            running[i] += float(reward[i])
            length[i] += 1
            if bool(done[i]) or bool(trunc[i]):
                total_return, total_length, episodes = total_return + running[i], total_length + length[i], episodes + 1
                running[i], length[i] = 0.0, 0
    sums = trainer.stats.episodes.sums
    assert episodes == 6 and float(sums["count"]) == episodes
    assert float(sums["return_sum"]) == pytest.approx(total_return, abs=1e-6)
    assert float(sums["length_sum"]) == total_length


def test_a2c_window_takes_the_episodes_an_environment_reports_over_its_done_flags():
    """Atari reports whole games itself (info["episode_end"], unclipped returns), while
    `done` marks every lost life: the window's episode counts, returns and lengths must be
    the reported ones (finished_episodes), not `done | trunc`; the successes are the
    environment's info["success"] among the reported ends."""
    from pglab.algos.a2c import A2CTrainConfig, A2CTrainer
    from pglab.configs.a2c import PixelGoalConfig

    config = A2CTrainConfig(
        num_envs=3,
        update_every=2,
        total_env_steps=6,
        device="cpu",
        hidden=8,
        pixel_goal=PixelGoalConfig(grid_size=2),
        seed=0,
    )
    trainer = A2CTrainer(config, device=torch.device("cpu"))
    step = trainer.env.step
    reported = []

    def reporting(actions):
        obs, reward, done, trunc, info = step(actions)
        # every copy "ends a game" at every step except copy 1, whose games never end
        episode_end = torch.tensor([True, False, True])
        returns = torch.where(episode_end, torch.tensor([7.0, 0.0, -2.0], dtype=torch.float64), 0.0)
        lengths = torch.where(episode_end, torch.tensor([11, 0, 5]), 0)
        reported.append((episode_end, info["success"].clone(), returns, lengths))
        return (
            obs,
            reward,
            done,
            trunc,
            {**info, "episode_end": episode_end, "episode_return": returns, "episode_length": lengths},
        )

    trainer.env.step = reporting
    trainer.window()
    sums = trainer.stats.episodes.sums
    assert float(sums["count"]) == sum(int(end.sum()) for end, _, _, _ in reported) == 4
    assert float(sums["success_sum"]) == sum(int((end & success).sum()) for end, success, _, _ in reported)
    assert float(sums["return_sum"]) == 2 * (7.0 - 2.0)
    assert float(sums["length_sum"]) == 2 * (11 + 5)


def test_a2c_actions_come_from_the_trainers_generator_not_the_global_rng():
    """Resume and DDP ranks rely on the action noise having its own stream: the global
    torch RNG (weight init, other libraries) must not change the actions taken."""
    from test_update_rules_a2c import scripted_a2c_trainer

    taken = []
    for global_seed in (1, 2):
        trainer, seen, _ = scripted_a2c_trainer()
        torch.manual_seed(global_seed)
        trainer.window()
        taken.append(torch.stack([actions for _, actions, *_ in seen]))
    assert torch.equal(taken[0], taken[1])


def test_sample_actions_is_the_gumbel_max_of_a_same_dtype_uniform():
    from pglab.algos.a2c_common import sample_actions

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 5, generator=g, dtype=torch.float64)
    actions = sample_actions(logits, torch.Generator().manual_seed(3))
    uniform = torch.rand(logits.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    reference = torch.argmax(logits - torch.log(-torch.log(uniform)), dim=1)
    assert actions.dtype == torch.int64 and torch.equal(actions, reference)


def test_sample_actions_survives_a_uniform_draw_of_exactly_zero(monkeypatch):
    """torch.rand can return 0.0; -log(-log 0) would be -inf for every action (argmax
    then always 0). Clamped, a zero draw is a finite Gumbel and the logits decide."""
    from pglab.algos.a2c_common import sample_actions

    monkeypatch.setattr(torch, "rand", lambda shape, **kwargs: torch.zeros(shape, dtype=kwargs.get("dtype")))
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 5.0]])
    assert sample_actions(logits, torch.Generator()).tolist() == [1, 2]


# -- stream-AC(lambda): the reward scaler (pglab.algos.stream_ac) ----------------------------
def test_reward_scaler_matches_the_reference_over_episodes_with_discounting():
    """r / sqrt(var(G) + 1e-8) with G = gamma G (1 - finished) + r, against the reference
    of tests/test_update_rules_a2c.py (all returns so far, sample variance)."""
    from test_update_rules_a2c import ReferenceScaler

    from pglab.algos.stream_ac import RewardScaler

    scaler, reference = RewardScaler(gamma=0.5), ReferenceScaler(0.5)
    rewards = [1.0, 3.0, -2.0, 0.5, 4.0, 4.0, -1.0]
    finished = [False, False, True, False, True, False, False]
    for r, f in zip(rewards, finished, strict=False):
        assert scaler(r, f) == pytest.approx(reference(r, f), rel=1e-12)


def test_reward_scaler_keeps_the_sign_when_the_returns_have_no_spread():
    """Two equal returns: variance 0, so the reward is divided by sqrt(1e-8) (a
    subtracted floor would flip the reward's sign)."""
    from pglab.algos.stream_ac import RewardScaler

    scaler = RewardScaler(gamma=0.0)
    assert scaler(2.0, False) == pytest.approx(2.0)
    assert scaler(2.0, False) == pytest.approx(2.0 / math.sqrt(1e-8))


# -- Q-learning and WoLF-PHC (pglab.algos.tabular.agents) -----------------------------------
def tied_agent(cls, **kwargs):
    """Three actions; Q(s, 0) = Q(s, 2) = 0.5 > Q(s, 1) = 0 after two terminal updates."""
    agent = cls(3, alpha=0.5, epsilon=0.3, epsilon_decay=1.0, epsilon_min=0.0, seed=0, **kwargs)
    agent.update("s", 0, 1.0, "end", terminated=True)
    agent.update("s", 2, 1.0, "end", terminated=True)
    assert agent.q_values("s").tolist() == [0.5, 0.0, 0.5]
    return agent


def test_greedy_breaks_ties_at_random_and_draws_nothing_without_a_tie():
    from pglab.algos.tabular import QTableAgent

    agent = tied_agent(QTableAgent)
    picks = [agent.act("s", explore=False) for _ in range(200)]
    assert set(picks) == {0, 2} and 70 < picks.count(0) < 130
    # a unique maximum: the action without touching the random stream (seeded runs
    # would otherwise shift every later draw)
    agent.update("s", 2, 2.0, "end", terminated=True)
    state = copy.deepcopy(agent.rng.bit_generator.state)
    assert agent.act("s", explore=False) == 2
    assert agent.rng.bit_generator.state == state


def test_epsilon_greedy_policy_splits_the_greedy_mass_over_tied_actions():
    from pglab.algos.tabular import QTableAgent

    agent = tied_agent(QTableAgent)
    eps = agent.epsilon
    np.testing.assert_allclose(
        agent.policy("s"), [eps / 3 + (1 - eps) / 2, eps / 3, eps / 3 + (1 - eps) / 2], rtol=1e-12
    )
    np.testing.assert_allclose(agent.policy("unseen"), [1 / 3] * 3, rtol=1e-12)


def test_wolf_policies_of_an_unseen_state_are_uniform_copies():
    from pglab.algos.tabular import WoLFPHCAgent

    agent = tied_agent(WoLFPHCAgent)
    for policy in (agent.policy, agent.average_policy):
        unseen = policy("unseen")
        assert unseen.shape == (3,) and np.allclose(unseen, 1 / 3)
        seen = policy("s")
        seen[:] = 7.0  # a copy: the table is not changed through it
        assert np.isclose(policy("s").sum(), 1.0)


def test_wolf_update_bootstraps_unless_told_the_transition_terminated():
    from pglab.algos.tabular import WoLFPHCAgent

    agent = WoLFPHCAgent(2, alpha=0.5, gamma=0.9, seed=0)
    agent.update("next", 1, 2.0, "end", terminated=True)  # Q(next, 1) = 1
    agent.update("s", 0, 0.0, "next")  # default: not terminated
    assert agent.q_values("s")[0] == pytest.approx(0.5 * 0.9 * 1.0)


# -- MaxKPOMO.calculate_loss (pglab.algos.maxk_pomo) -------------------------------------------
@pytest.mark.co
def test_maxk_pomo_loss_reads_rewards_and_log_likelihoods_from_the_policy_output():
    """RL4CO calls calculate_loss with reward/log_likelihood left None: they come from
    policy_out, and the result carries loss, reinforce_loss, rho_hat and max_reward."""
    from test_maxk_pomo import tiny_model

    model = tiny_model(k=3, variance_reduction="sample_loo")
    gen = torch.Generator().manual_seed(2)
    reward = -torch.rand(4, 6, generator=gen) * 4
    log_likelihood = torch.randn(4, 6, generator=gen)
    explicit = model.calculate_loss(None, None, {}, reward, log_likelihood)
    out = model.calculate_loss(None, None, {"reward": reward, "log_likelihood": log_likelihood})
    assert set(out) >= {"loss", "reinforce_loss", "rho_hat", "max_reward"}
    for key in ("loss", "rho_hat", "max_reward"):
        torch.testing.assert_close(out[key], explicit[key], rtol=0, atol=0)
    torch.testing.assert_close(out["reinforce_loss"], out["loss"], rtol=0, atol=0)
    torch.testing.assert_close(out["max_reward"], reward.max(dim=1).values.mean())
    with pytest.raises(ValueError, match=r"^MaxKPOMO\.calculate_loss: reward and log_likelihood must be unbatchified"):
        model.calculate_loss(None, None, {"reward": torch.randn(24), "log_likelihood": torch.randn(24)})
