"""``pglab train maxk-pomo`` / ``pglab evaluate``: configs, exact resume, evaluation, references."""

import csv
import json

import pytest
import torch

from pglab.cli import main
from pglab.configs.maxk import MaxKPOMOTrainConfig
from pglab.errors import ConfigError
from pglab.run.checkpoint import load_checkpoint_file

TINY = [
    "--num-loc",
    "6",
    "--k",
    "3",
    "--batch-size",
    "4",
    "--embed-dim",
    "16",
    "--num-encoder-layers",
    "1",
    "--num-heads",
    "2",
    "--device",
    "cpu",
    "--log-every",
    "2",
    "--save-interval",
    "2",
]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"k": 21}, "k"),
        ({"k": 0}, "k"),
        ({"k": 20, "variance_reduction": "sample_loo"}, "variance_reduction"),
        ({"k": 1, "variance_reduction": "subloo"}, "variance_reduction"),
        ({"embed_dim": 64, "num_heads": 5}, "num_heads"),
        ({"lr": -1.0}, "lr"),
        ({"device": "tpu"}, "device"),
        ({"trainer": "keras"}, "trainer"),
        ({"trainer": "lightning", "resume": "runs/x"}, "resume"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, field):
    with pytest.raises(ConfigError) as info:
        MaxKPOMOTrainConfig(**overrides)
    assert info.value.field == field


@pytest.mark.parametrize(("k", "mode"), [(1, "subloo"), (20, "sample_loo")])
def test_pomo_baseline_ignores_the_maxk_mode_constraints(k, mode):
    # The same values are refused for maxk-pomo (subloo needs k >= 2, sample_loo num_loc > k) ...
    with pytest.raises(ConfigError) as info:
        MaxKPOMOTrainConfig(algo="maxk-pomo", k=k, variance_reduction=mode)
    assert info.value.field == "variance_reduction"
    # ... and accepted, unchanged, for the POMO baseline, whose loss does not use them.
    config = MaxKPOMOTrainConfig(algo="pomo", k=k, variance_reduction=mode)
    assert (config.algo, config.k, config.variance_reduction, config.label) == ("pomo", k, mode, "pomo")


def test_bad_flags_exit_with_code_2(capsys):
    assert main(["train", "maxk-pomo", "--k", "30"]) == 2
    assert main(["train", "maxk-pomo", "--variance-reduction", "loo"]) == 2
    assert main(["evaluate", "maxk-pomo"]) == 2  # no checkpoints


@pytest.mark.co
def test_elkai_reference_tours_are_optimal_on_small_instances():
    pytest.importorskip("elkai")
    from pglab.algos.maxk_pomo import reference_tour_lengths
    from pglab.envs.tsp_solvers import distance_matrix, held_karp

    gen = torch.Generator().manual_seed(1)
    locs = torch.rand(6, 10, 2, generator=gen, dtype=torch.float64)
    got = reference_tour_lengths(locs)
    exact = torch.tensor([held_karp(distance_matrix(c.numpy()))[1] for c in locs], dtype=torch.float64)
    # Integer scaling (1e6) inside LKH: the tour is optimal, its float length exact.
    torch.testing.assert_close(got, exact, rtol=1e-6, atol=1e-6)


def read_rows(path):
    with open(path) as handle:
        return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(handle)]


