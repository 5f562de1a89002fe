"""pso-tsp on the shared training shell: resume semantics, logs, exit codes,
the CLI vocabulary (with its aliases), the agent API and ``--help``
without torch. Tiny instances throughout (TSP8, 4 particles, 3 PSO steps)."""

import csv
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

import pglab
from pglab.agent import Agent, NoCritic
from pglab.algos.pso_tsp import PSOTSPTrainConfig, train_pso_tsp
from pglab.cli import main as cli_main
from pglab.envs.pso_tsp import PSOTSPEnv, random_instances
from pglab.errors import EXIT_INTERRUPTED, ConfigError
from pglab.run.checkpoint import load_checkpoint_file, save_checkpoint
from pglab.run.config import config_from_dict, load_yaml_config, make_config, parse_flags
from pglab.run.seeding import make_generator

TINY_FLAGS = [
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
    "--eval_instances",
    "4",
    "--eval_interval",
    "0",
    "--algo",
    "reinforce_raw",
    "--device",
    "cpu",
    "--controller",
    "edge_policy",
    "--train_decode",
    "sample",
    "--reward",
    "tour_length",
    "--particle_noise_std",
    "0",
    "--no-antithetic",
    "--mu_scale",
    "1",
]
# The edge policy with the settings these tests are written for.
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
    eval_interval=0,
    algo="reinforce_raw",
    device="cpu",
    controller="edge_policy",
    train_decode="sample",
    reward="tour_length",
    particle_noise_std=0.0,
    noise_scope="particle",
    antithetic=False,
    mu_scale=1.0,
    lr=3e-4,
    entropy_coef=0.0,
)
QUIET = dict(echo=lambda *a, **k: None)


def logged_iterations(run_dir, name="metrics.csv"):
    with open(run_dir / name, newline="") as handle:
        return [int(row["iteration"]) for row in csv.DictReader(handle)]


def test_help_does_not_import_torch():
    code = (
        "import sys\nfrom pglab.cli import main\n"
        "try:\n    main(['train', 'pso-tsp', '--help'])\nexcept SystemExit:\n    pass\n"
        "try:\n    main(['evaluate', 'pso-tsp', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "--algo" in out.stdout and "--episodes" in out.stdout and "--threads" in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH"


@pytest.mark.slow
def test_resume_applies_a_given_flag_equal_to_its_default(tmp_path):
    run_dir = tmp_path / "run"
    assert (
        cli_main(
            ["train", "pso-tsp", *TINY_FLAGS, "--n_iterations", "2", "--log_interval", "1", "--log_dir", str(run_dir)]
        )
        == 0
    )
    # --log-interval 5 is the default; given on the command line it must still be applied
    assert cli_main(["train", "pso-tsp", "--resume", str(run_dir), "--n_iterations", "4", "--log_interval", "5"]) == 0
    assert logged_iterations(run_dir) == [1, 2, 4]
    assert load_checkpoint_file(run_dir, kinds=["pso-tsp"])["config"]["log_interval"] == 5


def test_resume_refuses_a_given_non_resumable_flag_naming_it(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert (
        cli_main(["train", "pso-tsp", *TINY_FLAGS, "--n_iterations", "1", "--lr", "3e-4", "--log_dir", str(run_dir)])
        == 0
    )
    capsys.readouterr()
    # 1e-3 is the default lr, and given, it differs from the run's 3e-4: the resume refuses it.
    assert cli_main(["train", "pso-tsp", "--resume", str(run_dir), "--n_iterations", "2", "--lr", "1e-3"]) == 2
    err = capsys.readouterr().err
    assert "lr" in err and "resume" in err and len(err.strip().splitlines()) == 1
    assert load_checkpoint_file(run_dir, kinds=["pso-tsp"])["counters"]["iteration"] == 1
    # the old flag name of a renamed field is refused the same way, under its new name
    assert cli_main(["train", "pso-tsp", "--resume", str(run_dir), "--n_iterations", "2", "--rl-mode", "ppo"]) == 2
    assert "algo" in capsys.readouterr().err


@pytest.mark.slow
def test_logs_tensorboard_summary_and_exit_130_after_a_stop(tmp_path, monkeypatch):
    from pglab.run.shell import TrainingRun

    run_dir = tmp_path / "run"
    # SIGINT after the first iteration, as the shell sees it.
    monkeypatch.setattr(TrainingRun, "stop_requested", property(lambda self: self._steps_this_process >= 1))
    flags = [
        *TINY_FLAGS,
        "--n_iterations",
        "3",
        "--log_interval",
        "1",
        "--eval_interval",
        "1",
        "--log_dir",
        str(run_dir),
    ]
    assert cli_main(["train", "pso-tsp", *flags]) == EXIT_INTERRUPTED
    assert load_checkpoint_file(run_dir, kinds=["pso-tsp"])["counters"]["iteration"] == 1
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"
    monkeypatch.undo()
    assert cli_main(["train", "pso-tsp", "--resume", str(run_dir)]) == 0
    assert logged_iterations(run_dir) == [1, 2, 3] == logged_iterations(run_dir, "eval.csv")
    assert any((run_dir / "tensorboard").iterdir())
    jsonl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [record["iteration"] for record in jsonl if "iteration" in record] == [1, 2, 3]
    assert all("return/mean" in record and "loss/policy" in record for record in jsonl if "iteration" in record)
    assert [json.loads(line)["iteration"] for line in (run_dir / "eval.jsonl").read_text().splitlines()] == [1, 2, 3]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["counters"]["iteration"] == 3


@pytest.mark.slow
def test_stop_then_resume_is_bit_exact(tmp_path):
    # vpg_gae: the critic, the optimiser state and every generator must come back
    config = make_config(PSOTSPTrainConfig, **{**TINY, "algo": "vpg_gae"}, n_iterations=3, log_interval=1)
    full = train_pso_tsp(dataclasses.replace(config, log_dir=tmp_path / "full"), **QUIET)
    stopped = train_pso_tsp(dataclasses.replace(config, log_dir=tmp_path / "half"), stop_after=1, **QUIET)
    assert stopped.interrupted and stopped.exit_code == EXIT_INTERRUPTED and stopped.iterations == 1
    resumed = train_pso_tsp(
        make_config(PSOTSPTrainConfig, resume=tmp_path / "half"), given=frozenset({"resume"}), **QUIET
    )
    assert resumed.exit_code == 0 and resumed.iterations == 3
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values(), strict=False):
        assert torch.equal(a, b), name

    def rows(run):  # without the shell's wall-clock columns
        with open(run / "metrics.csv", newline="") as handle:
            return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in csv.DictReader(handle)]

    assert rows(tmp_path / "full") == rows(tmp_path / "half")


