"""Batched 2-opt, common random numbers across a population, the constant-PSO
tuning, the swarm_es controller and its ES trainer, the encoder cache, the evaluation's
tuned / equal-time / 2-opt rows, and the bests stored as tours."""

import json

import numpy as np
import pytest
import torch

from pglab.algos.pso_tsp import (
    PSOTSPTrainConfig,
    centered_ranks,
    constant_swarm_lengths,
    controller_swarm_lengths,
    es_gradient,
    train_pso_tsp,
    tune_constant_coefficients,
)
from pglab.cli import main as cli_main
from pglab.envs.pso_tsp import (
    CLASSIC_C1,
    CLASSIC_C2,
    CLASSIC_W,
    PSOTSPEnv,
    PSOTSPEnvConfig,
    fixed_coefficients,
    random_instances,
    tour_cost,
    two_opt_batch,
)
from pglab.envs.tsp_solvers import two_opt
from pglab.nets.tsp_pso import SWARM_FEATURES, SwarmController, swarm_features
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.config import make_config
from pglab.run.seeding import make_generator

SMALL = PSOTSPEnvConfig(num_cities=8, knn=4, n_particles=4, pso_iterations=4)
QUIET = dict(echo=lambda *a, **k: None)
TINY_ES = dict(
    num_cities=8,
    knn=4,
    n_particles=4,
    pso_iterations=3,
    instances_per_iteration=2,
    eval_instances=4,
    tune_candidates=4,
    tune_instances=2,
    es_pairs=2,
    hidden=4,
    log_interval=1,
    device="cpu",
)


def random_tours(count, n, generator):
    return torch.stack(
        [
            torch.cat([torch.zeros(1, dtype=torch.long), 1 + torch.randperm(n - 1, generator=generator)])
            for _ in range(count)
        ]
    )


def test_batched_two_opt_makes_the_reference_moves_and_ends_at_local_optima():
    generator = make_generator(0)
    coords = random_instances(6, 12, generator).double()
    dist = torch.cdist(coords, coords)
    tours = random_tours(6, 12, generator)
    improved = two_opt_batch(dist, tours)
    for b in range(6):
        # the per-tour NumPy reference applies the same best-improvement moves
        assert np.array_equal(improved[b].numpy(), two_opt(dist[b].numpy(), tours[b].numpy()))
        # no 2-opt move shortens the result (exhaustive check)
        t = improved[b].tolist()
        length = tour_cost(dist[b : b + 1], improved[b].view(1, 1, -1)).item()
        for i in range(12):
            for j in range(i + 2, 12):
                candidate = t[: i + 1] + t[i + 1 : j + 1][::-1] + t[j + 1 :]
                assert tour_cost(dist[b : b + 1], torch.tensor(candidate).view(1, 1, -1)).item() >= length - 1e-9
    assert torch.equal(improved[:, 0], torch.zeros(6, dtype=torch.long))


def test_replicas_share_random_numbers_and_chunks_do_not_change_results():
    coords = random_instances(3, 8, make_generator(1))
    same = torch.tensor([[0.5, 1.0, 2.0]] * 3)
    lengths = constant_swarm_lengths(SMALL, coords, same, seed=4)
    assert torch.equal(lengths[0], lengths[1]) and torch.equal(lengths[0], lengths[2])
    mixed = torch.tensor([[CLASSIC_W, CLASSIC_C1, CLASSIC_C2], [0.2, 2.0, 0.5], [-0.5, 1.0, 1.0]])
    together = constant_swarm_lengths(SMALL, coords, mixed, seed=4)
    one_by_one = constant_swarm_lengths(SMALL, coords, mixed, seed=4, max_batch_cells=1)
    assert torch.equal(together, one_by_one)
    # each block is the swarm a plain env with the same seed runs on its own (common random numbers)
    env = PSOTSPEnv(SMALL, "cpu", make_generator(4), decode="greedy")
    state = env.reset(coords)
    for _ in range(SMALL.pso_iterations):
        state, _, _ = env.step(fixed_coefficients(tuple(state.position.shape), 0.2, 2.0, 0.5))
    assert torch.equal(state.best_cost, together[1])


