"""Pinned update rules of MaxKPOMO and Deep-PSO, against references computed in the test.

MaxKPOMO: one real ``training_step`` (RL4CO's multi-start decoding, our ``calculate_loss``)
on a tiny fixed batch; its parameter gradient must equal the gradient of
``-(1/B) sum_b sum_i w_bi log p(tour_bi)`` where the tour lengths are recomputed here from
the coordinates and ``w`` comes from enumerating every k-subset (slow, independent of the
sort-based estimator). POMO's shared baseline is pinned the same way, so the documented
difference between the two losses is checked on real gradients.

Deep-PSO: the velocity update on a hand-built swarm whose personal and global bests are
far apart (a swapped or wrong best moves the particle the wrong way), the strict
improvement rule of the personal best, the global best as the best personal best of each
instance's own swarm, and the trainer's per-step rewards, replayed step by step.

Learning: a two-armed bandit on which the best-of-k objective and the mean objective
disagree; the Max@K loss must find the arm the mean objective rejects.
"""

import itertools
import math
import warnings

import pytest
import torch

from pglab.envs.pso_tsp import PSOTSPEnv, PSOTSPEnvConfig, SwarmState, fixed_coefficients, random_instances
from pglab.losses.maxk import maxk_policy_loss
from pglab.run.config import make_config
from pglab.run.seeding import make_generator


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny tensors: on a busy 2-core machine torch's thread pool spins (a [32, 8] max took
    # 20 ms with 2 threads, 0.02 ms with 1); one thread makes this file ~5x faster.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- slow references ----------------------------------------------------------------------------


def subset_weights(row: list[float], k: int, mode: str) -> list[float]:
    """Max@K weights of one row by enumerating all C(n, k) subsets (plain Python floats).

    none:       w_i = (1/C(n,k)) sum_{S ni i} max_S g
    sample_loo: w_i = (that) - (k/n) * mean over k-subsets of the other n-1 samples of max
    subloo:     w_i = (1/C(n,k)) sum_{S ni i} (max_S g - max_{S minus i} g)
    """
    n = len(row)
    subsets = list(itertools.combinations(range(n), k))
    weights = []
    for i in range(n):
        containing = [s for s in subsets if i in s]
        s_i = sum(max(row[j] for j in s) for s in containing) / len(subsets)
        if mode == "none":
            weights.append(s_i)
        elif mode == "sample_loo":
            others = [row[j] for j in range(n) if j != i]
            loo = list(itertools.combinations(range(n - 1), k))
            weights.append(s_i - (k / n) * sum(max(others[j] for j in s) for s in loo) / len(loo))
        else:
            weights.append(
                sum(max(row[j] for j in s) - max(row[j] for j in s if j != i) for s in containing) / len(subsets)
            )
    return weights


def closed_tour_length(locs: torch.Tensor, tour: torch.Tensor) -> float:
    """Length of the closed tour ``tour`` (node indices) through ``locs [n, 2]``, in float64."""
    points = locs.double()[tour]
    return float((points - points.roll(-1, dims=0)).norm(dim=-1).sum())


# -- MaxKPOMO: one real training step --------------------------------------------------------------

NUM_LOC, BATCH = 5, 3


def tiny_maxk_model(algo: str, k: int, mode: str):
    pytest.importorskip("rl4co")
    from pglab.algos.maxk_pomo import build_model
    from pglab.configs.maxk import MaxKPOMOTrainConfig

    config = MaxKPOMOTrainConfig(
        algo=algo,
        num_loc=NUM_LOC,
        k=k,
        variance_reduction=mode,
        batch_size=BATCH,
        embed_dim=16,
        num_encoder_layers=1,
        num_heads=2,
        device="cpu",
    )
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plain POMO stores env/policy in hparams and says so
        # float64 (RL4CO's TSP runs in it): the comparisons below can then be tight.
        return build_model(config, torch.device("cpu")).double()


