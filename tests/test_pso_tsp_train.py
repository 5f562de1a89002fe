"""HyperparamTSPModel, the Deep-PSO trainer (rl modes, resume, bad input) and evaluation."""

import csv
import json
import math

import pytest
import torch

from pglab.algos.onpolicy import OnPolicyHyperparams
from pglab.algos.pso_tsp import (
    PSOTSPTrainConfig,
    advantages_and_returns,
    build_model,
    collect_rollout,
    make_evaluate,
    train_pso_tsp,
)
from pglab.cli import main as cli_main
from pglab.envs.pso_tsp import CLASSIC_C1, CLASSIC_W, PSOTSPEnv, random_instances
from pglab.errors import ConfigError
from pglab.nets.tsp_pso import gaussian_log_prob_entropy, swarm_scalars
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.seeding import make_generator

# The edge policy with the settings these tests are written for.
EDGE_POLICY = dict(
    controller="edge_policy",
    train_decode="sample",
    reward="tour_length",
    particle_noise_std=0.0,
    noise_scope="particle",
    antithetic=False,
    mu_scale=1.0,
    lr=3e-4,
    entropy_coef=0.0,
    algo="ppo",
)
TINY = dict(
    num_cities=8,
    knn=4,
    n_particles=4,
    pso_iterations=3,
    emb_dim=8,
    num_heads=2,
    node_layers=1,
    instances_per_iteration=2,
    eval_instances=4,
    device="cpu",
    log_interval=1,
    **EDGE_POLICY,
)


def tiny_config(**overrides):
    return make_config(PSOTSPTrainConfig, **{**TINY, **overrides})


def test_model_shapes_and_classic_initial_mean():
    config = tiny_config()
    model = build_model(config, torch.device("cpu"))
    env = PSOTSPEnv(config.env, "cpu", make_generator(0))
    state = env.reset(random_instances(3, 8, make_generator(1)))
    node_emb, edge_emb = model.encode_instances(state.coords, state.neighbours, state.edge_dist)
    mu, sigma, values = model(
        node_emb, edge_emb, state.position, state.velocity, state.pbest, state.gbest, swarm_scalars(state, 3)
    )
    assert mu.shape == sigma.shape == (3, 4, 32, 3) and values.shape == (3, 4)
    # zero-initialised last layer: an untrained model proposes the classic coefficients
    assert torch.allclose(mu[..., 0], torch.full_like(mu[..., 0], CLASSIC_W))
    assert torch.allclose(mu[..., 1], torch.full_like(mu[..., 1], CLASSIC_C1))
    assert torch.allclose(sigma, torch.full_like(sigma, math.exp(config.log_std_init)))


def test_gaussian_log_prob_matches_torch_distributions():
    mu, sigma = torch.randn(2, 3, 5, 3), torch.rand(2, 3, 5, 3) + 0.1
    actions = torch.randn(2, 3, 5, 3)
    dist = torch.distributions.Normal(mu, sigma)
    lp, ent = gaussian_log_prob_entropy(mu, sigma, actions, "mean")
    assert torch.allclose(lp, dist.log_prob(actions).sum(-1).mean(-1), atol=1e-5)
    assert torch.allclose(ent, dist.entropy().sum(-1).mean(-1), atol=1e-5)
    lp_sum, _ = gaussian_log_prob_entropy(mu, sigma, actions, "sum")
    assert torch.allclose(lp_sum, dist.log_prob(actions).sum((-1, -2)), atol=1e-4)


