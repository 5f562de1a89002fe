"""The actor-critic's physics-informed critic: the HJB residual as a training loss.

* the loss at known value functions against the residual written out by hand (the three
  control regimes of GHM, each derivative analytic), and its parameter gradient against a
  central difference;
* the solver's critic loss = TD(lambda) regression + weight x mean squared residual at
  collocation points drawn from the simulation's generator;
* learning: a small network trained on the loss alone reaches a small residual of the
  true HJB, measured independently by the validator's finite differences and 21-point
  control grid; a loss with the maximum replaced by the policy's fixed action does not.
"""

from __future__ import annotations

import math

import pytest
import torch

from pglab.algos.actor_critic import ActorCritic, optimal_hjb_residual, policy_hjb_residual
from pglab.envs.ghm import GHMModel, GHMParams
from pglab.envs.simulator import TrajectorySimulator
from pglab.hjb.residual import control_candidates, max_hamiltonian, value_derivatives
from pglab.losses.reinforce import value_regression_loss
from pglab.nets import GaussianPolicy, ValueNetwork


def _hand_optimal_residual(params: GHMParams, cash: torch.Tensor, value, first, second) -> torch.Tensor:
    """rho V - [(mu + r c) V' + 0.5 sigma^2 V'' + a_L_max max(0, 1 - V') + a_E_max max(0, V' - (1 + lambda))]:
    GHM's Hamiltonian is affine in (a_L, a_E), so each rate sits at the end of its box that its
    coefficient's sign picks."""
    dividend = params.a_L_max * torch.clamp(1.0 - first, min=0.0)
    issuance = params.a_E_max * torch.clamp(first - (1.0 + params.lambda_dilution), min=0.0)
    return params.rho * value - (
        (params.mu + params.r * cash) * first + 0.5 * params.sigma**2 * second + dividend + issuance
    )


def test_optimal_residual_matches_the_hand_written_hjb_in_all_three_regimes():
    """V = 2c - c^2: V' = 2 - 2c crosses 1 + lambda = 1.1 at c = 0.45 and 1 at c = 0.5, so the
    points cover issuance (V' > 1.1), inaction (1 < V' < 1.1) and dividends (V' < 1)."""
    params = GHMParams(a_L_max=0.7, a_E_max=1.3)
    model = GHMModel(params)
    cash = torch.tensor([0.1, 0.3, 0.46, 0.48, 0.7, 1.5], dtype=torch.float64).unsqueeze(1)
    residual = optimal_hjb_residual(model, lambda s: 2 * s[:, 0] - s[:, 0] ** 2, cash)
    c = cash[:, 0]
    expected = _hand_optimal_residual(params, c, 2 * c - c**2, 2 - 2 * c, torch.full_like(c, -2.0))
    torch.testing.assert_close(residual, expected, rtol=1e-12, atol=1e-12)
    # the policy residual with the maximising controls is the same number
    first = 2 - 2 * c
    controls = torch.stack(
        [params.a_L_max * (first < 1), params.a_E_max * (first > 1 + params.lambda_dilution)], 1
    ).double()
    torch.testing.assert_close(
        policy_hjb_residual(model, lambda s: 2 * s[:, 0] - s[:, 0] ** 2, cash, controls), expected
    )


def test_optimal_residual_loss_gradient_matches_a_central_difference():
    """d/dtheta mean R_opt^2 for V_theta(c) = theta_0 (1 - exp(-theta_1 c)) + theta_2 c^2, by
    autograd through the double backward pass, against a central difference of the hand formula."""
    params = GHMParams()
    model = GHMModel(params)
    cash = torch.linspace(0.05, 2.0, 9, dtype=torch.float64).unsqueeze(1)
    theta = torch.tensor([1.4, 3.0, -0.05], dtype=torch.float64, requires_grad=True)

    def value(t):
        return lambda s: t[0] * (1 - torch.exp(-t[1] * s[:, 0])) + t[2] * s[:, 0] ** 2

    loss = optimal_hjb_residual(model, value(theta), cash).pow(2).mean()
    (grad,) = torch.autograd.grad(loss, theta)

    def hand_loss(t):
        c = cash[:, 0]
        v = t[0] * (1 - torch.exp(-t[1] * c)) + t[2] * c**2
        first = t[0] * t[1] * torch.exp(-t[1] * c) + 2 * t[2] * c
        second = -t[0] * t[1] ** 2 * torch.exp(-t[1] * c) + 2 * t[2]
        return _hand_optimal_residual(params, c, v, first, second).pow(2).mean()

    torch.testing.assert_close(loss, hand_loss(theta.detach()), rtol=1e-12, atol=1e-14)
    h = 1e-6
    for i in range(3):
        step = torch.zeros(3, dtype=torch.float64)
        step[i] = h
        central = (hand_loss(theta.detach() + step) - hand_loss(theta.detach() - step)) / (2 * h)
        assert grad[i].item() == pytest.approx(central.item(), rel=1e-6, abs=1e-10)