def training_step_with_decoded_tours(model):
    """``model.training_step`` on a fixed batch, as pglab's trainer calls it; returns the loss
    and RL4CO's policy output of that same call (tours, flat log-likelihoods)."""
    from tensordict import TensorDict

    locs = torch.rand(BATCH, NUM_LOC, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    captured = {}
    hook = model.policy.register_forward_hook(lambda module, args, out: captured.update(out=out))
    torch.manual_seed(1)  # the multi-start sampling draws from torch's global generator
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # self.log() without a Lightning trainer
        result = model.training_step(TensorDict({"locs": locs}, batch_size=[BATCH]), 0)
    hook.remove()
    return locs, result["loss"], captured["out"]


@pytest.mark.co
@pytest.mark.parametrize(
    ("algo", "k", "mode"),
    [
        ("maxk-pomo", 3, "none"),
        ("maxk-pomo", 3, "sample_loo"),
        ("maxk-pomo", 3, "subloo"),
        ("maxk-pomo", 2, "subloo"),
        ("pomo", 3, "subloo"),
    ],
)
def test_training_step_gradient_is_the_weighted_log_likelihood_gradient(algo, k, mode):
    model = tiny_maxk_model(algo, k, mode)
    assert type(model).__name__ == ("POMO" if algo == "pomo" else "MaxKPOMO")
    locs, loss, out = training_step_with_decoded_tours(model)
    # RL4CO repeats the batch n times: flat row r is instance r % B, start r // B.
    tours, flat_log_likelihood = out["actions"], out["log_likelihood"]
    assert tours.shape == (NUM_LOC * BATCH, NUM_LOC)
    log_likelihood = flat_log_likelihood.reshape(NUM_LOC, BATCH).T  # [B, n]
    reward = torch.tensor(
        [[-closed_tour_length(locs[b], tours[s * BATCH + b]) for s in range(NUM_LOC)] for b in range(BATCH)],
        dtype=torch.float64,
    )
    # POMO: one tour per forced start node.
    assert sorted(tours.reshape(NUM_LOC, BATCH, NUM_LOC)[:, 0, 0].tolist()) == list(range(NUM_LOC))
    if algo == "pomo":
        # RL4CO's shared baseline: -mean_{b,i} (R_bi - mean_j R_bj) log p_bi, i.e. w = (R - mean R) / n.
        weights = (reward - reward.mean(-1, keepdim=True)) / NUM_LOC
    else:
        weights = torch.tensor([subset_weights(row, k, mode) for row in reward.tolist()], dtype=torch.float64)
    reference = -(weights * log_likelihood).sum(-1).mean()
    torch.testing.assert_close(loss, reference, rtol=1e-10, atol=1e-12)
    params = [p for p in model.parameters() if p.requires_grad]
    got = torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
    want = torch.autograd.grad(reference, params, allow_unused=True)
    checked = 0
    for g, w in zip(got, want, strict=False):
        assert (g is None) == (w is None)
        if g is not None:
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)
            checked += int(w.abs().sum() > 0)
    assert checked >= 5  # the comparison covers the encoder and the decoder, not zeros


@pytest.mark.co
def test_maxk_with_k_one_and_sample_loo_is_pomo_times_n_over_n_minus_one_on_real_gradients():
    # The module docstring's claim, end to end: same weights, same tours, gradients in ratio n/(n-1).
    maxk = tiny_maxk_model("maxk-pomo", 1, "sample_loo")
    pomo = tiny_maxk_model("pomo", 1, "sample_loo")
    pomo.load_state_dict(maxk.state_dict())
    _, maxk_loss, maxk_out = training_step_with_decoded_tours(maxk)
    _, pomo_loss, pomo_out = training_step_with_decoded_tours(pomo)
    assert torch.equal(maxk_out["actions"], pomo_out["actions"])
    torch.testing.assert_close(maxk_loss, pomo_loss * NUM_LOC / (NUM_LOC - 1))
    for a, b in zip(
        torch.autograd.grad(maxk_loss, list(maxk.parameters()), allow_unused=True),
        torch.autograd.grad(pomo_loss, list(pomo.parameters()), allow_unused=True),
        strict=False,
    ):
        if a is not None:
            torch.testing.assert_close(a, b * NUM_LOC / (NUM_LOC - 1), rtol=1e-9, atol=1e-12)


