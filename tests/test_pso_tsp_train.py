"""HyperparamTSPModel, the Deep-PSO trainer (rl modes, resume, bad input) and evaluation."""
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
from pglab.run.seeding import make_generator

TINY = dict(num_cities=8, knn=4, n_particles=4, pso_iterations=3, emb_dim=8, num_heads=2, node_layers=1,
            instances_per_iteration=2, eval_instances=4, device="cpu", log_interval=1)


def tiny_config(**overrides):
    return PSOTSPTrainConfig(**{**TINY, **overrides})


def test_model_shapes_and_classic_initial_mean():
    config = tiny_config()
    model = build_model(config, torch.device("cpu"))
    env = PSOTSPEnv(config.env_config(), "cpu", make_generator(0))
    state = env.reset(random_instances(3, 8, make_generator(1)))
    node_emb, edge_emb = model.encode_instances(state.coords, state.neighbours, state.edge_dist)
    mu, sigma, values = model(node_emb, edge_emb, state.position, state.velocity, state.pbest, state.gbest, swarm_scalars(state, 3))
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


@pytest.mark.parametrize("rl_mode", ["vpg_gae", "reinforce_raw"])
def test_reevaluation_reproduces_rollout_and_gae_layout(rl_mode):
    # evaluate(indices) on unchanged parameters must give back the rollout's own
    # log-probs and values for any subset, in any order: checks the (t, b, p) indexing.
    config = tiny_config(rl_mode=rl_mode)
    model = build_model(config, torch.device("cpu"))
    torch.nn.init.normal_(model.policy_head[-1].weight, std=0.1)  # make outputs depend on the state
    env = PSOTSPEnv(config.env_config(), "cpu", make_generator(0))
    rollout = collect_rollout(model, env, random_instances(2, 8, make_generator(1)), config, make_generator(2))
    evaluate = make_evaluate(model, rollout, config)
    indices = torch.randperm(3 * 2 * 4, generator=make_generator(3))[:10]
    log_probs, _, values = evaluate(indices)
    assert torch.allclose(log_probs, rollout.log_probs.reshape(-1)[indices], atol=1e-5)
    assert torch.allclose(values, rollout.values.reshape(-1)[indices], atol=1e-5)
    advantages, returns = advantages_and_returns(rollout, config.hyperparams())
    # slow reference: per particle, backwards over the T = 3 iterations
    gamma, lam = config.gamma, (1.0 if rl_mode == "reinforce_raw" else config.gae_lambda)
    T, B, P = rollout.rewards.shape
    for b in range(B):
        for p in range(P):
            v = rollout.values[:, b, p] if rl_mode == "vpg_gae" else torch.zeros(T)
            running, next_value = 0.0, 0.0
            for t in reversed(range(T)):
                delta = rollout.rewards[t, b, p] + gamma * next_value - v[t]
                running = delta + gamma * lam * running
                flat = (t * B + b) * P + p
                assert advantages[flat].item() == pytest.approx(float(running), abs=1e-5)
                next_value = v[t]