def _solver(**kwargs) -> ActorCritic:
    torch.manual_seed(0)
    model = GHMModel(GHMParams())
    policy = GaussianPolicy(1, 2, (8,), action_high=model.control.high)
    critic = ValueNetwork(1, (8,))
    simulator = TrajectorySimulator(model, 0.01, 0.1)
    return ActorCritic(
        policy,
        simulator,
        critic,
        n_trajectories=16,
        critic_steps=1,
        generator=torch.Generator().manual_seed(5),
        gae_lambda=0.9,
        **kwargs,
    )


def test_critic_loss_adds_the_weighted_optimal_residual_at_collocation_points():
    solver = _solver(hjb_weight=0.7, hjb_samples=64, hjb_residual="optimal", hjb_interval=(0.05, 2.5))
    states = torch.rand(32, 1) * 2
    targets = torch.rand(32) + 1
    replay = torch.Generator().manual_seed(0)
    replay.set_state(solver.generator.get_state())
    out = solver.critic_loss(states, targets)
    points = 0.05 + 2.45 * torch.rand((64, 1), generator=replay)  # the same draw
    residual = optimal_hjb_residual(solver.model, solver.critic, points)
    expected = value_regression_loss(solver.critic(states), targets)["loss"] + 0.7 * residual.pow(2).mean()
    torch.testing.assert_close(out["loss"], expected)
    torch.testing.assert_close(out["loss/hjb_residual"], residual.pow(2).mean().detach())
    assert points.min() >= 0.05 and points.max() <= 2.5
    # a decayed TD weight scales the regression term only
    solver.td_weight = 0.25
    replay.set_state(solver.generator.get_state())
    out = solver.critic_loss(states, targets)
    points = 0.05 + 2.45 * torch.rand((64, 1), generator=replay)
    residual = optimal_hjb_residual(solver.model, solver.critic, points)
    expected = 0.25 * value_regression_loss(solver.critic(states), targets)["loss"] + 0.7 * residual.pow(2).mean()
    torch.testing.assert_close(out["loss"], expected)
    with pytest.raises(ValueError, match="hjb_interval"):
        _solver(hjb_weight=1.0, hjb_interval=(1.0, 0.5))


def _true_residual_max(model: GHMModel, value_fn, low: float, high: float) -> float:
    """max |rho V - max_u H| on [low, high] the validator's way: central differences
    (float64, h = 1e-4) and a 21-point grid of each control."""
    states = torch.linspace(low, high, 201, dtype=torch.float64).unsqueeze(1)
    value, first, second = value_derivatives(value_fn, states, method="fd", fd_step=1e-4)
    best, _ = max_hamiltonian(model, states, first, second, control_candidates(model.control, 21))
    return float((model.discount_rate * value - best).abs().max())


@pytest.mark.parametrize("residual", ["optimal", "policy"])
def test_a_network_trained_on_the_optimal_residual_solves_the_hjb(residual):
    """sigma = 0, mu = r = 0, rho = 1: rho V = max(0, 1 - V') (+ issuance, never worth it), solved by
    V = 1 + A e^{-c} (A < 0; V* = 1 - e^{-c} is A = -1). 200 Adam steps on the optimal residual
    at uniform collocation points bring the true residual on [0.2, 1.5] below 0.01; the same
    steps on the residual of a fixed policy that never pays (the wrong equation here) leave it
    above 0.1."""
    params = GHMParams(sigma=0.0, mu=0.0, r=0.0, rho=1.0, lambda_dilution=0.1)
    model = GHMModel(params)
    torch.manual_seed(0)
    net = ValueNetwork(1, (16,)).double()
    generator = torch.Generator().manual_seed(1)
    # start from a rough fit of V = c / 2 (slope 1/2 < 1: pay dividends)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(200):
        states = 0.2 + 1.3 * torch.rand((128, 1), generator=generator, dtype=torch.float64)
        if residual == "optimal":
            loss = optimal_hjb_residual(model, net, states).pow(2).mean()
        else:
            no_payout = torch.zeros(128, 2, dtype=torch.float64)
            loss = policy_hjb_residual(model, net, states, no_payout).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    measured = _true_residual_max(model, net, 0.2, 1.5)
    if residual == "optimal":
        assert measured < 1e-2
    else:
        assert measured > 0.1
    assert math.isfinite(measured)


