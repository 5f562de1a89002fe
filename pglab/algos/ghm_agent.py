"""A trained GHM agent loaded from a checkpoint: ``pglab.load_checkpoint(path)``.

    agent = pglab.load_checkpoint("runs/ghm-mc/checkpoints/checkpoint_latest.pt")  # device="auto"
    rates = agent.act(torch.tensor([[0.5]]))                          # [1, 2]: a_L, a_E (deterministic)
    rates = agent.predict(np.array([[0.5], [1.0]]))                   # the same on NumPy, [2, 2]
    values = agent.value(torch.tensor([[0.5], [1.0]]))                # [2]; NoCritic for a --no-baseline run

``act``, ``predict`` and ``value`` take cash, whatever the model. A ``--model credit-line``
agent's networks work in the model's state, liquidity ``x = cash + credit_limit``:
``act(cash)`` is ``agent.policy`` at ``agent.model.state_from_cash(cash)`` (and cash may be
negative, down to ``-credit_limit``). For GHM the state is cash itself. A model with ``d``
states takes ``[B, d]``: the divisions' cash ``[B, N]`` (rates ``[B, 2N]``, dividend and
issuance of each division in turn), ``(cash, regime)`` with the regime 0 or 1, ``(cash, mu)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pglab.agent import Agent, NoCritic, ObsSpec, check_observation
from pglab.algos.ghm_train import SPEC, build_model, build_networks
from pglab.configs.ghm import GHM_KINDS, GHMTrainConfig
from pglab.envs.dynamics import ContinuousTimeModel
from pglab.errors import CheckpointError
from pglab.nets import GaussianPolicy, ValueNetwork
from pglab.run.checkpoint import load_state_dict_checked
from pglab.run.config import config_from_dict

# What GHMAgent.act and .value read: cash, one finite number per row (a one-state model).
CASH = ObsSpec(("B", 1), "real", torch.float32, name="cash")


@dataclass(repr=False)
class GHMAgent(Agent):
    """A trained GHM policy with its value network and the model it was trained on.

    Attributes:
        policy: :class:`GaussianPolicy` on the model's state ``[B, d]`` (cash for GHM,
            liquidity ``cash + credit_limit`` for the credit line:
            ``model.state_from_cash``); ``policy.act(states, deterministic=True)`` gives
            the rates ``[B, 2]`` (dividend ``a_L``, issuance ``a_E``), clipped to the
            control bounds. :meth:`act` takes cash and converts it.
        baseline: the learned value network on the model's state (``None`` for a
            ``--no-baseline`` run); :meth:`value` takes cash.
        model: the model trained on (``--model``, parameters as trained).
        config: the run's :class:`GHMTrainConfig`. iteration: training iterations done.
        kind: the checkpoint kind (``ghm-mc``, ``ghm-pathwise``, ``ghm-actor-critic``).
        device: where the networks live.
    """

    policy: GaussianPolicy
    baseline: ValueNetwork | None
    model: ContinuousTimeModel
    config: GHMTrainConfig
    iteration: int
    kind: str = "ghm-mc"
    device: torch.device = torch.device("cpu")

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Rates ``[B, A]`` (``a_L``, ``a_E``, within the control box) for cash ``obs``
        ``[B, 1]`` (a model with ``d`` states: ``[B, d]``): the policy's mean by default, a
        sample if not ``deterministic``.

        ``obs`` is a tensor of finite real numbers (float64 and integers are cast to the
        policy's float32); anything else raises :class:`~pglab.agent.ObservationError`."""
        states = self._states(obs, "act")
        with torch.no_grad():
            return self.policy.act(states, deterministic=deterministic)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Learned value ``V(c)`` ``[B]`` of cash ``obs`` ``[B, 1]`` (``[B, d]``; checked as for :meth:`act`)."""
        states = self._states(obs, "value")
        if self.baseline is None:
            raise NoCritic(f"{self.kind} agent: trained with --no-baseline, so it holds no value network")
        with torch.no_grad():
            return self.baseline(states)

    def _states(self, cash: Any, method: str) -> torch.Tensor:
        """The model's states ``[B, d]`` float32 on the agent's device for cash ``[B, d]``,
        checked (a NaN would come back as NaN rates, silently) and converted in float32, as
        the simulator's states are."""
        spec = CASH if self.model.state_dim == 1 else ObsSpec(("B", self.model.state_dim), "real", torch.float32)
        checked = check_observation(cash, spec, where=f"GHMAgent.{method}", device=self.device)
        return self.model.state_from_cash(checked)


def agent_from_checkpoint(checkpoint: dict[str, Any], *, device: str | torch.device = "cpu") -> GHMAgent:
    """Build a :class:`GHMAgent` from a loaded, validated checkpoint dict on ``device``
    (``auto``, ``cpu``, ``cuda[:N]`` or a ``torch.device``)."""
    if checkpoint["kind"] not in GHM_KINDS:
        raise CheckpointError(
            f"checkpoint {checkpoint.get('path')}: kind={checkpoint['kind']!r} is not a GHM checkpoint"
        )
    # a checkpoint of a run made before a field existed: the value it was trained with (SPEC.stored_defaults)
    stored = {**(SPEC.stored_defaults or {}), **checkpoint["config"]}
    config = config_from_dict(GHMTrainConfig, {**stored, "resume": None, "log_dir": None})
    model = build_model(config)
    if isinstance(device, str):
        from pglab.run.device import resolve_device

        device = resolve_device(device)
    policy, baseline = build_networks(config, model, device)
    source = str(checkpoint.get("path"))
    load_state_dict_checked(policy, checkpoint["models"]["policy"], name="policy", source=source)
    if baseline is not None:
        if "baseline" not in checkpoint["models"]:
            raise CheckpointError(f"checkpoint {source}: missing the baseline network")
        load_state_dict_checked(baseline, checkpoint["models"]["baseline"], name="baseline", source=source)
        baseline.eval()
    policy.eval()
    return GHMAgent(
        policy=policy,
        baseline=baseline,
        model=model,
        config=config,
        iteration=int(checkpoint["counters"]["iteration"]),
        kind=checkpoint["kind"],
        device=device,
    )
