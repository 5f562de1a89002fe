"""MaxKPOMO: RL4CO's POMO trained for the best of k sampled solutions.

RL4CO's ``POMO.shared_step`` decodes ``n`` solutions per instance (one per forced start
node), unbatchifies reward and log-likelihood to ``[batch, n]`` and calls
``calculate_loss`` -- the one override point we use. POMO's own loss is REINFORCE with
the shared (mean over the n starts) baseline, which trains for the *average* solution;
MaxKPOMO replaces it by

    loss = -(1/B) * sum_b sum_i w_bi * log p(tour_bi),    w = maxk_gradient_weights(R, k)

whose gradient is an unbiased estimate of ``-grad E[best of k tours]`` (see
:mod:`pglab.estimators.maxk`). Everything else (environment, data, encoder/decoder,
multi-start decoding, augmentation at test time) is RL4CO's.

rl4co is an optional dependency (``pip install 'pglab[co]'``): this module imports it at
the top, so import *this module* only where rl4co is wanted; nothing in pglab's core
imports it.
"""
from __future__ import annotations

import inspect
from typing import Any

import torch

from pglab.errors import ConfigError
from pglab.estimators.maxk import VARIANCE_REDUCTIONS
from pglab.losses.maxk import maxk_policy_loss
from pglab.validation import check_choice, check_int

try:
    from rl4co.models.zoo.pomo import POMO
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("MaxKPOMO needs rl4co: pip install 'pglab[co]'") from exc


class MaxKPOMO(POMO):
    """POMO whose loss is the unbiased Max@K policy gradient.

    Args:
        env: an RL4CO environment (e.g. ``TSPEnv``).
        policy: the policy network; ``None`` builds POMO's default attention model.
        k: best-of-k subset size, ``1 <= k <= num_starts`` (checked per batch).
        variance_reduction: ``"none"``, ``"sample_loo"`` (needs n > k) or ``"subloo"``
            (needs k >= 2).
        stable_sort: deterministic tie order when sorting rewards.
        **kwargs: everything POMO/REINFORCE/RL4COLitModule accept (``batch_size``,
            ``optimizer_kwargs``, ``num_starts``, ``num_augment``, ``policy_kwargs`` ...).
    """

    def __init__(
        self,
        env: Any,
        policy: torch.nn.Module | None = None,
        k: int = 8,
        variance_reduction: str = "subloo",
        stable_sort: bool = True,
        **kwargs: Any,
    ):
        check_int("k", k, minimum=1)
        check_choice("variance_reduction", variance_reduction, VARIANCE_REDUCTIONS)
        if variance_reduction == "subloo" and k < 2:
            raise ConfigError("k", k, "variance_reduction='subloo' needs k >= 2")
        if not isinstance(stable_sort, bool):
            raise ConfigError("stable_sort", stable_sort, "must be true or false")
        # POMO.__init__ calls save_hyperparameters(), which collects the arguments of
        # every __init__ on the stack, so k / variance_reduction / stable_sort land in
        # self.hparams next to POMO's own.
        super().__init__(env, policy=policy, **kwargs)
        self.k = k
        self.variance_reduction = variance_reduction
        self.stable_sort = stable_sort
        if "rho_hat" not in self.train_metrics:
            self.train_metrics = [*self.train_metrics, "rho_hat"]

    def save_hyperparameters(self, *args: Any, ignore: Any = None, frame: Any = None, logger: bool = True) -> None:
        """Lightning's ``save_hyperparameters`` that never stores ``env`` or ``policy``.

        Both are ``nn.Module``s already saved in the state dict; storing them in
        ``hparams`` makes Lightning warn and bloats checkpoints.
        """
        names = [ignore] if isinstance(ignore, str) else list(ignore or [])
        names += [name for name in ("env", "policy") if name not in names]
        if frame is None:
            # Lightning inspects the caller's frame for __init__ arguments; this wrapper
            # must hand it the frame of *our* caller, not its own.
            frame = inspect.currentframe().f_back
        super().save_hyperparameters(*args, ignore=names, frame=frame, logger=logger)

    def calculate_loss(
        self,
        td: Any,
        batch: Any,
        policy_out: dict,
        reward: torch.Tensor | None = None,
        log_likelihood: torch.Tensor | None = None,
    ) -> dict:
        """Max@K REINFORCE loss on unbatchified ``[batch, n]`` rewards/log-likelihoods.

        ``loss = -(w.detach() * log_likelihood).sum(-1).mean()``, w computed under
        ``no_grad`` by :func:`pglab.estimators.maxk.maxk_gradient_weights`. Adds
        ``loss``, ``reinforce_loss``, ``rho_hat`` (unbiased max@k of the batch, mean over
        instances) and ``max_reward`` to ``policy_out`` and returns it.

        Raises:
            ValueError: reward/log-likelihood not 2-D ``[batch, n]`` of equal shape (RL4CO
                passes them flat ``[batch * n]`` unless unbatchified), or k > n, or
                ``sample_loo`` with n <= k.
        """
        reward = policy_out["reward"] if reward is None else reward
        log_likelihood = policy_out["log_likelihood"] if log_likelihood is None else log_likelihood
        if reward.dim() != 2 or log_likelihood.shape != reward.shape:
            raise ValueError(
                "MaxKPOMO.calculate_loss: reward and log_likelihood must be unbatchified [batch, n] "
                f"tensors of the same shape, got reward {tuple(reward.shape)} and "
                f"log_likelihood {tuple(log_likelihood.shape)}"
            )
        terms = maxk_policy_loss(
            log_likelihood,
            reward,
            self.k,
            variance_reduction=self.variance_reduction,  # type: ignore[arg-type]
            stable_sort=self.stable_sort,
        )
        policy_out.update(
            {
                "loss": terms["loss"],
                "reinforce_loss": terms["loss"],
                "rho_hat": terms["stats/rho_hat"],
                "max_reward": terms["stats/max_reward"],
            }
        )
        return policy_out


