"""Batched A2C on MinAtar's boolean boards: exact resume with every optional ingredient
(input normalisation, reward scaling, stream-AC's layers), the agent and ``pglab evaluate``
on such a run, and what each ingredient does to the network and the rewards."""

import json

import pytest
import torch

from pglab.algos.a2c import A2CTrainConfig, agent_from_checkpoint, train_a2c
from pglab.cli import main as cli_main
from pglab.errors import TensorContractError
from pglab.nets.pixel_cnn import PixelActorCriticCNN
from pglab.run.checkpoint import load_checkpoint_file

BOARD = dict(
    env="minatar:breakout",
    num_envs=8,
    update_every=2,
    device="cpu",
    hidden=16,
    save_interval=2,
    threads=1,
    obs_norm=True,
    reward_scale=True,
    layer_norm=True,
)


def quiet(*args, **kwargs):
    """An echo that prints nothing."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """An uninterrupted run of 4 windows and one stopped after 2 and resumed to 4."""
    root = tmp_path_factory.mktemp("minatar")
    full, half = root / "full", root / "half"
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 4, log_dir=full, **BOARD), echo=quiet)
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 2, log_dir=half, **BOARD), echo=quiet)
    train_a2c(A2CTrainConfig(total_env_steps=8 * 2 * 4, resume=half, device="cpu"), echo=quiet)
    return full, half


def _records(run_dir):
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("perf/")} for r in lines if "meta" not in r]


def test_a_resumed_board_run_equals_the_uninterrupted_one(runs):
    full, half = runs
    a, b = (load_checkpoint_file(run) for run in runs)
    assert a["models"]["model"].keys() == b["models"]["model"].keys()
    assert all(torch.equal(a["models"]["model"][k], b["models"]["model"][k]) for k in a["models"]["model"])
    assert _records(full) == _records(half)
    # the running statistics moved and travel with the checkpoint: input statistics in the
    # network (count: 9 batches of 8 boards, reset included) and the discounted returns
    assert float(a["models"]["model"]["obs_count"]) == pytest.approx(8 * 9, abs=1e-3)
    scaler = a["extra"]["reward_scale"]
    assert torch.equal(scaler["returns"], b["extra"]["reward_scale"]["returns"])
    assert scaler["ret_rms"]["count"] == pytest.approx(8 * 8, abs=1e-3)


def test_the_agent_and_evaluate_read_boards(runs, tmp_path, capsys):
    full, _ = runs
    agent = agent_from_checkpoint(load_checkpoint_file(full))
    assert agent.obs_spec.values == "real" and agent.obs_spec.shape == ("B", 4, 10, 10)
    boards = torch.rand(5, 4, 10, 10, generator=torch.Generator().manual_seed(0)) < 0.2
    actions = agent.act(boards)
    assert actions.dtype == torch.int32 and actions.shape == (5,)
    assert torch.equal(actions, agent.act(boards.float()))
    assert torch.equal(agent.value(boards), agent.value(boards.float()))
    with pytest.raises(TensorContractError, match="obs"):
        agent.policy(torch.zeros(5, 4, 10, 10, dtype=torch.uint8))
    out = tmp_path / "eval.json"
    assert cli_main(["evaluate", str(full), "--episodes", "4", "--num-envs", "4", "--output", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["episodes"] == 4 and result["return_mean"] >= 0


def test_input_normalisation_centres_and_scales_what_it_has_seen():
    torch.manual_seed(0)
    net = PixelActorCriticCNN(4, 10, 10, 3, obs_kind="board", obs_norm=True)
    boards = torch.rand(256, 4, 10, 10) < torch.linspace(0.05, 0.5, 4).view(1, 4, 1, 1)
    raw = net._inputs(boards)
    assert torch.equal(raw, boards.float())  # mean 0, var 1 before any batch
    net.observe(boards)
    inputs = net._inputs(boards)
    assert inputs.mean(0).abs().max() < 1e-4
    assert (inputs.var(0, correction=0) - 1).abs().max() < 1e-3


def test_stream_layers_are_sparse_and_layer_normed():
    torch.manual_seed(0)
    plain = PixelActorCriticCNN(4, 10, 10, 3, obs_kind="board")
    normed = PixelActorCriticCNN(4, 10, 10, 3, obs_kind="board", layer_norm=True, sparsity=0.9)
    assert plain.torso_name == normed.torso_name == "minatar" and plain.hidden == 128
    assert not any(isinstance(m, torch.nn.LayerNorm) for m in plain.modules())
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in normed.modules()) == 2
    conv = normed.torso[0].weight
    assert (conv == 0).float().mean().item() == pytest.approx(0.9, abs=0.03)
    assert (plain.torso[0].weight == 0).float().mean().item() == 0
