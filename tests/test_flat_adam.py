"""FlatAdam (pglab.algos.flat_adam): torch's Adam step over one flat buffer (equal to
rounding), with its state checkpointed through the wrapped torch optimiser."""

import copy

import pytest
import torch
from torch import nn

from pglab.algos.flat_adam import FlatAdam
from pglab.algos.onpolicy import clip_and_step, gradient_step
from pglab.nets.actor_critic import CategoricalActorCritic


def _net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return CategoricalActorCritic(4, 3, (16, 8))


def _write_gradients(net: nn.Module, generator: torch.Generator, scale: float) -> list[torch.Tensor]:
    """Random gradients written *into* .grad (as the closed form does); returns copies."""
    grads = []
    for param in net.parameters():
        value = scale * torch.randn(param.shape, generator=generator)
        if param.grad is None:
            param.grad = value.clone()
        else:
            param.grad.copy_(value)
        grads.append(value)
    return grads


@pytest.mark.parametrize(
    "options",
    [
        {"fused": True},  # torch's fused kernel, called directly
        {"fused": True, "weight_decay": 0.01},  # through torch.optim.adam.adam
        {"fused": False},  # torch's foreach step, through torch.optim.adam.adam
    ],
    ids=["fused-kernel", "fused-weight-decay", "foreach"],
)
def test_flat_step_is_torch_adam_without_clipping(options):
    reference, flat_net = _net(), _net()
    torch_adam = torch.optim.Adam(reference.parameters(), lr=3e-3, eps=1e-5, **options)
    flat = FlatAdam(torch.optim.Adam(flat_net.parameters(), lr=3e-3, eps=1e-5, **options))
    generator = torch.Generator().manual_seed(1)
    for step in range(6):
        grads = _write_gradients(flat_net, generator, 0.3)
        for param, grad in zip(reference.parameters(), grads, strict=False):
            param.grad = grad.clone()
        if step == 3:  # a learning-rate schedule writes the torch optimiser's group
            torch_adam.param_groups[0]["lr"] = flat.optimizer.param_groups[0]["lr"] = 1e-3
        norm = clip_and_step(list(flat_net.parameters()), flat, max_grad_norm=1e6)
        expected = clip_and_step(list(reference.parameters()), torch_adam, max_grad_norm=1e6)
        assert float(norm) == pytest.approx(float(expected), rel=1e-6)
        for (name, a), b in zip(reference.named_parameters(), flat_net.parameters(), strict=False):
            # the kernel's vector body and scalar tail may round differently (FMA), so a
            # tensor's elements can differ in the last bit once they sit in one buffer
            torch.testing.assert_close(a, b, atol=1e-7, rtol=1e-6, msg=f"step {step}, {name}")


def test_flat_clip_matches_clip_grad_norm():
    reference, flat_net = _net(), _net()
    torch_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, fused=True)
    flat = FlatAdam(torch.optim.Adam(flat_net.parameters(), lr=1e-2, fused=True))
    generator = torch.Generator().manual_seed(2)
    for _ in range(4):
        grads = _write_gradients(flat_net, generator, 2.0)
        for param, grad in zip(reference.parameters(), grads, strict=False):
            param.grad = grad.clone()
        norm = flat.clip_and_step(0.5)
        expected = nn.utils.clip_grad_norm_(list(reference.parameters()), 0.5)
        torch_adam.step()
        assert float(norm) == pytest.approx(float(expected), rel=1e-5)
        assert float(norm) > 0.5  # the clip was active
        for a, b in zip(reference.parameters(), flat_net.parameters(), strict=False):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_nan_gradient_spreads_as_with_clip_grad_norm():
    # One NaN element makes the global norm NaN; clip_grad_norm_ then multiplies every
    # gradient by NaN, so the whole step is NaN. FlatAdam must not step the rest unclipped.
    reference, flat_net = _net(), _net()
    torch_adam = torch.optim.Adam(reference.parameters(), lr=1e-2, fused=True)
    flat = FlatAdam(torch.optim.Adam(flat_net.parameters(), lr=1e-2, fused=True))
    grads = _write_gradients(flat_net, torch.Generator().manual_seed(4), 1.0)
    grads[0].view(-1)[0] = float("nan")
    next(iter(flat_net.parameters())).grad.view(-1)[0] = float("nan")
    for param, grad in zip(reference.parameters(), grads, strict=False):
        param.grad = grad.clone()
    norm = flat.clip_and_step(0.5)
    nn.utils.clip_grad_norm_(list(reference.parameters()), 0.5)
    torch_adam.step()
    assert torch.isnan(norm)
    for a, b in zip(reference.parameters(), flat_net.parameters(), strict=False):
        assert torch.equal(torch.isnan(a), torch.isnan(b))
    assert all(torch.isnan(p).all() for p in flat_net.parameters())


