"""MaxKPOMO (RL4CO POMO subclass) and the Max@K loss."""

import itertools
import warnings

import pytest
import torch

from pglab.errors import ConfigError
from pglab.losses.maxk import maxk_policy_loss

MODES = ("none", "sample_loo", "subloo")


def reference_weights(row: list[float], k: int, mode: str) -> list[float]:
    """Per-sample weights by enumerating all k-subsets (independent of the sort-based code)."""
    n = len(row)
    subsets = list(itertools.combinations(range(n), k))

    def rho(values: list[float]) -> float:
        subs = list(itertools.combinations(range(len(values)), k))
        return sum(max(values[j] for j in s) for s in subs) / len(subs)

    out = []
    for i in range(n):
        containing = [s for s in subsets if i in s]
        s_i = sum(max(row[j] for j in s) for s in containing) / len(subsets)
        if mode == "none":
            out.append(s_i)
        elif mode == "sample_loo":
            out.append(s_i - (k / n) * rho([row[j] for j in range(n) if j != i]))
        else:
            out.append(
                sum(max(row[j] for j in s) - max(row[j] for j in s if j != i) for s in containing) / len(subsets)
            )
    return out


def reference_loss(log_likelihood, rewards, k, mode):
    w = torch.tensor([reference_weights(r.tolist(), k, mode) for r in rewards], dtype=log_likelihood.dtype)
    return -(w * log_likelihood).sum(-1).mean(), w


