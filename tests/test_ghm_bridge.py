"""Bridge absorption (``--absorption bridge``): paths killed between grid times with the
Brownian-bridge probability, i.e. the continuously monitored model that the FD reference
solves.

* the survival of a driftless Brownian motion started at ``c0`` over ``[0, 1]`` against the
  reflection principle's ``2 Phi(c0 / sigma) - 1``: the bridge rollout matches it, the
  grid-monitored one at the same ``dt`` does not;
* the simulated value of a fixed policy with bridge absorption against its exact FD value
  (continuous time), which the grid-monitored simulation overstates;
* the noise, the config and the resume default.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pglab.algos.ghm_eval import simulate_policy_value
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import RolloutNoise, TrajectorySimulator
from pglab.hjb.fd import evaluate_policy_1d


class _NoControl:
    def mean_std(self, states):
        zeros = torch.zeros(states.shape[0], 2, dtype=states.dtype)
        return zeros, zeros


def _survival(absorption: str, num_paths: int = 20_000) -> float:
    model = GHMModel(GHMParams(mu=0.0, r=0.0, sigma=0.3))
    simulator = TrajectorySimulator(model, 0.01, 1.0, absorption=absorption)
    paths = simulator.rollout(
        _NoControl(), torch.full((num_paths, 1), 0.2), torch.Generator().manual_seed(0), deterministic=True
    )
    return float((~paths.dones[:, -1]).float().mean())


def test_bridge_rollout_survival_matches_the_reflection_principle_and_the_grid_does_not():
    exact = math.erf(0.2 / 0.3 / math.sqrt(2))  # P(min_{t<=1} 0.3 W_t > -0.2) = 2 Phi(2/3) - 1
    standard_error = math.sqrt(exact * (1 - exact) / 20_000)
    assert abs(_survival("bridge") - exact) < 4 * standard_error
    assert _survival("grid") - exact > 6 * standard_error  # the grid misses crossings between steps


def test_bridge_evaluation_matches_the_exact_continuous_value_of_a_policy():
    model = GHMModel(GHMParams(sigma=0.35))
    rate = 0.3  # pay 0.3 at every cash level, never issue: liquidated sooner or later

    def policy(states):
        return torch.tensor([[rate, 0.0]], dtype=states.dtype).expand(states.shape[0], -1)

    from pglab.algos.ghm_train import fd_value_slope

    exact = evaluate_policy_1d(model, lambda x: np.stack([rate + 0 * x, 0 * x], 1), x_max=6.0, num_nodes=6000)
    # the policy's own value slope as control variate: standard errors of ~0.001
    common = dict(num_paths=3000, dt=0.01, tail_tolerance=0.01, value_slope=fd_value_slope(exact))
    bridge = simulate_policy_value(
        model, policy, [0.1, 0.3], generator=torch.Generator().manual_seed(1), absorption="bridge", **common
    )
    grid = simulate_policy_value(model, policy, [0.1, 0.3], generator=torch.Generator().manual_seed(1), **common)
    for index, cash in enumerate((0.1, 0.3)):
        truth = exact.value_at([cash])[0]
        # the simulation leaves out a tail of at most tail_bound: compare within it and 4 SE
        assert abs(bridge.mean[index] - truth) < 4 * bridge.stderr[index] + bridge.tail_bound[index], (
            bridge.mean,
            truth,
        )
        assert grid.mean[index] - truth > 4 * grid.stderr[index] + grid.tail_bound[index]  # the grid chain lives longer


def test_rollout_noise_carries_the_survival_draws_and_slices_them():
    simulator = TrajectorySimulator(GHMModel(GHMParams()), 0.01, 0.1, absorption="bridge")
    noise = simulator.draw_noise(6, torch.Generator().manual_seed(0), device="cpu")
    assert noise.survival_noise is not None and noise.survival_noise.shape == (6, 10)
    assert float(noise.survival_noise.min()) >= 0.0 and float(noise.survival_noise.max()) < 1.0
    part = noise.slice(2, 4)
    assert torch.equal(part.survival_noise, noise.survival_noise[2:4])
    with pytest.raises(ValueError, match="survival_noise"):
        simulator.rollout(
            _NoControl(), torch.full((6, 1), 0.5), noise=RolloutNoise(noise.state_noise, noise.action_noise)
        )
    with pytest.raises(ValueError, match="absorption"):
        TrajectorySimulator(GHMModel(GHMParams()), 0.01, 0.1, absorption="continuous")


def test_absorption_config_and_the_resume_default():
    from pglab.algos.ghm_train import SPEC
    from pglab.configs.ghm import GHMTrainConfig
    from pglab.errors import ConfigError

    with pytest.raises(ConfigError, match="absorption"):
        GHMTrainConfig(absorption="continuous")
    # mc defaults to bridge; pathwise and actor-critic stay on grid
    assert GHMTrainConfig().absorption == "bridge" and GHMTrainConfig(absorption="grid").absorption == "grid"
    assert (
        GHMTrainConfig(algo="pathwise").absorption == "grid"
        and GHMTrainConfig(algo="actor-critic").absorption == "grid"
    )
    assert SPEC.stored_defaults["absorption"] == "grid"  # a run made before the field resumes as it was trained


def test_calibrations_outside_the_checked_range_get_a_warning_naming_the_field(tmp_path, capsys):
    from pglab.algos.ghm_train import calibration_warnings, train_ghm
    from pglab.configs.ghm import GHMParams as Params
    from pglab.configs.ghm import GHMTrainConfig

    def warnings(**params):
        config = GHMTrainConfig(params=Params(**params))
        from pglab.algos.ghm_train import build_model

        return calibration_warnings(config, build_model(config))

    assert warnings() == [] and warnings(sigma=0.35, lambda_dilution=0.15) == [] and warnings(sigma=0.4, rho=0.06) == []
    (line,) = warnings(sigma=0.6)
    assert "sigma=0.6" in line and "[0.15, 0.4]" in line
    assert any("initial_cash_high" in line for line in warnings(sigma=0.45, rho=0.06))  # barrier high in [0, 2]
    # the trainer prints them on stderr before training, and trains anyway
    config = GHMTrainConfig(
        params=Params(lambda_dilution=0.6),
        n_iterations=1,
        n_trajectories=8,
        T=0.05,
        final_eval=False,
        eval_interval=1000,
        fd_nodes=400,
        device="cpu",
        log_dir=tmp_path / "run",
    )
    messages = []
    train_ghm(config, echo=lambda *a, **k: messages.append(" ".join(map(str, a))))
    assert any("lambda_dilution=0.6" in m and "warning" in m for m in messages)
