"""Stream-AC(lambda): ObGD against a hand computation, sparse init, reward scaling,
normalisation statistics, and a short end-to-end run through the CLI config."""

import json
import math

import pytest
import torch

from pglab.algos.a2c_common import LOG_NAME
from pglab.algos.obgd import ObGD
from pglab.algos.stream_ac import RewardScaler, train_stream_ac
from pglab.configs.a2c import A2CTrainConfig, PixelGoalConfig
from pglab.envs.base import ActionSpec
from pglab.nets.stream import build_stream_actor_critic, sparse_init_
from pglab.run.checkpoint import load_checkpoint_file


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


@pytest.fixture(autouse=True)
def _restore_threads():
    """The runs below use threads=1 (tiny networks; the shell sets it process-wide)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_obgd_matches_the_hand_computed_update():
    w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    opt = ObGD([w], lr=0.5, gamma=0.9, lam=0.5, kappa=2.0)
    opt.traces[0].copy_(torch.tensor([0.4, 0.0]))
    w.grad = torch.tensor([1.0, 3.0])
    step = opt.step(torch.tensor(2.0), reset=False)
    z = torch.tensor([0.4 * 0.45 + 1.0, 3.0])  # z = gamma lambda z + g
    bound = 0.5 * 2.0 * max(2.0, 1.0) * float(z.abs().sum())  # M = alpha kappa max(|d|,1) ||z||_1
    assert step == pytest.approx(0.5 / max(bound, 1.0))
    assert torch.allclose(w.detach(), torch.tensor([1.0, -2.0]) + step * 2.0 * z)
    assert torch.allclose(opt.traces[0], z) and w.grad is None
    # a small delta with a tiny trace takes the full step alpha (M = 0.02 < 1); reset
    # clears the trace, after the step has used it
    w.grad = torch.zeros(2)
    opt.traces[0].fill_(0.01)
    before = w.detach().clone()
    z = torch.full((2,), 0.01 * 0.45)
    assert opt.step(torch.tensor(0.1), reset=True) == pytest.approx(0.5)
    assert torch.allclose(w.detach(), before + 0.5 * 0.1 * z)
    assert torch.count_nonzero(opt.traces[0]) == 0


def test_sparse_init_zeroes_the_fraction_per_unit():
    layer = torch.nn.Linear(50, 7)
    sparse_init_(layer.weight, 0.9)
    assert ((layer.weight == 0).sum(dim=1) == 45).all()
    sparse_init_(layer.weight, 0.33)  # ceil(0.33 * 50) = 17, as the reference rounds
    assert ((layer.weight == 0).sum(dim=1) == 17).all()
    assert layer.weight.abs().max() <= math.sqrt(1 / 50)


def test_reward_scaler_divides_by_the_running_return_std():
    scaler = RewardScaler(gamma=0.0)  # the return is the reward itself
    rewards = [1.0, 3.0, 5.0, 7.0]
    for r in rewards[:-1]:
        scaler(r, False)
    out = scaler(rewards[-1], False)
    assert out == pytest.approx(7.0 / math.sqrt(torch.tensor(rewards).var().item() + 1e-8), rel=1e-6)


def test_observation_statistics_are_welford_exact():
    net = build_stream_actor_critic((1, 4, 4), torch.uint8, ActionSpec(kind="discrete", num_actions=3), hidden=8)
    frames = torch.randint(0, 256, (10, 1, 4, 4), dtype=torch.uint8)
    net.observe(frames)
    data = frames.double()
    assert torch.allclose(net.obs_mean, data.mean(0))
    assert torch.allclose(net.obs_m2 / 9, data.var(0))
    # the network reads (x - mean) / sqrt(var + 1e-8), var the sample variance
    expected = ((data[:2] - data.mean(0)) / (data.var(0) + 1e-8).sqrt()).float()
    assert torch.allclose(net.normalise(frames[:2]), expected)
    (logits,), values = net(frames[:2])
    assert logits.shape == (2, 3) and values.shape == (2,)


def test_stream_ac_runs_end_to_end_and_checkpoints(tmp_path):
    cfg = A2CTrainConfig(
        algo="stream-ac",
        num_envs=1,
        lr=1.0,
        total_env_steps=60,
        device="cpu",
        pixel_goal=PixelGoalConfig(grid_size=4),
        hidden=16,
        threads=1,
        log_dir=tmp_path / "run",
    )
    result = train_stream_ac(cfg, echo=quiet)
    assert result["env_steps"] == 60 and result["opt_steps"] == 60 and result["exit_code"] == 0
    lines = [json.loads(line) for line in (tmp_path / "run" / LOG_NAME).read_text().splitlines()]
    last = lines[-1]
    assert "meta" in lines[0] and last["env_steps"] == 60
    # stream-AC's logged loss: -log pi(a|s) delta (policy) + delta^2 / 2 (value), entropy logged apart
    assert last["loss"] == pytest.approx(last["loss/policy"] + last["loss/value"], rel=1e-6)
    assert last["loss/entropy"] == pytest.approx(-cfg.entropy_coef * last["stats/entropy"], rel=1e-6)
    # two ObGD step sizes instead of one learning rate, each at most alpha (the values
    # themselves: tests/test_update_rules_a2c.py); no gradient norm
    assert (
        0 < last["stats/lr/actor"] <= cfg.lr and 0 < last["stats/lr/critic"] <= cfg.lr and "stats/grad_norm" not in last
    )
    checkpoint = load_checkpoint_file(tmp_path / "run")
    assert checkpoint["kind"] == "a2c-stream-ac" and checkpoint["counters"]["env_steps"] == 60
    import pglab

    agent = pglab.load_checkpoint(tmp_path / "run")
    obs = torch.zeros(2, 1, 8, 8, dtype=torch.uint8)
    assert agent.act(obs).dtype == torch.int32 and agent.value(obs).shape == (2,)


def test_stream_ac_resume_is_bit_identical(tmp_path):
    common = dict(
        algo="stream-ac",
        num_envs=1,
        lr=1.0,
        device="cpu",
        pixel_goal=PixelGoalConfig(grid_size=4),
        hidden=16,
        threads=1,
    )
    train_stream_ac(A2CTrainConfig(total_env_steps=80, log_dir=tmp_path / "full", **common), echo=quiet)
    train_stream_ac(A2CTrainConfig(total_env_steps=40, log_dir=tmp_path / "half", **common), echo=quiet)
    train_stream_ac(A2CTrainConfig(total_env_steps=80, resume=tmp_path / "half", **common), echo=quiet)
    full = load_checkpoint_file(tmp_path / "full")
    half = load_checkpoint_file(tmp_path / "half")
    for counters in (half["counters"], full["counters"]):
        assert (counters["env_steps"], counters["opt_steps"]) == (80, 80)
    assert all(torch.equal(full["models"]["model"][k], half["models"]["model"][k]) for k in full["models"]["model"])
    assert all(
        torch.equal(a, b)
        for a, b in zip(full["extra"]["actor_traces"]["traces"], half["extra"]["actor_traces"]["traces"], strict=False)
    )


def test_a_checkpoint_inside_a_logging_window_resumes_to_the_same_rows(tmp_path, monkeypatch):
    """Rows every 30 transitions, checkpoints every 20: the run that dies at transition 50
    resumes from the checkpoint at 40, ten transitions into the window 31..60, and must
    log the uninterrupted run's rows (the window's sums travel with the checkpoint)."""
    from pglab.algos import stream_ac
    from pglab.envs.pixel_goal import PixelGoalEnv

    monkeypatch.setattr(stream_ac, "LOG_EVERY", 30)
    common = dict(
        algo="stream-ac",
        num_envs=1,
        lr=1.0,
        device="cpu",
        pixel_goal=PixelGoalConfig(grid_size=4, max_steps=6),
        hidden=16,
        threads=1,
        save_interval=20,
        total_env_steps=80,
    )
    train_stream_ac(A2CTrainConfig(log_dir=tmp_path / "full", **common), echo=quiet)
    step = PixelGoalEnv.step
    calls = {"n": 0}

    def failing_step(env, actions):
        calls["n"] += 1
        if calls["n"] == 50:
            raise RuntimeError("power cut")
        return step(env, actions)

    monkeypatch.setattr(PixelGoalEnv, "step", failing_step)
    with pytest.raises(RuntimeError, match="power cut"):
        train_stream_ac(A2CTrainConfig(log_dir=tmp_path / "cut", **common), echo=quiet)
    monkeypatch.setattr(PixelGoalEnv, "step", step)
    assert load_checkpoint_file(tmp_path / "cut")["counters"]["opt_steps"] == 40
    train_stream_ac(A2CTrainConfig(resume=tmp_path / "cut", **common), echo=quiet)

    def rows(run):
        lines = [json.loads(line) for line in (run / LOG_NAME).read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in lines if "opt_steps" in r]

    full, resumed = rows(tmp_path / "full"), rows(tmp_path / "cut")
    assert [r["opt_steps"] for r in full] == [30, 60, 80] and any(r["episode/count"] > 0 for r in full)
    assert resumed == full


def test_resume_alone_continues_a_stream_ac_run(tmp_path):
    """``pglab train a2c --resume DIR`` continues a stream-ac run without --algo: the command
    picks the trainer from the stored kind and the trainer takes the stored algo."""
    from pglab.cli import main as pglab_main
    from pglab.run.checkpoint import load_checkpoint_file

    run = tmp_path / "run"
    flags = ["--num-envs", "1", "--pixel-goal.grid-size", "4", "--hidden", "8", "--device", "cpu"]
    argv = ["train", "a2c", "--algo", "stream-ac", "--total-env-steps", "4", "--log-dir", str(run), *flags]
    assert pglab_main(argv) == 0
    assert pglab_main(["train", "a2c", "--resume", str(run), "--total-env-steps", "6"]) == 0
    assert load_checkpoint_file(run)["counters"]["opt_steps"] == 6