def test_config_validation():
    with pytest.raises(ConfigError, match="n_particles=0"):
        tiny_config(n_particles=0)
    with pytest.raises(ConfigError, match="rl_mode"):
        tiny_config(rl_mode="a3c")
    with pytest.raises(ConfigError, match="emb_dim"):
        tiny_config(emb_dim=6, num_heads=4)
    assert isinstance(tiny_config().hyperparams(), OnPolicyHyperparams)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("n_particles: [1, 2\n")
    assert cli_main(["train", "pso-tsp", "--config", str(bad_yaml)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    zero = tmp_path / "zero.yaml"
    zero.write_text("n_particles: 0\n")
    assert cli_main(["train", "pso-tsp", "--config", str(zero)]) == 2
    assert cli_main(["train", "pso-tsp", "--n_particles", "0", "--log_dir", str(tmp_path / "x")]) == 2
    assert cli_main(["train", "pso-tsp", "--rl-mode", "a2c", "--log_dir", str(tmp_path / "y")]) == 2
    assert cli_main(["evaluate", "pso-tsp", "--num_instances", "0"]) == 2
    assert cli_main(["evaluate", str(tmp_path / "missing.pt")]) == 2
    assert not (tmp_path / "x").exists()


def _run(tmp_path, name, n_iterations, resume=None, **overrides):
    config = tiny_config(n_iterations=n_iterations, save_interval=100, eval_interval=2, **overrides,
                         log_dir=None if resume else tmp_path / name, resume=resume)
    return train_pso_tsp(config, echo=lambda *a, **k: None)


@pytest.mark.slow
@pytest.mark.parametrize("rl_mode", ["ppo", "vpg_gae"])
def test_resume_is_bit_exact(tmp_path, rl_mode):
    extra = {"rl_mode": rl_mode, "ppo_epochs": 2, "num_minibatches": 2}
    full = _run(tmp_path, "full", 4, **extra)
    _run(tmp_path, "half", 2, **extra)
    resumed = _run(tmp_path, "half", 4, resume=tmp_path / "half", **extra)
    assert resumed.iterations == 4
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items()):
        assert torch.equal(a, b), name
    full_rows = (tmp_path / "full" / "metrics.csv").read_text().splitlines()
    half_rows = (tmp_path / "half" / "metrics.csv").read_text().splitlines()
    strip = lambda rows: [",".join(r.split(",")[:-4]) for r in rows]  # noqa: E731 - drop timing columns
    assert strip(full_rows) == strip(half_rows)
    checkpoint = load_checkpoint_file(tmp_path / "half", kinds=["pso-tsp"])
    assert checkpoint["counters"]["iteration"] == 4


@pytest.mark.slow
def test_cli_train_then_evaluate_checkpoint(tmp_path, capsys):
    run_dir = tmp_path / "run"
    args = ["train", "pso-tsp", "--num_cities", "8", "--knn", "4", "--n_particles", "4", "--pso_iterations", "3",
            "--emb_dim", "8", "--num_heads", "2", "--node_layers", "1", "--instances_per_iteration", "2",
            "--n_iterations", "2", "--eval_interval", "0", "--rl-mode", "reinforce_raw", "--device", "cpu", "--log_dir", str(run_dir)]
    assert cli_main(args) == 0
    assert cli_main(args) == 2  # refuses to overwrite the finished run
    capsys.readouterr()
    out_json = tmp_path / "table.json"
    assert cli_main(["evaluate", str(run_dir), "--num_instances", "3", "--output", str(out_json)]) == 0
    table = json.loads(out_json.read_text())
    methods = [row["method"] for row in table["rows"]]
    assert methods[0].startswith("optimal (held_karp)") and any(m.startswith("learned") for m in methods)
    assert table["rows"][0]["gap_pct"] == pytest.approx(0.0, abs=1e-9)
    assert all(row["gap_pct"] >= -1e-9 for row in table["rows"])  # nothing beats the exact optimum
    import pglab

    agent = pglab.load_checkpoint(run_dir)
    assert agent.config.num_cities == 8


@pytest.mark.parametrize("reward", ["tour_length", "pbest_improvement", "gbest_improvement"])
def test_episode_sums_of_shaped_rewards(reward):
    # Telescoping sums: pbest/gbest improvements add up to the episode's total improvement.
    config = tiny_config(reward=reward, pso_iterations=4)
    model = build_model(config, torch.device("cpu"))
    env = PSOTSPEnv(config.env_config(), "cpu", make_generator(0))
    coords = random_instances(2, 8, make_generator(1))
    initial = PSOTSPEnv(config.env_config(), "cpu", make_generator(0)).reset(coords)
    rollout = collect_rollout(model, env, coords, config, make_generator(2))
    reference = 0.7124 * math.sqrt(8)
    total = rollout.rewards.sum(0)  # [B, P]
    if reward == "tour_length":
        expected = (initial.cost.mean(1, keepdim=True) * 4 - rollout.tour_length.sum(0)) / reference
    elif reward == "pbest_improvement":
        expected = (initial.pbest_cost - env.state.pbest_cost) / reference
    else:
        expected = ((initial.best_cost - env.state.best_cost) / reference)[:, None].expand(2, 4)
    assert torch.allclose(total, expected, atol=1e-5)


@pytest.mark.parametrize("name", ["tsp", "tsp_small", "tsp50"])
def test_shipped_configs_load(name):
    from pathlib import Path

    from pglab.run.config import load_yaml_config

    path = Path(__file__).resolve().parent.parent / "configs" / f"{name}.yaml"
    config = load_yaml_config(PSOTSPTrainConfig, path)
    assert config.env_config().dim == config.num_cities * config.env_config().k