def test_particle_shared_noise_is_the_equicorrelated_gaussian_it_scores():
    from pglab.nets.tsp_pso import sample_coefficients

    generator = torch.Generator().manual_seed(3)
    mu = torch.randn(2, 3, 6, 3, generator=generator, dtype=torch.float64)
    sigma = torch.rand(2, 3, 6, 3, generator=generator, dtype=torch.float64) * 0.5 + 0.1
    shared = 0.4
    actions = sample_coefficients(mu, sigma, shared, torch.Generator().manual_seed(1))
    lp, ent = gaussian_log_prob_entropy(mu, sigma, actions, "sum", shared)
    want_lp, want_ent = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)
    for s_index in range(2):
        for particle in range(3):
            for coefficient in range(3):
                # Sigma = diag(sigma^2) + shared^2 1 1^T, scored by torch's dense MultivariateNormal
                covariance = torch.diag(sigma[s_index, particle, :, coefficient] ** 2) + shared**2
                dist = torch.distributions.MultivariateNormal(mu[s_index, particle, :, coefficient], covariance)
                want_lp[s_index, particle] += dist.log_prob(actions[s_index, particle, :, coefficient])
                want_ent[s_index, particle] += dist.entropy()
    torch.testing.assert_close(lp, want_lp)
    torch.testing.assert_close(ent, want_ent)
    mean_lp, mean_ent = gaussian_log_prob_entropy(mu, sigma, actions, "mean", shared)
    torch.testing.assert_close(mean_lp, want_lp / 6)
    torch.testing.assert_close(mean_ent, want_ent / 6)
    # The sampler draws that covariance: empirical covariance of many draws of one particle.
    draws = sample_coefficients(
        mu[:1, :1].expand(20000, 1, 6, 3),
        sigma[:1, :1].expand(20000, 1, 6, 3),
        shared,
        torch.Generator().manual_seed(2),
    )[:, 0, :, 0]
    empirical = torch.cov(draws.T)
    expected = torch.diag(sigma[0, 0, :, 0] ** 2) + shared**2
    assert (empirical - expected).abs().max() < 0.02
    # Swarm scope: one offset per instance for all particles; each particle carries 1/P of
    # the swarm's joint density over its P * D entries per coefficient.
    swarm_actions = sample_coefficients(mu, sigma, shared, torch.Generator().manual_seed(4), "swarm")
    per_particle, _ = gaussian_log_prob_entropy(mu, sigma, swarm_actions, "sum", shared, "swarm")
    for s_index in range(2):
        want = sum(
            torch.distributions.MultivariateNormal(
                mu[s_index, :, :, c].reshape(-1),
                torch.diag(sigma[s_index, :, :, c].reshape(-1) ** 2) + shared**2,
            ).log_prob(swarm_actions[s_index, :, :, c].reshape(-1))
            for c in range(3)
        )
        torch.testing.assert_close(per_particle[s_index], (want / 3).expand(3))
    # shared = 0 is the independent Gaussian (and the sampler's noise stream is unchanged)
    torch.testing.assert_close(
        gaussian_log_prob_entropy(mu, sigma, actions, "sum", 0.0)[0],
        torch.distributions.Normal(mu, sigma).log_prob(actions).sum((-1, -2)),
    )
    torch.testing.assert_close(
        sample_coefficients(mu, sigma, 0.0, torch.Generator().manual_seed(5)),
        mu + sigma * torch.randn(mu.shape, generator=torch.Generator().manual_seed(5), dtype=mu.dtype),
    )


@pytest.mark.parametrize(("algo", "particle_noise_std"), [("vpg_gae", 0.0), ("reinforce_raw", 0.0), ("vpg_gae", 0.3)])
def test_reevaluation_reproduces_rollout_and_gae_layout(algo, particle_noise_std):
    # evaluate(indices) on unchanged parameters must give back the rollout's own
    # log-probs and values for any subset, in any order: checks the (t, b, p) indexing.
    config = tiny_config(algo=algo, particle_noise_std=particle_noise_std)
    model = build_model(config, torch.device("cpu"))
    torch.nn.init.normal_(model.policy_head[-1].weight, std=0.1)  # make outputs depend on the state
    env = PSOTSPEnv(config.env, "cpu", make_generator(0))
    rollout = collect_rollout(model, env, random_instances(2, 8, make_generator(1)), config, make_generator(2))
    evaluate = make_evaluate(model, rollout, config)
    indices = torch.randperm(3 * 2 * 4, generator=make_generator(3))[:10]
    log_probs, _, values = evaluate(indices)
    assert torch.allclose(log_probs, rollout.log_probs.reshape(-1)[indices], atol=1e-5)
    assert torch.allclose(values, rollout.values.reshape(-1)[indices], atol=1e-5)
    advantages, returns = advantages_and_returns(rollout, config.update)
    # slow reference: per particle, backwards over the T = 3 iterations
    gamma, lam = config.update.gamma, (1.0 if algo == "reinforce_raw" else config.update.gae_lambda)
    T, B, P = rollout.rewards.shape
    for b in range(B):
        for p in range(P):
            v = rollout.values[:, b, p] if algo == "vpg_gae" else torch.zeros(T)
            running, next_value = 0.0, 0.0
            for t in reversed(range(T)):
                delta = rollout.rewards[t, b, p] + gamma * next_value - v[t]
                running = delta + gamma * lam * running
                flat = (t * B + b) * P + p
                assert advantages[flat].item() == pytest.approx(float(running), abs=1e-5)
                next_value = v[t]


