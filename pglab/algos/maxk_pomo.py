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

This module also holds what turns a maxk-pomo config or checkpoint into a model
(:func:`build_model`, :func:`load_model`), the agent ``pglab.load_checkpoint`` returns
(:class:`MaxKPOMOAgent`) and the test-set evaluation behind ``pglab evaluate maxk-pomo``
(:func:`evaluate_models`). The trainer is :mod:`pglab.algos.maxk_train`.

rl4co is an optional dependency (``pip install 'pglab[co]'``): this module imports it at
the top, so import *this module* only where rl4co is wanted; nothing in pglab's core
imports it.
"""

from __future__ import annotations

import inspect
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from pglab.agent import Agent, NoCritic, ObservationError, ObsSpec, check_observation
from pglab.configs.maxk import MaxKEvalConfig, MaxKPOMOTrainConfig
from pglab.errors import ConfigError, DataError
from pglab.estimators.maxk import VARIANCE_REDUCTIONS
from pglab.extras import missing_extra
from pglab.losses.maxk import maxk_policy_loss
from pglab.validation import check_choice, check_int

KIND = "maxk-pomo"

try:
    from rl4co.models.zoo.pomo import POMO
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("rl4co", needed_by=KIND, missing=exc.name) from exc


class MaxKPOMO(POMO):
    """POMO whose loss is the unbiased Max@K policy gradient.

    Args:
        env: an RL4CO environment (e.g. ``TSPEnv``); ``None`` builds
            ``rl4co.envs.get_env(env_name, **env_kwargs)``.
        policy: the policy network; ``None`` builds POMO's default attention model.
        k: best-of-k subset size, ``1 <= k <= num_starts`` (checked per batch).
        variance_reduction: ``"none"``, ``"sample_loo"`` (needs n > k) or ``"subloo"``
            (needs k >= 2).
        stable_sort: deterministic tie order when sorting rewards.
        env_name, env_kwargs: how to rebuild the environment. Given ``env``, they are
            taken from it (its ``name`` and the plain-valued attributes of its generator,
            e.g. TSP's ``num_loc``, ``min_loc``, ``max_loc``), and stored in ``hparams``,
            so ``MaxKPOMO.load_from_checkpoint(path)`` works without ``env=``, as RL4CO's
            ``POMO.load_from_checkpoint`` does. A generator with a custom sampler is
            rebuilt with its default sampler; pass ``env=`` to ``load_from_checkpoint``
            to restore such an environment exactly.
        **kwargs: everything POMO/REINFORCE/RL4COLitModule accept (``batch_size``,
            ``optimizer_kwargs``, ``num_starts``, ``num_augment``, ``policy_kwargs`` ...).
    """

    train_metrics: list[str]  # RL4COLitModule's: the names training_step returns as "train/<name>"

    def __init__(
        self,
        env: Any = None,
        policy: torch.nn.Module | None = None,
        k: int = 8,
        variance_reduction: str = "subloo",
        stable_sort: bool = True,
        env_name: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ):
        check_int("k", k, minimum=1)
        check_choice("variance_reduction", variance_reduction, VARIANCE_REDUCTIONS)
        if variance_reduction == "subloo" and k < 2:
            raise ConfigError("k", k, "variance_reduction='subloo' needs k >= 2")
        if not isinstance(stable_sort, bool):
            raise ConfigError("stable_sort", stable_sort, "must be true or false")
        if env is None:
            if env_name is None:
                raise ConfigError(
                    "env", None, "give an RL4CO environment (env=TSPEnv(...)) or env_name (and env_kwargs)"
                )
            from rl4co.envs import get_env

            env = get_env(env_name, **(env_kwargs or {}))
        elif env_name is None:
            env_name, env_kwargs = env.name, {"generator_params": _plain_generator_params(env)}
        # POMO.__init__ calls save_hyperparameters(), which collects the arguments of
        # every __init__ on the stack *as they are now*, so k / variance_reduction /
        # stable_sort and the env_name / env_kwargs just set land in self.hparams next
        # to POMO's own.
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
            here = inspect.currentframe()
            frame = here.f_back if here is not None else None
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


def _plain_generator_params(env: Any) -> dict[str, Any]:
    """The generator attributes of ``env`` that a constructor call can take back
    (numbers, strings, booleans): for TSP ``num_loc``, ``min_loc``, ``max_loc``, ``init_sol_type``."""
    generator = getattr(env, "generator", None)
    if generator is None:
        return {}
    return {
        name: value
        for name, value in vars(generator).items()
        if not name.startswith("_") and isinstance(value, (bool, int, float, str))
    }


# -- building and loading ---------------------------------------------------------------


def _quiet_lightning() -> None:
    # self.log() outside a Lightning Trainer warns once per call; the loop logs itself.
    warnings.filterwarnings("ignore", message=r".*self\.log\(\).*")
    warnings.filterwarnings("ignore", message=r".*is an instance of `nn.Module`.*")


def build_model(config: MaxKPOMOTrainConfig, device: torch.device, **data_sizes: int) -> POMO:
    """The RL4CO module for ``config``: MaxKPOMO or POMO on a ``TSPEnv(num_loc)``, on ``device``.

    ``data_sizes`` (``train_data_size`` ...) size the datasets a Lightning ``fit``
    generates. The weights are drawn from torch's global generator.
    """
    from rl4co.envs import TSPEnv

    _quiet_lightning()
    env = TSPEnv(generator_params={"num_loc": config.num_loc})
    common: dict[str, Any] = {
        "policy_kwargs": {
            "embed_dim": config.embed_dim,
            "num_encoder_layers": config.num_encoder_layers,
            "num_heads": config.num_heads,
        },
        "batch_size": config.batch_size,
        "optimizer_kwargs": {"lr": config.lr},
        **data_sizes,
    }
    if config.algo == "pomo":
        model = POMO(env, **common)
    else:
        model = MaxKPOMO(
            env, k=config.k, variance_reduction=config.variance_reduction, stable_sort=config.stable_sort, **common
        )
    # Return the per-batch best-of-n reward as a metric too (POMO computes it in train).
    model.train_metrics = list(dict.fromkeys([*model.train_metrics, "max_reward"]))
    return model.to(device)


def random_locs(generator: torch.Generator, count: int, num_loc: int) -> torch.Tensor:
    """Uniform TSP instances ``[count, num_loc, 2]`` (float32, CPU) from ``generator``."""
    return torch.rand(count, num_loc, 2, generator=generator)


def model_from_checkpoint(checkpoint: dict[str, Any], device: torch.device) -> tuple[POMO, MaxKPOMOTrainConfig]:
    """The module stored in a loaded maxk-pomo checkpoint (eval mode) and its training config."""
    from pglab.run.checkpoint import load_state_dict_checked
    from pglab.run.config import config_from_dict

    config = config_from_dict(MaxKPOMOTrainConfig, {**checkpoint["config"], "resume": None, "log_dir": None})
    model = build_model(config, device)
    load_state_dict_checked(model, checkpoint["models"]["model"], name="model", source=checkpoint.get("path", "?"))
    model.eval()
    return model, config


def load_model(path: str | Path, device: torch.device) -> tuple[POMO, MaxKPOMOTrainConfig, dict[str, Any]]:
    """Rebuild the RL4CO module stored in a maxk-pomo checkpoint; returns (model, config, checkpoint)."""
    from pglab.run.checkpoint import load_checkpoint_file

    checkpoint = load_checkpoint_file(path, kinds=[KIND], map_location=device)
    model, config = model_from_checkpoint(checkpoint, device)
    return model, config, checkpoint


# What MaxKPOMOAgent.act reads: node coordinates, any number of nodes.
LOCS = ObsSpec(("B", None, 2), "real", torch.float32, name="locs", hint="node coordinates [B, n, 2], n >= 2")


class MaxKPOMOAgent(Agent):
    """A trained MaxKPOMO (or POMO) TSP solver, as ``pglab.load_checkpoint`` returns it.

    Attributes:
        kind: ``"maxk-pomo"``.
        config: the :class:`~pglab.configs.maxk.MaxKPOMOTrainConfig` it was trained with.
        device: where the model lives.
        model: the RL4CO module (:class:`MaxKPOMO`, or RL4CO's ``POMO`` for ``--algo pomo``),
            in eval mode; a ``LightningModule``.
        policy: ``model.policy``, RL4CO's attention-model policy network.
        env: ``model.env``, the RL4CO ``TSPEnv``.

    Observations are node coordinates ``locs`` ``[B, n, 2]`` (float; any n >= 2, not only
    the training size), or a TensorDict holding ``"locs"``. POMO trains no critic (its
    baseline is the mean reward of the n starts), so :meth:`value` raises
    :class:`~pglab.agent.NoCritic`.
    """

    kind = KIND

    def __init__(self, model: POMO, config: MaxKPOMOTrainConfig, device: torch.device):
        self.model = model
        self.policy = model.policy
        self.env = model.env
        self.config = config
        self.device = torch.device(device)

    @torch.no_grad()
    def solve(self, locs: Any, deterministic: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """Tours and their lengths for a batch of instances.

        Args:
            locs: ``[B, n, 2]`` node coordinates, ``n >= 2`` (or a TensorDict with
                ``"locs"``): a tensor of finite real numbers, cast to float32 (float64 and
                integers included). A wrong type, shape or dtype, or a NaN/inf, raises
                :class:`~pglab.agent.ObservationError`.
            deterministic: ``True``: POMO's inference, a greedy rollout from each of the n
                start nodes, the shortest tour kept (the "greedy" column of ``pglab
                evaluate``). ``False``: one sampled tour per instance, from a start node
                chosen uniformly at random (the tours whose best of k ``max@k``
                describes); draws from torch's global generator.

        Returns:
            ``(tours, lengths)``: int64 ``[B, n]`` (each row a permutation of the nodes,
            in visiting order) and float ``[B]`` tour lengths, on ``self.device``.
        """
        from rl4co.utils.ops import unbatchify
        from tensordict import TensorDict, TensorDictBase

        if isinstance(locs, TensorDictBase):
            locs = locs["locs"]
        locs = check_observation(locs, LOCS, where="MaxKPOMOAgent.act", device=self.device)
        batch, num_nodes = locs.shape[0], locs.shape[1]
        if num_nodes < 2:
            raise ObservationError(f"MaxKPOMOAgent.act: locs expected {LOCS.hint}, got {list(locs.shape)}")
        td = self.env.reset(TensorDict({"locs": locs}, batch_size=[batch], device=self.device))
        decode_type = "multistart_greedy" if deterministic else "multistart_sampling"
        out = self.policy(
            td, self.env, phase="test", decode_type=decode_type, num_starts=num_nodes, return_actions=True
        )
        tours = unbatchify(out["actions"], num_nodes)  # [B, n starts, n]
        reward = unbatchify(out["reward"], num_nodes)  # [B, n starts], reward = -length
        start = reward.argmax(dim=-1) if deterministic else torch.randint(num_nodes, (batch,), device=reward.device)
        rows = torch.arange(batch, device=reward.device)
        return tours[rows, start].long(), -reward[rows, start]

    def act(self, obs: Any, deterministic: bool = True) -> torch.Tensor:
        """Tours ``[B, n]`` (int64 node indices in visiting order) for ``obs`` = node
        coordinates ``[B, n, 2]`` (checked and cast as :meth:`solve` says); see :meth:`solve`
        for ``deterministic``."""
        return self.solve(obs, deterministic)[0]

    def value(self, obs: Any) -> Any:
        raise NoCritic(
            f"{KIND} agent: has no value function (POMO's baseline is the mean reward of its n starts, not a critic)"
        )


def agent_from_checkpoint(checkpoint: dict[str, Any], device: str | torch.device = "auto") -> MaxKPOMOAgent:
    """For ``pglab.load_checkpoint``: the agent of a loaded maxk-pomo checkpoint on ``device``."""
    from pglab.run.device import resolve_device

    device = resolve_device(device) if isinstance(device, str) else device
    model, config = model_from_checkpoint(checkpoint, device)
    return MaxKPOMOAgent(model, config, device)


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
    from rl4co.utils.ops import unbatchify
    from tensordict import TensorDict

    from pglab.estimators.maxk import maxk_reward_estimate

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


def reference_tour_lengths(locs: torch.Tensor, *, runs: int = 10) -> torch.Tensor:
    """Near-optimal tour lengths ``[N]`` (float64) of ``locs`` ``[N, n, 2]`` with elkai (LKH).

    Uses :func:`pglab.envs.tsp_solvers.lkh_tour` (integer-scaled costs for the search,
    exact float64 length of the tour found). LKH is not certified optimal; for TSP20 its
    tours matched the exact Held-Karp optimum on every instance checked (tests and
    docs/maxk.md), so gaps are relative to the optimum up to that caveat.
    """
    from pglab.envs.tsp_solvers import distance_matrix, lkh_tour
    from pglab.run.progress import progress_bar

    points = locs.detach().to(torch.float64).cpu().numpy()
    lengths = []
    with progress_bar(len(points), desc="reference tours (elkai)", unit="instance") as bar:
        for coords in points:
            lengths.append(lkh_tour(distance_matrix(coords), runs=runs)[1])
            bar.update(1)
    return torch.tensor(lengths, dtype=torch.float64)


def evaluate_models(config: MaxKEvalConfig, *, echo=print) -> list[dict[str, Any]]:
    """One row per checkpoint: tour lengths (greedy, max@k, best of n, sample mean) and
    gaps to the reference tours, on ``config.episodes`` instances drawn with ``config.seed``."""
    from pglab.run.device import resolve_device
    from pglab.run.progress import progress_bar
    from pglab.run.seeding import make_generator

    if config.threads:
        torch.set_num_threads(config.threads)
    device = resolve_device(config.device)
    loaded = [load_model(path, device) for path in config.checkpoints]
    sizes = {train_config.num_loc for _, train_config, _ in loaded}
    if len(sizes) != 1:
        raise DataError(f"checkpoints: trained on different num_loc {sorted(sizes)}; evaluate them separately")
    num_loc = sizes.pop()
    if config.k > num_loc:
        raise ConfigError("k", config.k, f"must be <= num_loc={num_loc} of the checkpoints")
    locs = random_locs(make_generator(config.seed), config.episodes, num_loc)
    reference = None
    if config.optimal == "elkai":
        tick = time.perf_counter()
        reference = reference_tour_lengths(locs, runs=config.elkai_runs)
        echo(
            f"reference tours (elkai, {config.elkai_runs} runs): mean length {float(reference.mean()):.4f} "
            f"in {time.perf_counter() - tick:.1f} s",
            file=sys.stderr,
        )
    rows = []
    first: dict[str, torch.Tensor] | None = None
    with progress_bar(len(loaded), desc=f"evaluate {KIND}", unit="model") as bar:
        for (model, train_config, checkpoint), path in zip(loaded, config.checkpoints, strict=False):
            torch.manual_seed(config.seed)  # the sampled tours are reproducible too
            lengths = evaluate_tsp_policy(model, locs.to(device), config.k, batch_size=config.batch_size)
            row: dict[str, Any] = {
                "checkpoint": str(path),
                "label": train_config.label,
                "step": int(checkpoint["counters"]["step"]),
                "k": config.k,
                "num_loc": num_loc,
                "num_instances": config.episodes,
            }
            for name, values in lengths.items():
                row[f"{name}_length"] = float(values.double().mean())
                if reference is not None:
                    row[f"{name}_gap_pct"] = float(((values.double() / reference - 1.0) * 100).mean())
            if reference is not None:
                row["reference_length"] = float(reference.mean())
            # Paired difference to the first checkpoint on the same instances, with its
            # standard error: the instance-to-instance spread cancels in the difference.
            if first is None:
                first = lengths
            for name, values in lengths.items():
                diff = values.double() - first[name].double()
                row[f"{name}_diff_vs_first"] = float(diff.mean())
                row[f"{name}_diff_vs_first_se"] = (
                    float(diff.std() / len(diff) ** 0.5) if len(diff) > 1 else float("nan")
                )
            rows.append(row)
            bar.update(1)
    return rows