def test_state_dict_round_trip_resumes_exactly_and_loads_into_plain_adam():
    net = _net()
    flat = FlatAdam(torch.optim.Adam(net.parameters(), lr=3e-3, fused=True))
    generator = torch.Generator().manual_seed(3)
    for _ in range(3):
        _write_gradients(net, generator, 0.5)
        flat.clip_and_step(1e6)
    saved_model, saved_optimizer = copy.deepcopy(net.state_dict()), copy.deepcopy(flat.optimizer.state_dict())
    assert all(float(entry["step"]) == 3.0 for entry in saved_optimizer["state"].values())

    # a second FlatAdam loaded from the checkpoint, and a plain torch Adam loaded from it
    resumed_net, plain_net = _net(seed=9), _net(seed=9)
    resumed = FlatAdam(torch.optim.Adam(resumed_net.parameters(), lr=3e-3, fused=True))
    plain = torch.optim.Adam(plain_net.parameters(), lr=3e-3, fused=True)
    for model, optimizer in ((resumed_net, resumed.optimizer), (plain_net, plain)):
        model.load_state_dict(saved_model)
        optimizer.load_state_dict(saved_optimizer)
    continuation = torch.Generator().manual_seed(4)
    for _ in range(3):
        grads = _write_gradients(net, continuation, 0.5)
        for model in (resumed_net, plain_net):
            for param, grad in zip(model.parameters(), grads, strict=False):
                if param.grad is None:
                    param.grad = grad.clone()
                else:
                    param.grad.copy_(grad)
        flat.clip_and_step(1e6)
        resumed.clip_and_step(1e6)
        plain.step()
    for a, b, c in zip(net.parameters(), resumed_net.parameters(), plain_net.parameters(), strict=False):
        assert torch.equal(a, b)  # the same flat arithmetic: exact
        torch.testing.assert_close(a, c, atol=1e-7, rtol=1e-6)  # per-tensor kernel: to rounding


def test_parameters_gradients_and_moments_are_views_of_the_flat_buffers():
    net = _net()
    flat = FlatAdam(torch.optim.Adam(net.parameters(), lr=1e-2))
    total = sum(p.numel() for p in net.parameters())
    assert flat.values.numel() == total
    for param in net.parameters():
        assert param.data_ptr() >= flat.values.data_ptr() and param.grad.data_ptr() >= flat.grad.data_ptr()
        assert flat.optimizer.state[param]["exp_avg"].data_ptr() >= flat.exp_avg.data_ptr()
    with torch.no_grad():
        flat.values.zero_()
    assert all(float(p.detach().abs().sum()) == 0.0 for p in net.parameters())


def test_unsupported_optimisers_and_autograd_steps_are_refused():
    net = _net()
    with pytest.raises(TypeError, match="torch.optim.Adam"):
        FlatAdam(torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="amsgrad"):
        FlatAdam(torch.optim.Adam(net.parameters(), amsgrad=True))
    params = list(net.parameters())
    with pytest.raises(ValueError, match="one parameter group"):
        FlatAdam(torch.optim.Adam([{"params": params[:2]}, {"params": params[2:]}]))
    flat = FlatAdam(torch.optim.Adam(net.parameters()))
    loss = net.value(torch.randn(3, 4)).sum()
    with pytest.raises(TypeError, match="FlatAdam"):
        gradient_step(loss, net.parameters(), flat, 0.5)


def test_gradients_reset_by_zero_grad_are_pointed_back_at_the_flat_buffer():
    # a callback's net.zero_grad() sets .grad to None; the next step must not run on the old
    # flat gradient while new gradients go elsewhere
    net = _net()
    flat = FlatAdam(torch.optim.Adam(net.parameters(), lr=1e-2))
    generator = torch.Generator().manual_seed(6)
    _write_gradients(net, generator, 0.5)
    flat.clip_and_step(1e6)
    net.zero_grad(set_to_none=True)
    flat.ensure_grad_views()
    written = _write_gradients(net, generator, 0.5)
    offset = 0
    for param, grad in zip(net.parameters(), written, strict=False):
        assert torch.equal(flat.grad[offset : offset + param.numel()], grad.reshape(-1))
        offset += param.numel()