def test_config_validation():
    with pytest.raises(ConfigError, match=r"n_particles: .*\(got 0\)"):
        tiny_config(n_particles=0)
    with pytest.raises(ConfigError, match="algo"):
        tiny_config(algo="a3c")
    with pytest.raises(ConfigError, match="emb_dim"):
        tiny_config(emb_dim=6, num_heads=4)
    assert isinstance(tiny_config().update, OnPolicyHyperparams)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("n_particles: [1, 2\n")
    assert cli_main(["train", "pso-tsp", "--config", str(bad_yaml)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    zero = tmp_path / "zero.yaml"
    zero.write_text("n_particles: 0\n")
    assert cli_main(["train", "pso-tsp", "--config", str(zero)]) == 2
    assert cli_main(["train", "pso-tsp", "--n_particles", "0", "--log_dir", str(tmp_path / "x")]) == 2
    assert cli_main(["train", "pso-tsp", "--algo", "a2c", "--log_dir", str(tmp_path / "y")]) == 2
    assert cli_main(["evaluate", "pso-tsp", "--episodes", "0"]) == 2
    assert cli_main(["evaluate", str(tmp_path / "missing.pt")]) == 2
    assert not (tmp_path / "x").exists()


def untimed_rows(run_dir):
    """The rows of metrics.csv without the shell's wall-clock columns (perf/*)."""
    with open(run_dir / "metrics.csv", newline="") as handle:
        rows = [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(handle)]
    assert rows and all("env_steps" in row and "loss/policy" in row for row in rows)
    return rows


def _run(tmp_path, name, n_iterations, resume=None, **overrides):
    config = tiny_config(
        n_iterations=n_iterations,
        save_interval=100,
        eval_interval=2,
        **overrides,
        log_dir=None if resume else tmp_path / name,
        resume=resume,
    )
    return train_pso_tsp(config, echo=lambda *a, **k: None)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "vpg_gae"])
def test_resume_is_bit_exact(tmp_path, algo):
    extra = {"algo": algo, "ppo_epochs": 2, "num_minibatches": 2}
    full = _run(tmp_path, "full", 4, **extra)
    _run(tmp_path, "half", 2, **extra)
    resumed = _run(tmp_path, "half", 4, resume=tmp_path / "half", **extra)
    assert resumed.iterations == 4
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(), strict=False):
        assert torch.equal(a, b), name
    assert untimed_rows(tmp_path / "full") == untimed_rows(tmp_path / "half")
    checkpoint = load_checkpoint_file(tmp_path / "half", kinds=["pso-tsp"])
    assert checkpoint["counters"]["iteration"] == 4


def test_antithetic_needs_an_even_batch():
    with pytest.raises(ConfigError, match=r"instances_per_iteration: .*\(got 3\)"):
        tiny_config(antithetic=True, instances_per_iteration=3)
    assert tiny_config(antithetic=True, instances_per_iteration=2).antithetic


def test_best_validation_checkpoint_holds_the_best_validated_model(tmp_path):
    from pglab.algos.pso_tsp import agent_from_checkpoint, classic_validation, greedy_validation

    result = train_pso_tsp(
        tiny_config(
            n_iterations=6,
            eval_interval=1,
            save_interval=100,
            lr=3e-2,
            mu_scale=5.0,
            particle_noise_std=0.3,
            noise_scope="swarm",
            reward="gbest_improvement",
            log_dir=tmp_path / "run",
        ),
        echo=lambda *a, **k: None,
    )
    rows = (result.run_dir / "eval.csv").read_text().splitlines()
    header = rows[0].split(",")
    improvements = [float(row.split(",")[header.index("eval/improvement_pct")]) for row in rows[1:]]
    assert len(improvements) == 6
    best = load_checkpoint_file(result.run_dir / "checkpoints" / "checkpoint_best.pt", kinds=["pso-tsp"])
    assert best["counters"]["best_validation_pct"] == pytest.approx(max(improvements))
    assert best["counters"]["iteration"] == 1 + improvements.index(max(improvements))
    # Re-validating the stored model reproduces the logged number (same instances and seed).
    config = agent_from_checkpoint(best).config
    coords = random_instances(config.eval_instances, config.env.num_cities, make_generator(10_000 + config.seed))
    classic = classic_validation(config, coords, seed=1)
    learned = greedy_validation(agent_from_checkpoint(best).model, config, coords, seed=1)
    assert float(100.0 * (classic - learned) / classic) == pytest.approx(max(improvements), abs=1e-4)