def test_deprecated_names_still_work(tmp_path, capsys):
    parsed = parse_flags(PSOTSPTrainConfig, ["--rl-mode", "vpg_gae"], prog="pglab train pso-tsp")
    assert parsed.config.algo == "vpg_gae" and parsed.given == frozenset({"update.algo"})
    assert "--rl-mode is deprecated" in capsys.readouterr().err
    old_yaml = tmp_path / "old.yaml"
    old_yaml.write_text("rl_mode: reinforce_raw\nnum_cities: 8\n")
    assert load_yaml_config(PSOTSPTrainConfig, old_yaml).algo == "reinforce_raw"
    # a config stored with the alias names (rl_mode, no algo, no threads)
    stored = {**{k: v for k, v in TINY.items() if k != "algo"}, "rl_mode": "vpg_gae", "log_dir": None, "resume": None}
    assert config_from_dict(PSOTSPTrainConfig, stored).algo == "vpg_gae"
    from pglab.commands.pso_tsp import PSOTSPEvalConfig

    assert parse_flags(PSOTSPEvalConfig, ["--num_instances", "5"], prog="pglab evaluate pso-tsp").config.episodes == 5
    assert PSOTSPEvalConfig().device == "auto"


@pytest.mark.slow
def test_a_run_stored_with_alias_names_loads_evaluates_and_resumes(tmp_path, capsys):
    """A run stored with the alias names (``rl_mode`` in config.json and checkpoints, flat, no controller)."""
    run_dir = tmp_path / "old"
    train_pso_tsp(
        make_config(PSOTSPTrainConfig, **{**TINY, "algo": "vpg_gae"}, n_iterations=1, log_dir=run_dir), **QUIET
    )

    def to_old(config):  # flat (no nested env and update configs), rl_mode, no threads, no controller
        flat = {k: v for k, v in config.items() if k not in ("threads", "env", "update", "controller")}
        update = dict(config["update"])
        update["rl_mode"] = update.pop("algo")
        return {**flat, **config["env"], **update}

    path = run_dir / "checkpoints" / "checkpoint_iter_000001.pt"
    checkpoint = load_checkpoint_file(path, kinds=["pso-tsp"])
    checkpoint.pop("path")
    save_checkpoint(path, {**checkpoint, "config": to_old(checkpoint["config"])})
    meta = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**meta, "config": to_old(meta["config"])}))
    assert "rl_mode" in load_checkpoint_file(run_dir, kinds=["pso-tsp"])["config"]

    agent = pglab.load_checkpoint(run_dir, device="auto")
    assert agent.config.algo == "vpg_gae" and agent.config.controller == "edge_policy"
    capsys.readouterr()
    assert cli_main(["evaluate", str(run_dir), "--episodes", "2", "--no-optimal"]) == 0
    assert "2 held-out instances" in capsys.readouterr().out
    assert cli_main(["train", "pso-tsp", "--resume", str(run_dir), "--n_iterations", "2"]) == 0
    resumed = load_checkpoint_file(run_dir, kinds=["pso-tsp"])["config"]
    assert resumed["update"]["algo"] == "vpg_gae" and resumed["controller"] == "edge_policy"