@pytest.mark.co
@pytest.mark.slow
def test_train_resume_is_bit_identical_and_evaluate_reports_gaps(tmp_path, capsys):
    pytest.importorskip("rl4co")
    full, part = tmp_path / "full", tmp_path / "part"
    assert main(["train", "maxk-pomo", *TINY, "--n-steps", "6", "--log-dir", str(full), "--json"]) == 0
    # the ending (--json: one JSON document): the last logged batch's tour lengths
    report = json.loads(capsys.readouterr().out)
    summary, last = report["summary"], report["last"]
    assert summary["title"] == "pglab train maxk-pomo: 6 steps"
    assert summary["result"] == {
        "mean tour length (last batch)": last["stats/tour_length"],
        "best of 6": last["stats/best_of_n_tour_length"],
    }
    assert summary["run_dir"] == str(full) and summary["next"] == f"pglab evaluate {full}"
    assert main(["train", "maxk-pomo", *TINY, "--n-steps", "2", "--log-dir", str(part)]) == 0
    assert main(["train", "maxk-pomo", "--resume", str(part), "--n-steps", "6"]) == 0
    a = load_checkpoint_file(full / "checkpoints" / "checkpoint_latest.pt")
    b = load_checkpoint_file(part / "checkpoints" / "checkpoint_latest.pt")
    assert a["counters"]["step"] == b["counters"]["step"] == 6
    assert a["counters"]["env_steps"] == b["counters"]["env_steps"] == 6 * 4 * 6  # steps x instances x starts
    for name, tensor in a["models"]["model"].items():
        assert torch.equal(tensor, b["models"]["model"][name]), name
    assert read_rows(full / "metrics.csv") == read_rows(part / "metrics.csv")
    # A resumed run may not change what it trains.
    assert main(["train", "maxk-pomo", "--resume", str(part), "--n-steps", "8", "--lr", "0.5"]) == 2
    # An existing run directory is not overwritten.
    assert main(["train", "maxk-pomo", *TINY, "--n-steps", "2", "--log-dir", str(full)]) == 2

    out = tmp_path / "eval.json"
    capsys.readouterr()
    assert main(["evaluate", str(full), "--episodes", "12", "--k", "3", "--device", "cpu", "--output", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    # the ending (human form): max@k beside the elkai tour, its reference; no target, no verdict
    ending = capsys.readouterr().out.splitlines()[-4:]
    assert ending == [
        "pglab evaluate maxk-pomo: TSP6, 12 instances",
        f"result:    maxk-pomo/subloo max@3 tour {row['maxk_length']:.4f}; gap to elkai {row['maxk_gap_pct']:.2f}%",
        f"reference: elkai (LKH) tour {row['reference_length']:.4f}",
        f"run:       {full}",
    ]
    assert row["label"] == "maxk-pomo/subloo" and row["step"] == 6
    # Tours of the policy are never shorter than the (optimal) reference tours.
    for key in ("greedy", "maxk", "sample_best", "sample_mean"):
        assert row[f"{key}_gap_pct"] >= -1e-6
    assert row["sample_best_length"] <= row["maxk_length"] <= row["sample_mean_length"]

    # pglab.load_checkpoint rebuilds the trained module exactly.
    import pglab

    agent = pglab.load_checkpoint(full, device="cpu")
    assert agent.model.k == 3 and not agent.model.training and agent.config.num_loc == 6
    for name, tensor in agent.model.state_dict().items():
        assert torch.equal(tensor, a["models"]["model"][name]), name


@pytest.mark.co
def test_evaluate_rejects_a_checkpoint_of_another_kind(tmp_path):
    from pglab.run.checkpoint import build_checkpoint, save_checkpoint

    path = save_checkpoint(tmp_path / "other.pt", build_checkpoint(kind="ghm-mc", config={}, counters={}, models={}))
    assert main(["evaluate", "maxk-pomo", "--checkpoints", str(path), "--optimal", "none"]) == 2


@pytest.mark.co
@pytest.mark.slow
def test_sigterm_writes_a_final_checkpoint_and_resume_completes_the_run(tmp_path, monkeypatch):
    pytest.importorskip("rl4co")
    import os
    import signal

    import pglab.algos.maxk_train as maxk_train

    base = dict(
        num_loc=6,
        k=3,
        batch_size=4,
        embed_dim=16,
        num_encoder_layers=1,
        num_heads=2,
        device="cpu",
        log_every=1,
        save_interval=100,
        n_steps=5,
    )
    full = maxk_train.train_maxk_pomo(MaxKPOMOTrainConfig(**base, log_dir=tmp_path / "full"), echo=lambda *a, **k: None)
    assert not full["interrupted"]

    real_locs = maxk_train.random_locs
    calls = {"n": 0}

    def locs_then_signal(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # during step 3: as if the user pressed Ctrl-C / the job was killed
            os.kill(os.getpid(), signal.SIGTERM)
        return real_locs(*args, **kwargs)

    monkeypatch.setattr(maxk_train, "random_locs", locs_then_signal)
    cut = maxk_train.train_maxk_pomo(MaxKPOMOTrainConfig(**base, log_dir=tmp_path / "cut"), echo=lambda *a, **k: None)
    assert cut["interrupted"] and cut["step"] == 3 and cut["exit_code"] == 130
    saved = load_checkpoint_file(tmp_path / "cut" / "checkpoints" / "checkpoint_latest.pt")
    assert saved["counters"]["step"] == 3 and saved["counters"]["env_steps"] == 3 * 4 * 6
    monkeypatch.setattr(maxk_train, "random_locs", real_locs)
    maxk_train.train_maxk_pomo(MaxKPOMOTrainConfig(resume=tmp_path / "cut", n_steps=5), echo=lambda *a, **k: None)
    a = load_checkpoint_file(tmp_path / "full" / "checkpoints" / "checkpoint_latest.pt")
    b = load_checkpoint_file(tmp_path / "cut" / "checkpoints" / "checkpoint_latest.pt")
    for name, tensor in a["models"]["model"].items():
        assert torch.equal(tensor, b["models"]["model"][name]), name


@pytest.mark.co
def test_lightning_trainer_trains_and_leaves_a_pglab_checkpoint(tmp_path):
    """--trainer lightning: RL4COTrainer.fit runs n_steps batches with the Max@K loss,
    logs rho_hat, keeps float32 matmuls, and the final model is a pglab checkpoint."""
    import pglab

    run = tmp_path / "lightning"
    precision = torch.get_float32_matmul_precision()
    assert TINY[-4:] == ["--log-every", "2", "--save-interval", "2"]
    args = [
        "train",
        "maxk-pomo",
        *TINY[:-4],
        "--log-every",
        "1",
        "--trainer",
        "lightning",
        "--n-steps",
        "3",
        "--log-dir",
        str(run),
    ]
    assert main(args) == 0
    assert torch.get_float32_matmul_precision() == precision
    rows = list(csv.DictReader((run / "lightning" / "metrics.csv").open()))
    logged = [row for row in rows if row.get("train/rho_hat")]
    assert [int(row["step"]) for row in logged] == [0, 1, 2]
    # rho_hat (max@3 of the sampled rewards) is at least their mean, batch by batch.
    assert all(float(row["train/rho_hat"]) >= float(row["train/reward"]) for row in logged)
    # The shell's logs hold the same numbers under pglab's names, one row per step.
    ours = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(row["step"]) for row in ours] == [1, 2, 3]
    assert all(float(row["perf/env_steps_per_s"]) > 0 and float(row["perf/step_s"]) > 0 for row in ours)
    for theirs, row in zip(logged, ours, strict=False):
        assert float(row["stats/max@3_tour_length"]) == pytest.approx(-float(theirs["train/rho_hat"]), rel=1e-6)
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    agent = pglab.load_checkpoint(run, device="cpu")
    assert agent.config.trainer == "lightning" and agent.model.k == 3
    saved = load_checkpoint_file(run / "checkpoints" / "checkpoint_latest.pt")
    assert saved["counters"]["step"] == 3 and saved["counters"]["env_steps"] == 3 * 4 * 6
    meta = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["meta"]
    assert meta["kind"] == "maxk-pomo" and meta["label"] == "maxk-pomo/subloo"
    # The rows evaluate like any run, and a Lightning run cannot be resumed.
    assert (
        main(
            [
                "evaluate",
                "maxk-pomo",
                "--checkpoints",
                str(run),
                "--optimal",
                "none",
                "--episodes",
                "4",
                "--k",
                "3",
                "--device",
                "cpu",
            ]
        )
        == 0
    )
    assert main(["train", "maxk-pomo", "--resume", str(run)]) == 2