# -- Max@K learning: a bandit where best-of-k and the mean disagree ---------------------------------


ARM_0_PAYS, ARM_1_PAYS_ONE_WITH = 0.6, 0.5


def best_of_k_optimum(k: int) -> float:
    """argmax_p E[max of k draws] for the policy that plays arm 1 with probability p.

    A draw is 1 when it is arm 1 and pays (probability p q), 0.6 when it is arm 0, else 0:
    E = 1 - (1 - p q)^k + 0.6 ((1 - p q)^k - (p (1 - q))^k). Solved on a fine grid.
    """
    p = torch.linspace(0, 1, 200_001, dtype=torch.float64)
    q, a = ARM_1_PAYS_ONE_WITH, ARM_0_PAYS
    value = 1 - (1 - p * q) ** k + a * ((1 - p * q) ** k - (p * (1 - q)) ** k)
    return float(p[value.argmax()])


def train_bandit(k: int, mode: str, steps: int = 150) -> float:
    """Max@K REINFORCE on a two-armed bandit; returns P(arm 1) averaged over the second half.

    Arm 0 pays 0.6 always (the better mean); arm 1 pays 1 or 0 (mean 0.5) but the best of
    several draws favours it: the best-of-k optimum mixes the arms, p* = 0.8 for k = 2 and
    0.93 for k = 4, while the mean objective (k = 1) plays arm 0 only.
    """
    generator = torch.Generator().manual_seed(0)
    logits = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.Adam([logits], lr=0.05)
    instances, samples = 32, 8
    tail = []
    for step in range(steps):
        probs = torch.softmax(logits.detach(), 0)
        if step >= steps // 2:
            tail.append(float(probs[1]))
        arms = torch.multinomial(probs.expand(instances, 2), samples, replacement=True, generator=generator)
        pays = torch.rand(instances, samples, generator=generator, dtype=torch.float64) < ARM_1_PAYS_ONE_WITH
        rewards = torch.where(arms == 0, torch.full(pays.shape, ARM_0_PAYS, dtype=torch.float64), pays.double())
        log_likelihood = torch.log_softmax(logits, 0)[arms]
        optimizer.zero_grad()
        maxk_policy_loss(log_likelihood, rewards, k, variance_reduction=mode)["loss"].backward()
        optimizer.step()
    return sum(tail) / len(tail)


@pytest.mark.parametrize("mode", ["sample_loo", "subloo"])  # "none" is unbiased too, but too noisy for 150 steps
def test_maxk_loss_learns_the_best_of_k_optimum_of_a_bandit(mode):
    # p* = 0.80 for k = 2 and 0.93 for k = 4. A loss that used k - 1 or k + 1 at k = 2 lands
    # at 0 or 0.90; a wrong sign at 0. Seeded: seeds 0-4 all land within 0.025 of p*.
    for k in (2, 4):
        assert abs(train_bandit(k, mode) - best_of_k_optimum(k)) < 0.04, k
    assert best_of_k_optimum(1) == 0.0  # the mean objective: arm 0 only


# -- Deep-PSO: the environment's update -------------------------------------------------------------


def pso_env(decode="sample", seed=0, **overrides):
    config = PSOTSPEnvConfig(
        **{"num_cities": 7, "knn": 3, "n_particles": 3, "pso_iterations": 4, "v_max": 100.0, **overrides}
    )
    return PSOTSPEnv(config, "cpu", make_generator(seed), decode=decode)


