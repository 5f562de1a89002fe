"""Stream-AC(lambda) beyond pixels: vector observations (CartPole), continuous actions
(Pendulum's Gaussian policy) and AdaptiveObGD, each against a slow reference written
here; bit-identical resumes of both; the one-stream refusal; no success rate where the
environment defines none."""

import copy
import dataclasses
import json
import math

import pytest
import torch
from test_update_rules_a2c import reference_stream_ac

from pglab.algos.obgd import ADAPTIVE_BETA2, ADAPTIVE_EPS, AdaptiveObGD
from pglab.algos.stream_ac import StreamACLearner, train_stream_ac
from pglab.cli import main as cli_main
from pglab.configs.a2c import A2CTrainConfig
from pglab.errors import ConfigError
from pglab.nets.stream import GaussianHead
from pglab.run.checkpoint import load_checkpoint_file
from pglab.run.seeding import seed_everything

pytest.importorskip("gymnasium")
CPU = torch.device("cpu")


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


@pytest.fixture(autouse=True)
def _restore_threads():
    """The runs below use threads=1 (the shell sets it process-wide)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


# -- the Gaussian policy's traces ------------------------------------------------------------
def gaussian_terms(params, action):
    """log N(a; mu, sigma^2) and the entropy of N(mu, sigma^2), summed over the action's
    dimensions, written out (not torch.distributions), in float64."""
    mean, std = (p[0].double() for p in params)
    a = action[0].double()
    log_prob = (-0.5 * ((a - mean) / std) ** 2 - torch.log(std) - 0.5 * math.log(2 * math.pi)).sum()
    entropy = (0.5 + 0.5 * math.log(2 * math.pi) + torch.log(std)).sum()
    return log_prob, entropy


def test_gaussian_head_samples_scores_and_entropy_by_the_written_out_density():
    """Three action dimensions: log-probability and entropy sum over them; samples are
    mean + std * N(0, 1) from the given generator."""
    head = GaussianHead(hidden=4, action_dim=3, sparsity=0.0)
    params = head(torch.randn(2, 4, generator=torch.Generator().manual_seed(1)))
    actions = torch.tensor([[0.5, -1.0, 2.0], [0.0, 0.3, -0.7]])
    for row in range(2):
        log_prob, entropy = gaussian_terms(tuple(p[row : row + 1] for p in params), actions[row : row + 1])
        assert head.log_prob(params, actions)[row].item() == pytest.approx(log_prob.item(), rel=1e-5)
        assert head.entropy(params)[row].item() == pytest.approx(entropy.item(), rel=1e-5)
    features = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(params[1], torch.log1p(torch.exp(head.std(features))))  # sigma = softplus(W_s h + b_s)
    mean, std = (p[:1].detach().expand(20000, 3) for p in params)
    samples = head.sample((mean, std), torch.Generator().manual_seed(2))
    assert torch.allclose(samples.mean(0), mean[0], atol=0.05) and torch.allclose(samples.std(0), std[0], rtol=0.03)


def test_gaussian_stream_ac_updates_match_a_slow_reference():
    """Six Pendulum transitions through the learner (an episode cut after the third),
    replayed by the slow ObGD(lambda) loop with the Gaussian's log-density and entropy
    written out: the same weights, traces and step sizes."""
    config = A2CTrainConfig(algo="stream-ac", env="gym:Pendulum-v1", hidden=8, device="cpu", seed=4)
    seed_everything(config.seed)
    learner = StreamACLearner(config, CPU, {"opt_steps": 0})
    initial = copy.deepcopy(learner.model)
    for buffer in (initial.obs_count, initial.obs_mean, initial.obs_m2):  # the reference observes the first obs itself
        buffer.zero_()
    transitions, sizes = [], []
    sample, step, actor_step = learner.model.policy_head.sample, learner.env.step, learner.actor.step
    actions = []

    def sampling(params, generator):
        actions.append(sample(params, generator))
        return actions[-1]

    def stepping(env_action):
        obs = learner.obs.value.clone()
        next_obs, reward, done, trunc, info = step(env_action)
        trunc = torch.tensor([len(transitions) == 2])  # one episode end inside the script
        transitions.append((obs, actions[-1], next_obs.clone(), reward, done, trunc, info["final_obs"].clone()))
        return next_obs, reward, done, trunc, info

    learner.model.policy_head.sample, learner.env.step = sampling, stepping
    learner.actor.step = lambda delta, reset: sizes.append(actor_step(delta, reset)) or sizes[-1]
    for _ in range(6):
        learner.transition()
    model, traces, step_sizes = reference_stream_ac(initial, transitions, config, terms=gaussian_terms)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(learner.model.state_dict()[name].double(), value.double(), rtol=1e-4, atol=1e-6)
    for got, expected in zip(learner.actor.traces, traces["actor"], strict=True):
        torch.testing.assert_close(got.double(), expected, rtol=1e-4, atol=1e-6)
    assert sizes == pytest.approx([actor for actor, _ in step_sizes], rel=1e-5)


# -- AdaptiveObGD --------------------------------------------------------------------------
def reference_adaptive_obgd(weights, gradients, deltas, resets, *, lr, gamma, lam, kappa):
    """optim.py's AdaptiveObGD of the reference code, step by step in float64 and in its own
    convention: the trace accumulates the gradient of the *negated* objective and the
    step descends (p -= step delta e / sqrt(v_hat + eps))."""
    p = [w.double().clone() for w in weights]
    e = [torch.zeros_like(w) for w in p]
    v = [torch.zeros_like(w) for w in p]
    sizes = []
    for t, (grads, delta, reset) in enumerate(zip(gradients, deltas, resets, strict=True), start=1):
        z_sum = 0.0
        for k, g in enumerate(grads):
            e[k] = gamma * lam * e[k] + (-g.double())
            v[k] = ADAPTIVE_BETA2 * v[k] + (1 - ADAPTIVE_BETA2) * (delta * e[k]) ** 2
            v_hat = v[k] / (1 - ADAPTIVE_BETA2**t)
            z_sum += float((e[k] / torch.sqrt(v_hat + ADAPTIVE_EPS)).abs().sum())
        dot = max(abs(delta), 1.0) * z_sum * lr * kappa
        size = lr / dot if dot > 1 else lr
        for k in range(len(p)):
            v_hat = v[k] / (1 - ADAPTIVE_BETA2**t)
            p[k] = p[k] - size * delta * e[k] / torch.sqrt(v_hat + ADAPTIVE_EPS)
            if reset:
                e[k] = torch.zeros_like(e[k])
        sizes.append(size)
    return p, e, v, sizes


def test_adaptive_obgd_matches_the_reference_optimizer():
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(3, 2, generator=g), torch.randn(4, generator=g)]
    # small and large TD errors (the bound active and not), an episode end in the middle
    deltas = [0.3, -2.5, 0.01, 4.0, -0.2, 1.5]
    resets = [False, False, True, False, False, False]
    gradients = [[torch.randn(w.shape, generator=g) * scale for w in weights] for scale in (1, 3, 0.1, 2, 0.01, 1)]
    hyper = dict(lr=0.05, gamma=0.9, lam=0.8, kappa=2.0)  # the bound active at the first two steps only
    params = [torch.nn.Parameter(w.clone()) for w in weights]
    optimizer = AdaptiveObGD(params, **hyper)
    sizes = []
    for grads, delta, reset in zip(gradients, deltas, resets, strict=True):
        for param, grad in zip(params, grads, strict=True):
            param.grad = grad.clone()
        sizes.append(optimizer.step(torch.tensor(delta), reset))
    p, e, v, expected_sizes = reference_adaptive_obgd(weights, gradients, deltas, resets, **hyper)
    assert sizes == pytest.approx(expected_sizes, rel=1e-6)
    assert any(size < hyper["lr"] for size in sizes) and any(size == hyper["lr"] for size in sizes)
    for k in range(len(params)):
        torch.testing.assert_close(params[k].detach().double(), p[k], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(optimizer.traces[k].double(), -e[k], rtol=1e-5, atol=1e-7)  # ascent convention
        torch.testing.assert_close(optimizer.second_moments[k].double(), v[k], rtol=1e-5, atol=1e-9)


# -- resumes, refusal, success ----------------------------------------------------------------
def identical(a, b) -> bool:
    """Nested dicts / lists of tensors and numbers, equal bit for bit."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(identical(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    return a == b