# -- evaluation ---------------------------------------------------------------------


@torch.no_grad()
def evaluate_tsp_policy(
    model: POMO,
    locs: torch.Tensor,
    k: int,
    *,
    batch_size: int = 250,
) -> dict[str, torch.Tensor]:
    """Tour lengths of a (MaxK)POMO policy on fixed TSP instances.

    For each instance, with n = number of nodes (one rollout per start node, as POMO):

    * ``greedy``: best of the n multi-start greedy rollouts (POMO's standard inference,
      no augmentation);
    * ``maxk``: unbiased estimate of E[shortest of k sampled tours, k distinct uniformly
      chosen start nodes] = ``-maxk_reward_estimate(-lengths_of_n_samples, k)``;
    * ``sample_mean``: mean length of the n sampled tours; ``sample_best``: shortest.

    Args:
        model: a POMO / MaxKPOMO with an RL4CO TSP env.
        locs: float ``[N, num_loc, 2]`` coordinates, on the model's device.
        k: 1 <= k <= num_loc.

    Returns:
        dict of float ``[N]`` tensors (tour lengths, lower is better), on the CPU.
    """
    from tensordict import TensorDict

    from pglab.estimators.maxk import maxk_reward_estimate
    from rl4co.utils.ops import unbatchify

    was_training = model.training
    model.eval()
    num_starts = locs.shape[1]
    parts: dict[str, list[torch.Tensor]] = {"greedy": [], "maxk": [], "sample_mean": [], "sample_best": []}
    for start in range(0, locs.shape[0], batch_size):
        chunk = locs[start : start + batch_size]
        batch = TensorDict({"locs": chunk}, batch_size=[chunk.shape[0]])
        for decode_type in ("multistart_greedy", "multistart_sampling"):
            td = model.env.reset(batch.clone())
            out = model.policy(td, model.env, phase="test", decode_type=decode_type, num_starts=num_starts)
            reward = unbatchify(out["reward"], num_starts)  # [chunk, n], reward = -length
            if decode_type == "multistart_greedy":
                parts["greedy"].append(-reward.max(dim=-1).values.cpu())
            else:
                parts["maxk"].append(-maxk_reward_estimate(reward.float(), k).cpu())
                parts["sample_mean"].append(-reward.mean(dim=-1).cpu())
                parts["sample_best"].append(-reward.max(dim=-1).values.cpu())
    model.train(was_training)
    return {name: torch.cat(values) for name, values in parts.items()}