def test_tuning_keeps_classic_among_the_finalists_and_never_picks_worse():
    tuned = tune_constant_coefficients(SMALL, candidates=6, instances=3, seed=0)
    assert tuned["score"] <= tuned["classic_score"] == pytest.approx(1.0)
    assert any(row["w"] == pytest.approx(CLASSIC_W) for row in tuned["stage2"])
    assert len(tuned["stage1"]) == 6 and len(tuned["stage2"]) == 5
    # the winner is the finalist with the best second-stage score, and the finalists are
    # the first stage's best
    winner = min(tuned["stage2"], key=lambda row: row["score"])
    assert (tuned["w"], tuned["c1"], tuned["c2"], tuned["score"]) == (
        winner["w"],
        winner["c1"],
        winner["c2"],
        winner["score"],
    )
    ranked = [row["w"] for row in sorted(tuned["stage1"], key=lambda row: row["score"])]
    classic_w = tuned["stage1"][0]["w"]
    expected = set(ranked[:5]) if classic_w in ranked[:5] else set(ranked[:4]) | {classic_w}
    assert {row["w"] for row in tuned["stage2"]} == expected
    only_classic = tune_constant_coefficients(SMALL, candidates=1, instances=2, seed=0)
    assert (only_classic["w"], only_classic["c1"]) == (pytest.approx(CLASSIC_W), pytest.approx(CLASSIC_C1))


def test_untrained_controller_is_its_base_constant_and_population_matches_single():
    coords = random_instances(3, 8, make_generator(2))
    controller = SwarmController((0.3, 2.0, 0.8), hidden=5, generator=make_generator(0))
    env = PSOTSPEnv(SMALL, "cpu", make_generator(6), decode="greedy")
    learned = controller_swarm_lengths(controller, env, coords, controller.flat_parameters()[None])[0]
    assert torch.equal(learned, constant_swarm_lengths(SMALL, coords, torch.tensor([[0.3, 2.0, 0.8]]), seed=6)[0])
    # a population of K parameter vectors gives each member's own output
    flat = controller.flat_parameters()[None] + 0.3 * torch.randn(
        4, controller.flat_parameters().numel(), generator=make_generator(1)
    )
    features = torch.randn(4, 2, 3, len(SWARM_FEATURES), generator=make_generator(3))
    together = controller(features, controller.population(flat))
    for k in range(4):
        single = SwarmController((0.3, 2.0, 0.8), hidden=5)
        torch.nn.utils.vector_to_parameters(flat[k], single.parameters())
        torch.testing.assert_close(together[k], single(features[k]))


def test_swarm_features_of_a_known_state():
    env = PSOTSPEnv(SMALL, "cpu", make_generator(0), decode="greedy")
    state = env.reset(random_instances(2, 8, make_generator(1)))
    state, _, _ = env.step(fixed_coefficients(tuple(state.position.shape)))
    features = swarm_features(state, SMALL.pso_iterations)
    assert features.shape == (2, 4, len(SWARM_FEATURES))
    column = dict(zip(SWARM_FEATURES, features.unbind(-1), strict=False))
    assert torch.all(column["progress"] == 0.25)
    assert torch.all(column["is_leader"].sum(1) >= 1)  # the particle holding gbest
    torch.testing.assert_close(column["pbest_gap"], state.pbest_cost / state.gbest_cost[:, None] - 1)
    torch.testing.assert_close(column["speed"], state.velocity.pow(2).mean(-1).sqrt())
    assert bool((column["pbest_gap"] >= 0).all()) and bool((column["pbest_gap"] <= column["cost_gap"] + 1e-6).all())