RESUME_CASES = {
    "cartpole": dict(env="gym:CartPole-v1", hidden=8, optimizer="adaptive-obgd"),
    "pendulum": dict(env="gym:Pendulum-v1", hidden=8),
}


@pytest.mark.parametrize("case", RESUME_CASES)
def test_vector_and_continuous_runs_resume_bit_identically(case, tmp_path, monkeypatch):
    """A run stopped after 40 transitions (inside a logging window) and resumed equals the
    uninterrupted run of 70: weights, traces (and AdaptiveObGD's moments), the reward
    scaler and every logged row."""
    from pglab.algos import stream_ac

    monkeypatch.setattr(stream_ac, "LOG_EVERY", 25)
    config = A2CTrainConfig(algo="stream-ac", total_env_steps=70, device="cpu", threads=1, **RESUME_CASES[case])
    train_stream_ac(dataclasses.replace(config, log_dir=tmp_path / "full"), echo=quiet)
    result = train_stream_ac(dataclasses.replace(config, log_dir=tmp_path / "half"), echo=quiet, stop_after=40)
    assert result["interrupted"] and result["opt_steps"] == 40
    train_stream_ac(dataclasses.replace(config, resume=tmp_path / "half"), echo=quiet)
    full, half = load_checkpoint_file(tmp_path / "full"), load_checkpoint_file(tmp_path / "half")
    assert half["counters"]["opt_steps"] == full["counters"]["opt_steps"] == 70
    assert all(torch.equal(full["models"]["model"][k], v) for k, v in half["models"]["model"].items())
    for name in ("actor_traces", "critic_traces", "reward_scaler", "env"):
        assert identical(full["extra"][name], half["extra"][name]), name

    def rows(run):
        lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in lines if "opt_steps" in r]

    assert rows(tmp_path / "full") == rows(tmp_path / "half") and len(rows(tmp_path / "full")) == 3