@pytest.mark.parametrize("mode", MODES)
def test_loss_equals_reference_and_weights_are_stop_gradient(mode):
    gen = torch.Generator().manual_seed(0)
    rewards = -torch.rand(3, 6, generator=gen, dtype=torch.float64) * 5
    rewards[0, 1] = rewards[0, 4]  # a tie
    rewards.requires_grad_(True)
    log_likelihood = torch.randn(3, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    terms = maxk_policy_loss(log_likelihood, rewards, 3, variance_reduction=mode)
    want, w = reference_loss(log_likelihood.detach(), rewards.detach(), 3, mode)
    torch.testing.assert_close(terms["loss"].detach(), want)
    terms["loss"].backward()
    # d loss / d log p_bi = -w_bi / B; no gradient flows into the rewards.
    torch.testing.assert_close(log_likelihood.grad, -w / 3)
    assert rewards.grad is None


# -- MaxKPOMO ------------------------------------------------------------------------


def tiny_model(num_loc=6, **kwargs):
    pytest.importorskip("rl4co")
    from rl4co.envs import TSPEnv

    from pglab.algos.maxk_pomo import MaxKPOMO

    env = TSPEnv(generator_params={"num_loc": num_loc})
    policy_kwargs = {"embed_dim": 16, "num_encoder_layers": 1, "num_heads": 2}
    return MaxKPOMO(env, policy_kwargs=policy_kwargs, batch_size=4, **kwargs)


@pytest.mark.co
@pytest.mark.parametrize("mode", MODES)
def test_calculate_loss_matches_direct_reference(mode):
    model = tiny_model(k=3, variance_reduction=mode)
    gen = torch.Generator().manual_seed(1)
    reward = -torch.rand(4, 6, generator=gen) * 4
    log_likelihood = torch.randn(4, 6, generator=gen, requires_grad=True)
    out = model.calculate_loss(None, None, {}, reward, log_likelihood)
    want, _ = reference_loss(log_likelihood.detach().double(), reward.double(), 3, mode)
    torch.testing.assert_close(out["loss"].detach().double(), want, rtol=1e-5, atol=1e-6)
    assert out["loss"].requires_grad
    want_rho = torch.tensor(
        [sum(max(r[j] for j in s) for s in itertools.combinations(range(6), 3)) / 20 for r in reward.tolist()]
    ).mean()
    torch.testing.assert_close(out["rho_hat"], want_rho, rtol=1e-5, atol=1e-6)


@pytest.mark.co
def test_calculate_loss_requires_unbatchified_tensors():
    model = tiny_model(k=3)
    with pytest.raises(ValueError, match=r"unbatchified \[batch, n\]"):
        model.calculate_loss(None, None, {}, torch.randn(24), torch.randn(24))
    with pytest.raises(ValueError, match="same shape"):
        model.calculate_loss(None, None, {}, torch.randn(4, 6), torch.randn(4, 5))


@pytest.mark.co
def test_sample_loo_needs_more_samples_than_k():
    # n = num_starts = num_loc = 6 = k: no k-subset leaves a sample out.
    model = tiny_model(k=6, variance_reduction="sample_loo")
    with pytest.raises(ValueError, match="sample_loo.*n > k"):
        model.calculate_loss(None, None, {}, torch.randn(4, 6), torch.randn(4, 6))
    # k > n is rejected as well.
    with pytest.raises(ValueError, match="k must satisfy"):
        tiny_model(k=7).calculate_loss(None, None, {}, torch.randn(4, 6), torch.randn(4, 6))


@pytest.mark.co
def test_constructor_validates_hyperparameters():
    with pytest.raises(ConfigError, match=r"k: .*\(got 0\)"):
        tiny_model(k=0)
    with pytest.raises(ConfigError, match=r"variance_reduction: .*\(got 'loo'\)"):
        tiny_model(variance_reduction="loo")
    with pytest.raises(ConfigError, match="subloo.*k >= 2"):
        tiny_model(k=1, variance_reduction="subloo")


@pytest.mark.co
def test_real_tsp_training_step_changes_parameters_and_saves_hyperparameters():
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = tiny_model(num_loc=8, k=4, variance_reduction="subloo", stable_sort=True)
    assert not [w for w in caught if "is an instance of `nn.Module`" in str(w.message)]
    assert model.hparams["k"] == 4 and model.hparams["variance_reduction"] == "subloo"
    assert model.hparams["stable_sort"] is True
    assert "env" not in model.hparams and "policy" not in model.hparams
    from tensordict import TensorDict

    batch = TensorDict({"locs": torch.rand(4, 8, 2)}, batch_size=[4])
    optimizer = model.configure_optimizers()
    before = [p.detach().clone() for p in model.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Lightning trainer
        result = model.training_step(batch, 0)
    loss = result["loss"]
    assert torch.isfinite(loss)
    assert torch.isfinite(result["train/rho_hat"])
    loss.backward()
    optimizer.step()
    # Adam's first step moves every coordinate against its gradient by ~lr (m/sqrt(v) = sign(g)):
    # the loss reaches the encoder and the decoder, and the step descends it.
    lr = optimizer.param_groups[0]["lr"]
    moved = 0
    for old, param in zip(before, model.parameters(), strict=False):
        if param.grad is None:
            continue
        grad, step = param.grad, param.detach() - old
        big = grad.abs() > 1e-6
        torch.testing.assert_close(step[big], -lr * grad[big].sign(), rtol=1e-2, atol=1e-7)
        moved += int(big.sum())
    assert moved > 1000, moved


@pytest.mark.co
def test_evaluation_reports_consistent_tour_lengths():
    torch.manual_seed(0)
    from pglab.algos.maxk_pomo import evaluate_tsp_policy

    model = tiny_model(num_loc=6, k=3)
    locs = torch.rand(5, 6, 2)
    result = evaluate_tsp_policy(model, locs, 3, batch_size=2)
    assert set(result) == {"greedy", "maxk", "sample_mean", "sample_best"}
    for values in result.values():
        assert values.shape == (5,)
    # best of n <= E[best of k] <= mean of n for every instance.
    assert torch.all(result["sample_best"] <= result["maxk"] + 1e-6)
    assert torch.all(result["maxk"] <= result["sample_mean"] + 1e-6)
    # A tour is at least twice the largest distance from node 0 to another node.
    farthest = (locs - locs[:, :1]).norm(dim=-1).max(dim=-1).values
    assert torch.all(result["greedy"] >= 2 * farthest - 1e-5)


@pytest.mark.co
def test_k_equal_one_with_sample_loo_is_pomo_up_to_n_over_n_minus_1():
    # w_i = (R_i - mean_{j != i} R_j) / n = (R_i - mean_j R_j) / (n - 1): POMO's shared
    # baseline, with the n samples summed instead of averaged.
    from rl4co.models.zoo.pomo import POMO

    model = tiny_model(k=1, variance_reduction="sample_loo")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plain POMO stores env/policy in hparams and says so
        pomo = POMO(model.env, policy_kwargs={"embed_dim": 16, "num_encoder_layers": 1, "num_heads": 2})
    gen = torch.Generator().manual_seed(3)
    reward = -torch.rand(4, 6, generator=gen, dtype=torch.float64) * 4
    log_likelihood = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    ours = model.calculate_loss(None, {}, {}, reward, log_likelihood)["loss"]
    theirs = pomo.calculate_loss(None, {}, {}, reward, log_likelihood)["loss"]
    torch.testing.assert_close(ours, theirs * 6 / 5)


@pytest.mark.co
def test_hyperparameters_describe_the_environment_so_the_model_rebuilds_without_env():
    from pglab.algos.maxk_pomo import MaxKPOMO

    model = tiny_model(num_loc=7, k=3)
    assert model.hparams["env_name"] == "tsp"
    assert model.hparams["env_kwargs"]["generator_params"]["num_loc"] == 7
    # What Lightning's load_from_checkpoint does: the class called with the stored hparams.
    rebuilt = MaxKPOMO(**dict(model.hparams))
    assert rebuilt.env.name == "tsp" and rebuilt.env.generator.num_loc == 7 and rebuilt.k == 3
    assert model.state_dict().keys() == rebuilt.state_dict().keys()
    with pytest.raises(ConfigError, match="env_name"):
        MaxKPOMO(k=3)


@pytest.mark.co
@pytest.mark.slow
def test_rl4co_lightning_trainer_fits_maxk_pomo_and_logs_rho_hat(tmp_path):
    pytest.importorskip("rl4co")
    from rl4co.utils.trainer import RL4COTrainer

    from pglab.algos.maxk_pomo import MaxKPOMO

    torch.manual_seed(0)
    model = tiny_model(num_loc=6, k=3, train_data_size=8, val_data_size=4, test_data_size=4)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = RL4COTrainer(
        max_epochs=1,
        accelerator="cpu",
        precision="32",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        matmul_precision=None,  # keep float32 matmuls float32 (RL4CO's default "medium" is process-wide)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model)
    assert torch.isfinite(trainer.logged_metrics["train/rho_hat"])
    # rho_hat (max@3 of the rewards) is at least the mean reward of the same batch.
    assert trainer.logged_metrics["train/rho_hat"] >= trainer.logged_metrics["train/reward"]
    assert sum(float((a - b.detach()).abs().sum()) for a, b in zip(before, model.parameters(), strict=False)) > 0
    # A Lightning checkpoint loads without env=, as RL4CO's POMO.load_from_checkpoint does.
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = MaxKPOMO.load_from_checkpoint(tmp_path / "model.ckpt", map_location="cpu")
    assert loaded.k == 3 and loaded.variance_reduction == "subloo" and loaded.env.generator.num_loc == 6
    state = model.state_dict()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, state[name]), name