def test_es_gradient_points_up_a_known_linear_fitness(monkeypatch):
    import pglab.algos.pso_tsp as pso

    controller = SwarmController(hidden=0)
    direction = torch.randn(controller.flat_parameters().numel(), generator=make_generator(0))
    direction /= direction.norm()

    def linear_lengths(controller, env, coords, flat):  # shorter tours along +direction
        return (1.0 - 0.01 * flat @ direction)[:, None].expand(-1, coords.shape[0])

    monkeypatch.setattr(pso, "controller_swarm_lengths", linear_lengths)
    gradient, metrics = es_gradient(
        controller, None, torch.zeros(2, 8, 2), pairs=400, sigma=0.1, generator=make_generator(1)
    )
    cosine = float(gradient @ direction / gradient.norm())
    assert cosine > 0.8  # the ES direction finds the improving direction
    ranks = centered_ranks(torch.tensor([3.0, -1.0, 10.0, 0.0]))
    torch.testing.assert_close(ranks, torch.tensor([1 / 6, -0.5, 0.5, -1 / 6]))


@pytest.mark.slow
def test_swarm_es_run_resumes_bit_exactly_and_validates_its_best(tmp_path):
    full = train_pso_tsp(
        make_config(PSOTSPTrainConfig, **TINY_ES, n_iterations=4, eval_interval=2, log_dir=tmp_path / "full"), **QUIET
    )
    train_pso_tsp(
        make_config(PSOTSPTrainConfig, **TINY_ES, n_iterations=2, eval_interval=2, log_dir=tmp_path / "half"), **QUIET
    )
    resumed = train_pso_tsp(
        make_config(PSOTSPTrainConfig, resume=tmp_path / "half", n_iterations=4),
        given=frozenset({"resume", "n_iterations"}),
        **QUIET,
    )
    for (name, a), (_, b) in zip(full.model.state_dict().items(), resumed.model.state_dict().items(), strict=False):
        assert torch.equal(a, b), name
    tuned = json.loads((tmp_path / "full" / "tuned.json").read_text())
    assert torch.equal(full.model.base, torch.tensor([tuned["w"], tuned["c1"], tuned["c2"]]))
    best = load_checkpoint_file(tmp_path / "full" / "checkpoints" / "checkpoint_best.pt", kinds=["pso-tsp"])
    rows = (tmp_path / "full" / "eval.csv").read_text().splitlines()
    header = rows[0].split(",")
    vs_tuned = [float(r.split(",")[header.index("eval/improvement_vs_tuned_pct")]) for r in rows[1:]]
    assert best["counters"]["best_validation_pct"] == pytest.approx(max(vs_tuned))


def test_encoder_cache_gives_the_uncached_coefficients_and_follows_new_weights():
    from pglab.algos.pso_tsp import build_model

    config = make_config(
        PSOTSPTrainConfig,
        controller="edge_policy",
        num_cities=8,
        knn=4,
        n_particles=4,
        pso_iterations=3,
        emb_dim=8,
        num_heads=2,
        node_layers=1,
        device="cpu",
    )
    torch.manual_seed(0)
    model = build_model(config, torch.device("cpu")).eval()
    with torch.no_grad():  # a trained-looking model: the zero-initialised head would hide the encoding
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    env = PSOTSPEnv(config.env, "cpu", make_generator(0), decode="greedy")
    state = env.reset(random_instances(2, 8, make_generator(1)))

    def uncached(s):
        from pglab.nets.tsp_pso import swarm_scalars

        with torch.no_grad():  # as act: the same (inference) attention kernels
            node_emb, edge_emb = model.encode_instances(s.coords, s.neighbours, s.edge_dist)
            return model(node_emb, edge_emb, s.position, s.velocity, s.pbest, s.gbest, swarm_scalars(s, 3))[0]

    for _ in range(2):
        assert torch.equal(model.act(state, 3, deterministic=True), uncached(state))
        state, _, _ = env.step(model.act(state, 3, deterministic=True))
    with torch.no_grad():  # new weights (an optimiser step): the cache must not serve the old encoding
        model.node_encoder.input.weight.add_(0.5)
    assert torch.equal(model.act(state, 3, deterministic=True), uncached(state))
    other = env.reset(random_instances(2, 8, make_generator(9)))  # a new episode: new instances
    assert torch.equal(model.act(other, 3, deterministic=True), uncached(other))