def test_more_than_one_stream_is_refused_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "a2c", "--algo", "stream-ac", "--num-envs", "2", "--log-dir", str(run)]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pglab: error: num_envs: stream-AC runs one stream (got 2)"] and not run.exists()


def test_cartpole_has_no_success_rate(tmp_path):
    """CartPole defines no success: no success rate in the records, summary.json or the
    evaluation (a terminated CartPole episode is a failure, not a success)."""
    run = tmp_path / "run"
    flags = ["--env", "gym:CartPole-v1", "--hidden", "8", "--device", "cpu", "--threads", "1"]
    assert (
        cli_main(["train", "a2c", "--algo", "stream-ac", "--total-env-steps", "40", "--log-dir", str(run), *flags]) == 0
    )
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "episode/success_rate" not in records[0]["meta"]["record_keys"]
    assert records[-1]["episode/count"] > 0 and "episode/success_rate" not in records[-1]
    assert "episode/success_rate" not in json.loads((run / "summary.json").read_text())
    out = tmp_path / "eval.json"
    assert cli_main(["evaluate", str(run), "--episodes", "2", "--num-envs", "2", "--output", str(out)]) == 0
    evaluation = json.loads(out.read_text())
    assert evaluation["episodes"] == 2 and "success_rate" not in evaluation and "success_stderr" not in evaluation


def test_max_episode_steps_sets_the_time_limit_and_the_time_feature():
    """--max-episode-steps is the Gymnasium episodes' limit (the reference's classic-control
    script runs CartPole with 10,000): with 5, balancing actions are cut at step 5, and the
    time feature (the last input) is -0.5 at the reset and the first step, then climbs by
    1/5 a step, as the reference's AddTimeInfo does."""
    from pglab.algos.a2c_common import build_env

    config = A2CTrainConfig(algo="stream-ac", env="gym:CartPole-v1", max_episode_steps=5)
    env = build_env(config, torch.device("cpu"), seed=0)
    obs = env.reset(seed=0)
    times = [float(obs[0, -1])]
    for step in range(5):
        obs, _, terminated, truncated, _ = env.step(torch.tensor([step % 2], dtype=torch.int64))
        times.append(float(obs[0, -1]))
    assert not bool(terminated[0]) and bool(truncated[0])
    assert times[:5] == pytest.approx([-0.5, -0.5, -0.3, -0.1, 0.1]) and times[5] == pytest.approx(-0.5)  # reset
    with pytest.raises(ConfigError, match="max_episode_steps"):
        dataclasses.replace(config, env="minatar:breakout")