@pytest.mark.parametrize("algo", ["ppo", "reinforce_raw"])
def test_agent_api(tmp_path, algo):
    run_dir = tmp_path / "run"
    train_pso_tsp(make_config(PSOTSPTrainConfig, **{**TINY, "algo": algo}, n_iterations=1, log_dir=run_dir), **QUIET)
    agent = pglab.load_checkpoint(run_dir, device="auto")
    assert isinstance(agent, Agent) and agent.kind == "pso-tsp" and agent.config.algo == algo
    torch.nn.init.normal_(agent.model.policy_head[-1].weight, std=0.1)  # outputs that depend on the swarm
    env = PSOTSPEnv(agent.config.env, agent.device, make_generator(0), decode="greedy")
    state = env.reset(random_instances(2, 8, make_generator(1), agent.device))
    env.step(agent.act(state))
    state = env.state  # iteration 1: the progress feature t / T matters
    # act needs no pso_iterations: the agent keeps the training episode length
    wc1c2 = agent.act(state)
    assert wc1c2.shape == (2, 4, 32, 3)
    assert torch.equal(wc1c2, agent.model.act(state, 3, deterministic=True))
    assert not torch.equal(wc1c2, agent.model.act(state, 30, deterministic=True))
    sampled = agent.act(state, deterministic=False, generator=make_generator(5))
    assert not torch.equal(sampled, wc1c2)
    numpy_state = type(state)(
        **{k: (v.cpu().numpy() if isinstance(v, torch.Tensor) else v) for k, v in vars(state).items()}
    )
    predicted = agent.predict(numpy_state)
    assert isinstance(predicted, np.ndarray) and np.array_equal(predicted, wc1c2.cpu().numpy())
    if algo == "reinforce_raw":
        with pytest.raises(NoCritic, match="reinforce_raw"):
            agent.value(state)
    else:
        assert agent.value(state).shape == (2, 4)


def test_evaluate_output_directory_is_a_one_line_error(tmp_path, capsys):
    assert cli_main(["evaluate", "pso-tsp", "--episodes", "2", "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "output" in err and len(err.strip().splitlines()) == 1


def test_nested_env_and_update_configs_keep_pso_defaults_and_the_old_keys(tmp_path, capsys):
    """PSOTSPEnvConfig and OnPolicyHyperparams are fields of the trainer config
    (config.env, config.update) with their plain flags and keys. A partial update (one key in
    YAML, one flag, one Python keyword) keeps the PSO trainer's own update defaults (one
    minibatch, vpg_gae, entropy 0.01, clip 1.0), not OnPolicyHyperparams' class defaults; the
    old key names (ppo_clip, value_loss_coeff, entropy_coeff) are accepted."""
    import dataclasses

    from pglab.configs.pso_tsp import PSO_UPDATE_DEFAULTS, PSOTSPEnvConfig

    assert make_config(PSOTSPTrainConfig, algo="vpg_gae").update == dataclasses.replace(
        PSO_UPDATE_DEFAULTS, algo="vpg_gae"
    )
    assert PSO_UPDATE_DEFAULTS.num_minibatches == 1 and PSO_UPDATE_DEFAULTS.entropy_coef == 0.01
    assert PSO_UPDATE_DEFAULTS.algo == "vpg_gae" and PSO_UPDATE_DEFAULTS.max_grad_norm == 1.0
    note = tmp_path / "note.yaml"
    note.write_text("gamma: 0.9\nppo_clip: 0.1\nvalue_loss_coeff: 0.25\nentropy_coeff: 0.02\nnum_cities: 12\n")
    config = parse_flags(PSOTSPTrainConfig, ["--config", str(note), "--n-particles", "5"], prog="t").config
    assert config.update == dataclasses.replace(
        PSO_UPDATE_DEFAULTS, gamma=0.9, clip_coef=0.1, value_coef=0.25, entropy_coef=0.02
    )
    assert config.env == PSOTSPEnvConfig(num_cities=12, n_particles=5)
    assert "'ppo_clip' is deprecated; use 'clip_coef'" in capsys.readouterr().err
    flagged = parse_flags(PSOTSPTrainConfig, ["--gamma", "0.5"], prog="t").config
    assert flagged.update == dataclasses.replace(PSO_UPDATE_DEFAULTS, gamma=0.5)


def test_the_ppo_only_clip_schedule_is_refused_by_the_pso_trainer():
    with pytest.raises(
        ConfigError, match=r"^clip_schedule: the Deep-PSO trainer has no clip schedule .*\(got 'linear'\)"
    ):
        make_config(PSOTSPTrainConfig, clip_schedule="linear")