def test_training_residual_needs_exactly_one_of_controls_and_candidates():
    from pglab.hjb.residual import hjb_residual_for_training

    model = GHMModel()
    states = torch.rand(4, 1)
    with pytest.raises(ValueError, match="exactly one"):
        hjb_residual_for_training(model, lambda s: s[:, 0] ** 2, states)
    with pytest.raises(ValueError, match="exactly one"):
        hjb_residual_for_training(
            model,
            lambda s: s[:, 0] ** 2,
            states,
            controls=torch.zeros(4, 2),
            candidates=control_candidates(model.control, 2, dtype=torch.float32),
        )


def test_boundary_layer_network_is_zero_at_the_boundary_and_scales_the_plain_network():
    torch.manual_seed(0)
    layered = ValueNetwork(1, (8,), boundary_layer=0.02).double()
    plain = ValueNetwork(1, (8,)).double()
    plain.load_state_dict(layered.state_dict())  # the same parameters: only the factor differs
    states = torch.tensor([[0.0], [0.01], [0.02], [0.5], [2.0]], dtype=torch.float64)
    expected = (1.0 - torch.exp(-states[:, 0] / 0.02)) * plain(states)
    torch.testing.assert_close(layered(states), expected, rtol=1e-12, atol=0.0)
    assert layered(states)[0].item() == 0.0  # V(0) = 0 exactly, whatever the weights
    # the layer's slope at 0 is N(0) / l: steep, as the GHM value's (V*'(0) ~ 45)
    inputs = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    (slope,) = torch.autograd.grad(layered(inputs).sum(), inputs)
    assert slope.item() == pytest.approx(plain(torch.zeros(1, 1, dtype=torch.float64)).item() / 0.02, rel=1e-9)
    with pytest.raises(ValueError, match="boundary_layer"):
        ValueNetwork(2, (8,), boundary_layer=0.02)
    with pytest.raises(ValueError, match="boundary_layer"):
        ValueNetwork(1, (8,), boundary_layer=0.0)


def test_boundary_layer_width_is_derived_from_the_model():
    from pglab.algos.ghm_train import boundary_layer_width, build_model, build_networks
    from pglab.configs.ghm import GHMTrainConfig
    from pglab.errors import ConfigError

    # sigma^2 / (2 (mu + a_E_max)): the largest drift at cash 0 issues at the maximal rate
    assert boundary_layer_width(GHMModel(GHMParams())) == pytest.approx(0.2**2 / (2 * 1.1), rel=1e-12)
    assert boundary_layer_width(GHMModel(GHMParams(sigma=0.3, mu=0.2, a_E_max=0.5))) == pytest.approx(
        0.09 / 1.4, rel=1e-12
    )
    with pytest.raises(ConfigError, match="critic_boundary"):
        boundary_layer_width(GHMModel(GHMParams(mu=-0.1, a_E_max=0.0)))
    # --critic_boundary hard builds the layer into the critic; every solver's default is a plain network
    config = GHMTrainConfig(algo="actor-critic", critic_boundary="hard", hjb_c_min=0.0)
    _, critic = build_networks(config, build_model(config), torch.device("cpu"))
    assert critic.boundary_layer == pytest.approx(0.2**2 / 2.2)
    assert critic(torch.zeros(1, 1)).item() == 0.0
    for algo in ("mc", "pathwise", "actor-critic"):
        config = GHMTrainConfig(algo=algo)
        assert config.critic_boundary == "none"
        assert build_networks(config, build_model(config), torch.device("cpu"))[1].boundary_layer is None


def test_the_trainer_decays_the_td_weight_to_its_final_fraction(tmp_path):
    from pglab.algos import ghm_train
    from pglab.configs.ghm import GHMTrainConfig, budget_schedules

    seen = []
    original = ActorCritic.train_step

    def spy(self):
        seen.append(self.td_weight)
        return original(self)

    config = GHMTrainConfig(
        algo="actor-critic",
        n_iterations=3,
        n_trajectories=8,
        T=0.05,
        td_final_fraction=0.2,
        eval_interval=1000,
        final_eval=False,
        fd_nodes=400,
        device="cpu",
        log_dir=tmp_path / "run",
    )
    ActorCritic.train_step = spy
    try:
        ghm_train.train_ghm(config, echo=lambda *a, **k: None)
    finally:
        ActorCritic.train_step = original
    assert seen == pytest.approx([1.0, 0.6, 0.2])  # linear in (i - 1) / (N - 1)
    assert "td_final_fraction=0.2" in budget_schedules(config)