@pytest.mark.slow
def test_cli_train_then_evaluate_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = [
        "train",
        "pso-tsp",
        "--num_cities",
        "8",
        "--knn",
        "4",
        "--n_particles",
        "4",
        "--pso_iterations",
        "3",
        "--emb_dim",
        "8",
        "--num_heads",
        "2",
        "--node_layers",
        "1",
        "--instances_per_iteration",
        "2",
        "--n_iterations",
        "2",
        "--eval_interval",
        "0",
        "--controller",
        "edge_policy",
        "--algo",
        "reinforce_raw",
        "--device",
        "cpu",
        "--log_dir",
        str(run_dir),
    ]
    assert cli_main(args) == 0
    assert cli_main(args) == 2  # refuses to overwrite the finished run
    capsys.readouterr()
    out_json = tmp_path / "table.json"
    assert cli_main(["evaluate", str(run_dir), "--episodes", "3", "--output", str(out_json)]) == 0
    table = json.loads(out_json.read_text())
    methods = [row["method"] for row in table["rows"]]
    assert methods[0].startswith("optimal (held_karp)") and any(m.startswith("learned") for m in methods)
    assert table["rows"][0]["gap_pct"] == pytest.approx(0.0, abs=1e-9)
    assert all(row["gap_pct"] >= -1e-9 for row in table["rows"])  # nothing beats the exact optimum
    import pglab

    agent = pglab.load_checkpoint(run_dir)
    assert agent.config.env.num_cities == 8


@pytest.mark.parametrize("reward", ["tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit"])
def test_episode_sums_of_shaped_rewards(reward):
    # Telescoping sums: pbest/gbest improvements add up to the episode's total improvement.
    config = tiny_config(reward=reward, pso_iterations=4)
    model = build_model(config, torch.device("cpu"))
    # Seeds where both swarms improve on their answer during the episode (with most seeds
    # they do not, and the gbest sums below would compare 0 with 0).
    env = PSOTSPEnv(config.env, "cpu", make_generator(2))
    coords = random_instances(2, 8, make_generator(5))
    initial = PSOTSPEnv(config.env, "cpu", make_generator(2)).reset(coords)
    rollout = collect_rollout(model, env, coords, config, make_generator(2))
    assert bool((env.state.best_cost < initial.best_cost).all())
    reference = 0.7124 * math.sqrt(8)
    total = rollout.rewards.sum(0)  # [B, P]
    if reward == "tour_length":
        expected = (initial.cost.mean(1, keepdim=True) * 4 - rollout.tour_length.sum(0)) / reference
    elif reward == "pbest_improvement":
        expected = (initial.pbest_cost - env.state.pbest_cost) / reference
    elif reward == "gbest_improvement":
        expected = ((initial.best_cost - env.state.best_cost) / reference)[:, None].expand(2, 4)
    else:
        # gbest_credit: per instance the particles' credits add up to the swarm's improvement,
        # and at each step at most one particle (the one holding the new best tour) is credited
        expected_total = (initial.best_cost - env.state.best_cost) / reference
        assert torch.allclose(total.sum(1), expected_total, atol=1e-5)
        assert ((rollout.rewards != 0).sum(-1) <= 1).all() and (rollout.rewards >= 0).all()
        credited = rollout.rewards.argmax(-1)  # [T, B]
        improved = rollout.rewards.sum(-1) > 0
        assert torch.equal(rollout.tour_length.argmin(-1)[improved], credited[improved])
        return
    assert torch.allclose(total, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["tsp", "tsp_small", "tsp50", "tsp_edge"])
def test_shipped_configs_load(name):
    from pathlib import Path

    from pglab.run.config import load_yaml_config

    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.yaml"
    config = load_yaml_config(PSOTSPTrainConfig, path)
    assert config.env.dim == config.env.num_cities * config.env.k