def test_personal_bests_are_stored_as_tours_that_reproduce_their_costs():
    env = PSOTSPEnv(SMALL, "cpu", make_generator(3), decode="sample")  # sampled decoding: positions do not reproduce
    state = env.reset(random_instances(2, 8, make_generator(4)))
    for _ in range(4):
        state, _, _ = env.step(fixed_coefficients(tuple(state.position.shape)))
        torch.testing.assert_close(tour_cost(state.dist, state.pbest_tour), state.pbest_cost)
        torch.testing.assert_close(tour_cost(state.dist, state.best_tour[:, None]).squeeze(1), state.best_cost)
        rows = torch.arange(2)
        assert torch.equal(state.pbest_cost[rows, state.pbest_cost.argmin(1)], state.gbest_cost)


@pytest.mark.slow
def test_evaluate_tune_then_tuned_equal_time_and_two_opt_rows(tmp_path, capsys):
    tuned_file = tmp_path / "tuned.json"
    flags = ["--num_cities", "8", "--n_particles", "4", "--pso_iterations", "3", "--device", "cpu"]
    assert (
        cli_main(
            [
                "evaluate",
                "pso-tsp",
                "--tune",
                "4",
                "--episodes",
                "2",
                "--seed",
                "1",
                "--output",
                str(tuned_file),
                *flags,
            ]
        )
        == 0
    )
    tuned = json.loads(tuned_file.read_text())
    assert {"w", "c1", "c2", "stage1", "stage2"} <= set(tuned) and tuned["num_cities"] == 8
    run = tmp_path / "run"
    train_pso_tsp(make_config(PSOTSPTrainConfig, **TINY_ES, n_iterations=1, eval_interval=0, log_dir=run), **QUIET)
    table_file = tmp_path / "table.json"
    assert (
        cli_main(
            [
                "evaluate",
                str(run),
                "--episodes",
                "3",
                "--tuned",
                str(tuned_file),
                "--local_search",
                "2opt",
                "--output",
                str(table_file),
                "--pso_iterations",
                "3",
            ]
        )
        == 0
    )
    table = json.loads(table_file.read_text())
    rows = {row["method"]: row for row in table["rows"]}
    lengths = {name: np.array(values) for name, values in table["lengths"].items()}
    tuned_name = next(name for name in rows if name.startswith("tuned PSO (w="))
    assert rows[tuned_name]["vs_tuned_pct"] == 0.0
    equal_time = [name for name in rows if "equal time" in name]
    assert len(equal_time) == 2 and all(rows[name]["pso_iterations"] >= 3 for name in equal_time)
    for name in ("learned PSO (controller)", "classic PSO (w=0.7298, c=1.49618)", tuned_name):
        assert np.all(lengths[f"{name} + 2-opt"] <= lengths[name] + 1e-9)  # 2-opt never lengthens a tour
    assert all(row["gap_pct"] >= -1e-9 and row["cpu_ms_per_instance"] >= 0 for row in table["rows"])
    assert cli_main(["evaluate", "pso-tsp", "--tune", "4"]) == 2  # --tune needs --output
    assert "--output" in capsys.readouterr().err


def test_defaults_train_the_recommended_setup_and_shipped_configs_agree():
    from pathlib import Path

    from pglab.run.config import load_yaml_config

    default = PSOTSPTrainConfig()
    assert default.controller == "swarm_es" and default.update.entropy_coef == 0.01
    root = Path(__file__).resolve().parent.parent / "configs"
    shipped = load_yaml_config(PSOTSPTrainConfig, root / "tsp.yaml")
    assert shipped == default  # `pglab train pso-tsp` with no --config is configs/tsp.yaml
    edge = load_yaml_config(PSOTSPTrainConfig, root / "tsp_edge.yaml")
    assert edge.controller == "edge_policy" and edge.train_decode == "greedy" and edge.reward == "gbest_improvement"
