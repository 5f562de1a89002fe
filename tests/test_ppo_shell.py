"""``pglab train ppo`` inside the shared training shell: resume applies what the
user gave, logs hold no NaN, the CLI vocabulary, ``--help`` without torch, the agent API."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml

import pglab
from pglab.agent import Agent
from pglab.algos.ppo import PPOAgent, train_ppo
from pglab.cli import main as cli_main
from pglab.configs.ppo import PPOConfig, PPOEvaluateConfig
from pglab.errors import EXIT_INTERRUPTED
from pglab.run.checkpoint import load_checkpoint_file, save_checkpoint
from pglab.run.config import make_config, parse_flags
from pglab.run.logger import read_metrics

# CartPole, 2 copies x 32 steps = 64 env steps per iteration, tiny networks.
TINY = [
    "--num-envs",
    "2",
    "--num-steps",
    "32",
    "--num-minibatches",
    "2",
    "--ppo-epochs",
    "2",
    "--hidden-dims",
    "16",
    "--no-tensorboard",
]
TINY_FIELDS = dict(num_envs=2, num_steps=32, num_minibatches=2, ppo_epochs=2, hidden_dims=(16,), tensorboard=False)


def train(*argv):
    return cli_main(["train", "ppo", *argv])


def stored_config(run):
    return load_checkpoint_file(run, kinds=["ppo"])["config"]


def test_resume_refuses_a_given_lr_that_differs_even_when_it_is_the_default(tmp_path, capsys):
    # --lr 2.5e-4 (the default) over a stored 1e-3 is a flag given, not "equal to the default,
    # so not given": the resume refuses it instead of going on with 1e-3.
    run = tmp_path / "a"
    assert (
        train(
            *TINY,
            "--total-steps",
            "128",
            "--lr",
            "1e-3",
            "--no-anneal-lr",
            "--log-dir",
            str(run),
            "--eval-episodes",
            "0",
        )
        == 0
    )
    capsys.readouterr()
    assert train("--resume", str(run), "--total-steps", "256", "--lr", "2.5e-4") == 2
    err = capsys.readouterr().err
    assert err.startswith("pglab: error: lr: ") and "(got 0.00025)" in err and "differs" in err
    assert load_checkpoint_file(run)["counters"]["iteration"] == 2  # nothing ran
    # The stored value itself is no change: accepted.
    assert train("--resume", str(run), "--total-steps", "256", "--lr", "1e-3") == 0
    checkpoint = load_checkpoint_file(run)
    assert checkpoint["counters"]["iteration"] == 4 and checkpoint["config"]["lr"] == 1e-3


def test_resume_applies_a_given_eval_episodes_equal_to_the_default(tmp_path):
    # --eval-episodes 10 is the default, and given, it applies over a stored 3 all the same.
    run = tmp_path / "a"
    assert train(*TINY, "--total-steps", "64", "--eval-episodes", "3", "--log-dir", str(run)) == 0
    assert json.loads((run / "evaluation.json").read_text())["episodes"] == 3
    assert train("--resume", str(run), "--total-steps", "128", "--eval-episodes", "10") == 0
    evaluation = json.loads((run / "evaluation.json").read_text())
    assert evaluation["episodes"] == 10 and evaluation["iteration"] == 2
    assert stored_config(run)["eval_episodes"] == 10


def _set_stored_device(run, device):
    """Make the run look as if it had been started with ``--device DEVICE``."""
    path = run / "checkpoints" / "checkpoint_latest.pt"
    checkpoint = load_checkpoint_file(path)
    checkpoint.pop("path")
    checkpoint["config"]["device"] = device
    save_checkpoint(path.resolve(), checkpoint)
    payload = json.loads((run / "config.json").read_text())
    payload["config"]["device"] = device
    (run / "config.json").write_text(json.dumps(payload))


@pytest.mark.parametrize("stored", ["cuda", "auto"])
def test_resume_applies_device_cpu_over_the_stored_device(tmp_path, capsys, stored):
    # --device cpu over a stored cuda was dropped (cpu was the default), so the resumed run
    # asked for CUDA and failed on a machine without a GPU.
    run = tmp_path / "a"
    assert train(*TINY, "--total-steps", "64", "--eval-episodes", "0", "--device", "cpu", "--log-dir", str(run)) == 0
    _set_stored_device(run, stored)
    if stored == "cuda" and not torch.cuda.is_available():
        assert train("--resume", str(run), "--total-steps", "128") == 2
        assert "device: " in (err := capsys.readouterr().err) and "(got 'cuda')" in err
    assert train("--resume", str(run), "--total-steps", "128", "--device", "cpu") == 0
    checkpoint = load_checkpoint_file(run)
    assert checkpoint["counters"]["iteration"] == 2 and checkpoint["config"]["device"] == "cpu"


def test_no_nan_cells_when_no_episode_ended_in_an_interval(tmp_path):
    # With 8-step rollouts of one CartPole most iterations end no episode: their
    # return/mean, return/std and episode/length are empty cells, never 'nan'.
    config = make_config(
        PPOConfig,
        env="gym:CartPole-v1",
        num_envs=1,
        num_steps=8,
        total_steps=8 * 12,
        num_minibatches=2,
        ppo_epochs=1,
        hidden_dims=(16,),
        log_interval=1,
        tensorboard=False,
        eval_episodes=0,
        log_dir=tmp_path / "run",
    )
    result = train_ppo(config)
    text = (result.run_dir / "metrics.csv").read_text()
    assert "nan" not in text.lower()
    metrics = read_metrics(result.run_dir)
    assert len(metrics) == 12 and "stats/lr" in metrics.columns
    no_episode = metrics["episode/count"] == 0
    assert no_episode.any() and (~no_episode).any()
    for column in ("return/mean", "return/std", "episode/length"):
        assert metrics.loc[no_episode, column].isna().all(), column
        assert metrics.loc[~no_episode, column].notna().all(), column
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in records if "iteration" in r]
    assert "nan" not in json.dumps(rows).lower()
    assert all(("return/mean" in r) == (r["episode/count"] > 0) for r in rows)
    # speed comes from the shell, from the env_steps counter the trainer keeps
    assert {"perf/step_s", "perf/env_steps_per_s"} <= set(metrics.columns)
    assert not {"perf/iter_s", "perf/steps_per_s"} & set(metrics.columns)
    assert (metrics["perf/env_steps_per_s"] > 0).all() and list(metrics["env_steps"]) == [8 * k for k in range(1, 13)]
    meta = records[0]["meta"]
    assert meta["kind"] == "ppo" and meta["obs_dim"] == 4 and meta["action"]["kind"] == "discrete"


def test_help_imports_no_torch():
    code = (
        "import sys\n"
        "from pglab.cli import main\n"
        "assert main(['train', 'ppo', '--help']) == 0\n"
        "import pglab.configs.ppo\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--algo" in done.stdout and "--threads" in done.stdout and "--rl-mode" not in done.stdout


def test_vocabulary_and_deprecated_names(tmp_path, capsys):
    assert PPOConfig().device == "auto" and PPOEvaluateConfig().device == "auto"
    parsed = parse_flags(PPOConfig, ["--rl-mode", "vpg_gae", "--torch-threads", "2"], prog="pglab train ppo")
    assert parsed.config.algo == "vpg_gae" and parsed.config.threads == 2
    assert parsed.given == {"update.algo", "threads"}  # --algo is a field of the nested update config
    err = capsys.readouterr().err
    assert "--rl-mode is deprecated; use --algo" in err and "--torch-threads is deprecated; use --threads" in err
    old_yaml = tmp_path / "old.yaml"
    old_yaml.write_text(yaml.safe_dump({"rl_mode": "reinforce_raw", "torch_threads": 3}))
    config = parse_flags(PPOConfig, ["--config", str(old_yaml)], prog="pglab train ppo").config
    assert config.algo == "reinforce_raw" and config.threads == 3
    assert config.update.algo == "reinforce_raw"


def test_old_checkpoint_with_rl_mode_loads_and_resumes(tmp_path):
    # A checkpoint written before the renames stores rl_mode / torch_threads.
    config = make_config(
        PPOConfig, algo="vpg_gae", total_steps=64, eval_episodes=0, log_dir=tmp_path / "old", **TINY_FIELDS
    )
    run = train_ppo(config).run_dir
    path = (run / "checkpoints" / "checkpoint_latest.pt").resolve()
    checkpoint = load_checkpoint_file(path)
    checkpoint.pop("path")
    stored = checkpoint["config"]
    stored.update(stored.pop("update"))  # stored flat, as before the nested update config
    stored["rl_mode"], stored["torch_threads"] = stored.pop("algo"), stored.pop("threads")
    save_checkpoint(path, checkpoint)
    agent = pglab.load_checkpoint(run)
    assert agent.config.algo == "vpg_gae" and agent.config.threads == 1
    assert train("--resume", str(run), "--total-steps", "128") == 0
    assert stored_config(run)["update"]["algo"] == "vpg_gae"


def test_agent_api(tmp_path):
    # load_checkpoint(path, device="auto"), act(obs, deterministic=),
    # predict on NumPy, value.
    run = train_ppo(
        make_config(PPOConfig, total_steps=64, eval_episodes=0, log_dir=tmp_path / "run", **TINY_FIELDS)
    ).run_dir
    agent = pglab.load_checkpoint(run, device="auto")
    assert isinstance(agent, Agent) and isinstance(agent, PPOAgent)
    assert agent.kind == "ppo" and agent.config.env == "gym:CartPole-v1"
    obs = torch.randn(6, 4)
    greedy = agent.act(obs, deterministic=True)
    assert greedy.shape == (6,) and greedy.dtype == torch.int64
    assert torch.equal(greedy, agent.policy.deterministic_action(obs))
    sampled = agent.act(obs, deterministic=False, generator=torch.Generator().manual_seed(0))
    assert sampled.shape == (6,)
    predicted = agent.predict(obs.numpy(), deterministic=True)
    assert isinstance(predicted, np.ndarray) and np.array_equal(predicted, greedy.numpy())
    # one unbatched observation (SB3's habit): one action, no batch axis
    single = agent.predict(obs[2].numpy())
    assert np.ndim(single) == 0 and single == greedy[2].item()
    assert agent.value(obs).shape == (6,)


def test_a_stop_exits_130_and_says_so_in_the_summary(tmp_path):
    config = make_config(PPOConfig, total_steps=64 * 3, eval_episodes=2, log_dir=tmp_path / "run", **TINY_FIELDS)
    result = train_ppo(config, stop_after=1)
    assert result.interrupted and result.exit_code == EXIT_INTERRUPTED and result.iterations == 1
    assert result.evaluation is None  # no final evaluation of an unfinished run
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["counters"]["iteration"] == 1
    finished = train_ppo(make_config(PPOConfig, resume=result.run_dir, **TINY_FIELDS))
    assert finished.exit_code == 0 and finished.iterations == 3 and finished.evaluation["episodes"] == 2
    assert json.loads((result.run_dir / "summary.json").read_text())["status"] == "completed"


def test_extending_the_budget_without_annealing_is_exact(tmp_path):
    # The resume guarantee for a larger budget: without --anneal-lr nothing depends on
    # total_steps, so N (budget N) + resume to 2N == 2N straight, bit for bit.
    fields = dict(anneal_lr=False, eval_episodes=0, **TINY_FIELDS)
    straight = train_ppo(make_config(PPOConfig, total_steps=64 * 4, log_dir=tmp_path / "straight", **fields))
    train_ppo(make_config(PPOConfig, total_steps=64 * 2, log_dir=tmp_path / "split", **fields))
    extended = train_ppo(make_config(PPOConfig, resume=tmp_path / "split", total_steps=64 * 4, **fields))
    a, b = load_checkpoint_file(straight.run_dir), load_checkpoint_file(extended.run_dir)
    for key, tensor in a["models"]["agent"].items():
        assert torch.equal(tensor, b["models"]["agent"][key]), key
    metrics_a, metrics_b = read_metrics(straight.run_dir), read_metrics(extended.run_dir)
    columns = [c for c in metrics_a.columns if not c.startswith("perf/")]
    assert metrics_a[columns].equals(metrics_b[columns])


@pytest.mark.parametrize("env", ["gym:FrozenLake-v1", "gym:CliffWalking-v1"])
def test_discrete_observation_spaces_are_refused_before_training(tmp_path, capsys, env):
    # FrozenLake's and CliffWalking's states are Discrete, not vectors of numbers: refused
    # at once (exit 2, naming env), instead of a traceback at the first checkpoint.
    assert train("--env", env, "--total-steps", "128", *TINY, "--log-dir", str(tmp_path / "run")) == 2
    assert "env: unsupported observation space" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_evaluate_output_is_checked_before_the_evaluation(tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--total-steps", "64", *TINY, "--eval-episodes", "0", "--log-dir", str(run)) == 0
    capsys.readouterr()
    folder = tmp_path / "results"
    folder.mkdir()
    assert cli_main(["evaluate", str(run), "--episodes", "1", "--output", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "output: is a folder" in err and "episodes" not in capsys.readouterr().out
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    assert cli_main(["evaluate", str(run), "--episodes", "1", "--output", str(blocked / "x.json")]) == 2
    assert "output: cannot be created: " in capsys.readouterr().err
    # a missing folder is made, and the result lands there
    target = tmp_path / "new" / "eval.json"
    assert cli_main(["evaluate", str(run), "--episodes", "1", "--output", str(target)]) == 0
    assert json.loads(target.read_text())["episodes"] == 1
    # stdout ends with the summary; with --json it is the JSON report alone
    capsys.readouterr()
    assert cli_main(["evaluate", str(run), "--episodes", "2"]) == 0
    captured = capsys.readouterr()
    assert "2 episodes" in captured.out and "result:    deterministic policy mean return" in captured.out
    assert cli_main(["evaluate", str(run), "--episodes", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["episodes"] == 2


def test_extending_a_linear_schedule_warns_that_the_rates_rise(tmp_path, capsys):
    run = tmp_path / "run"
    assert train("--total-steps", "256", *TINY, "--eval-episodes", "0", "--log-dir", str(run)) == 0  # 4 iterations
    capsys.readouterr()
    assert train("--resume", str(run), "--total-steps", "512", "--eval-episodes", "0") == 0
    err = capsys.readouterr().err
    assert (
        "pglab: warning: total_steps: the linear lr/clip schedule now spans 8 iterations, not 4: from iteration 5 "
        "the rates follow the new budget's schedule and rise from 0.25 to 0.5"
    ) in err
    lrs = read_metrics(run)["stats/lr"]
    assert lrs[4] > lrs[3]  # the jump the warning announces
    # a constant schedule extends silently
    constant = tmp_path / "constant"
    assert (
        train("--total-steps", "256", *TINY, "--no-anneal-lr", "--eval-episodes", "0", "--log-dir", str(constant)) == 0
    )
    assert train("--resume", str(constant), "--total-steps", "512", "--eval-episodes", "0") == 0
    assert "schedule now spans" not in capsys.readouterr().err


def test_the_summary_of_a_resumed_run_names_its_own_environment(tmp_path, capsys):
    # --resume RUN alone: the run's env and algo, not the command line's defaults
    run = tmp_path / "p"
    flags = [*TINY, "--env", "gym:Pendulum-v1", "--algo", "vpg_gae", "--eval-episodes", "1", "--log-dir", str(run)]
    assert train(*flags, "--total-steps", "128") == 0
    capsys.readouterr()
    assert train("--resume", str(run), "--total-steps", "256") == 0
    out = capsys.readouterr().out
    assert "pglab train ppo (vpg_gae, gym:Pendulum-v1): 4 iterations, 256 steps" in out