def test_velocity_update_pulls_towards_own_pbest_and_own_swarms_gbest():
    """A hand-built swarm: x = 0, v = 1, pbest = +10, gbest = -100 (instance 0) and +1000
    (instance 1). Any mix-up of the two bests (swapped, gbest = pbest, another instance's
    gbest, the updated instead of the current bests) changes v' by hundreds."""
    env = pso_env(v_max=1e4)
    state = env.reset(random_instances(2, 7, make_generator(1)))
    B, P, D = state.position.shape
    state.position = torch.zeros(B, P, D)
    state.velocity = torch.ones(B, P, D)
    state.pbest = torch.full((B, P, D), 10.0) + torch.arange(P).view(1, P, 1)  # distinct per particle
    state.gbest = torch.tensor([-100.0, 1000.0]).view(B, 1).expand(B, D).clone()
    # per-particle, per-edge coefficients (all inside the clamp ranges)
    u = torch.rand(B, P, D, 3, generator=make_generator(2), dtype=torch.float64)
    wc1c2 = torch.stack([0.2 + 0.7 * u[..., 0], 0.1 + 1.5 * u[..., 1], 0.1 + 1.5 * u[..., 2]], -1).float()
    replay = torch.Generator()
    replay.set_state(env.generator.get_state())
    before = state.snapshot()
    after, _, _ = env.step(wc1c2)
    r1 = torch.rand((B, P, D), generator=replay).double()
    r2 = torch.rand((B, P, D), generator=replay).double()
    w, c1, c2 = wc1c2.double().unbind(-1)
    x, v = before.position.double(), before.velocity.double()
    want = w * v + c1 * r1 * (before.pbest.double() - x) + c2 * r2 * (before.gbest.double()[:, None, :] - x)
    torch.testing.assert_close(after.velocity.double(), want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(after.position.double(), x + want, rtol=1e-6, atol=1e-5)
    # The construction: each instance's own gbest dominates (pulled down to -100, up to +1000).
    assert float(after.velocity[0].mean()) < -10 and float(after.velocity[1].mean()) > 100


def test_velocity_is_clamped_after_the_update_not_before():
    env = pso_env(v_max=0.5)
    state = env.reset(random_instances(1, 7, make_generator(3)))
    state.velocity = torch.full_like(state.velocity, 2.0)
    # w = 0.9, no attraction: v' = clamp(0.9 * 2) = 0.5 (clamping v first would give 0.45)
    after, _, _ = env.step(fixed_coefficients(tuple(state.position.shape), 0.9, 0.0, 0.0))
    torch.testing.assert_close(after.velocity, torch.full_like(after.velocity, 0.5))


def assert_gbest_is_best_pbest_of_each_swarm(state: SwarmState):
    leader = state.pbest_cost.argmin(dim=1)
    for b in range(state.pbest.shape[0]):
        assert torch.equal(state.gbest[b], state.pbest[b, leader[b]])
        assert state.gbest_cost[b] == state.pbest_cost[b].min()


@pytest.mark.parametrize("decode", ["sample", "greedy"])
def test_gbest_is_the_position_of_the_best_personal_best_of_each_instance(decode):
    env = pso_env(decode, num_cities=9, knn=4, n_particles=5, init_std=2.0)
    state = env.reset(random_instances(3, 9, make_generator(4)))
    assert torch.equal(state.pbest, state.position) and torch.equal(state.velocity, torch.zeros_like(state.velocity))
    assert_gbest_is_best_pbest_of_each_swarm(state)
    leaders = [state.pbest_cost.argmin(1)]
    replaced = 0
    for step in range(4):
        before = state.snapshot()
        wc1c2 = 1.5 * torch.rand(3, 5, env.config.dim, 3, generator=make_generator(10 + step))
        state, reward, _ = env.step(wc1c2)
        assert_gbest_is_best_pbest_of_each_swarm(state)
        # personal best: replaced exactly where the new tour is strictly shorter
        improved = state.cost < before.pbest_cost
        torch.testing.assert_close(
            state.pbest, torch.where(improved[..., None], state.position, before.pbest), rtol=0, atol=0
        )
        assert torch.equal(state.pbest_cost, torch.where(improved, state.cost, before.pbest_cost))
        leaders.append(state.pbest_cost.argmin(1))
        replaced += int(improved.sum())
    # The construction exercises the rules: the leader is not always particle 0 (gbest =
    # pbest[:, 0] fails), and personal bests do get replaced (a frozen pbest fails).
    assert bool((torch.stack(leaders) != 0).any()) and replaced > 0


def test_an_equally_long_tour_does_not_replace_the_personal_best():
    # Greedy decoding of a slightly moved position gives the same tour, hence the same
    # length: pbest must keep the old position ("a new best only when strictly better").
    env = pso_env("greedy", knn=6, init_std=3.0)
    state = env.reset(random_instances(2, 7, make_generator(5)))
    state.velocity = torch.full_like(state.velocity, 1e-4)
    before = state.snapshot()
    after, _, _ = env.step(fixed_coefficients(tuple(state.position.shape), 1.0, 0.0, 0.0))
    assert not torch.equal(after.position, before.position)
    assert torch.equal(after.cost, before.cost)  # same tours
    assert torch.equal(after.pbest, before.pbest) and torch.equal(after.gbest, before.gbest)
    assert torch.equal(after.best_tour, before.best_tour)


# -- Deep-PSO: the trainer's rewards and actions, step by step ----------------------------------------


class RecordingEnv(PSOTSPEnv):
    """PSOTSPEnv that keeps (swarm before, coefficients, swarm after) of every step."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps = []

    def reset(self, coords):
        self.steps = []
        state = super().reset(coords)
        self.initial = state.snapshot()
        return state

    def step(self, wc1c2):
        before = self.state.snapshot()
        state, reward, done = super().step(wc1c2)
        self.steps.append((before, wc1c2.clone(), state.snapshot()))
        return state, reward, done


@pytest.mark.parametrize("reward", ["tour_length", "pbest_improvement", "gbest_improvement", "gbest_credit"])
def test_rollout_rewards_actions_and_observed_bests_step_by_step(reward):
    from pglab.algos.pso_tsp import PSOTSPTrainConfig, build_model, collect_rollout

    config = make_config(
        PSOTSPTrainConfig,
        num_cities=7,
        knn=3,
        n_particles=3,
        pso_iterations=4,
        emb_dim=8,
        num_heads=2,
        node_layers=1,
        instances_per_iteration=2,
        device="cpu",
        reward=reward,
    )
    torch.manual_seed(0)
    model = build_model(config, torch.device("cpu"))
    env = RecordingEnv(config.env, "cpu", make_generator(0))
    rollout = collect_rollout(model, env, random_instances(2, 7, make_generator(1)), config, make_generator(2))
    scale = 0.7124 * math.sqrt(7)  # L_ref, the Beardwood-Halton-Hammersley length
    initial_mean = env.initial.cost.double().mean(1, keepdim=True)
    assert len(env.steps) == 4
    for t, (before, wc1c2, after) in enumerate(env.steps):
        # the action the env ran is the stored action; the policy saw the swarm before the step
        assert torch.equal(rollout.actions[t], wc1c2)
        assert torch.equal(rollout.pbest[t], before.pbest) and torch.equal(rollout.gbest[t], before.gbest)
        assert torch.equal(rollout.position[t], before.position) and torch.equal(rollout.velocity[t], before.velocity)
        assert torch.equal(rollout.tour_length[t], after.cost)
        if reward == "tour_length":
            want = (initial_mean - after.cost.double()) / scale
        elif reward == "pbest_improvement":
            want = (before.pbest_cost.double() - after.pbest_cost.double()) / scale
        else:
            gain = (before.best_cost.double() - after.best_cost.double()) / scale  # [B], >= 0
            want = gain[:, None].expand(2, 3).clone()
            if reward == "gbest_credit":
                want = torch.zeros(2, 3, dtype=torch.float64)
                for b in range(2):
                    costs = after.cost[b].tolist()
                    want[b, costs.index(min(costs))] = gain[b]  # the first particle holding the new best
        torch.testing.assert_close(rollout.rewards[t].double(), want, rtol=1e-5, atol=1e-6)
    assert torch.equal(rollout.best_cost, env.steps[-1][2].best_cost)
    if reward != "tour_length":
        assert bool((rollout.rewards >= 0).all()) and bool((rollout.rewards > 0).any())
