"""``pglab validate CHECKPOINT``: the HJB residual of a trained GHM agent.

Loads the checkpoint's policy and value network, solves the FD reference for the
checkpoint's own model parameters (or reads the run's ``fd_reference.npz``), and
reports with :class:`pglab.hjb.residual.HJBResidualValidator`, side by side for the
learned agent and the FD solution itself:

* ``|R_opt| = |rho V - max_u H|`` and ``|R_pi| = |rho V - H(pi)|`` (max, mean, RMS) on
  the interior ``[c_min, c_max]``; the boundary layer ``(0, c_min)`` and ``V(0)`` apart;
* the policy's Hamiltonian gap under ``V*`` (needs no value network);
* ``|V - V*|``, ``|u - u*|`` per control, and the thresholds against the FD ones.

Writes ``validation.json`` and ``validation.png`` into the run directory (or
``--output``; for a checkpoint outside a run directory, the checkpoint's folder)
atomically; no other file is touched.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

from pglab.configs.ghm import ValidateConfig
from pglab.errors import ConfigError
from pglab.run.config import parse_flags
from pglab.validation import check_output_path

__all__ = ["ValidateConfig", "format_report", "plot_validation", "validate", "validate_checkpoint"]


def validate_checkpoint(config: ValidateConfig):
    """Validate ``config.checkpoint`` without writing anything: returns
    ``(payload, learned report, FD reference report, folder)``; ``payload`` is the
    JSON-ready content of ``validation.json``, ``folder`` the run directory (or, for a
    checkpoint outside one, the checkpoint's folder)."""
    import torch

    from pglab.algos.ghm_agent import agent_from_checkpoint
    from pglab.algos.ghm_train import reference_solution, state_label
    from pglab.configs.ghm import GHM_KINDS
    from pglab.envs.ghm import GHMModel
    from pglab.errors import UsageError
    from pglab.hjb.residual import HJBResidualValidator
    from pglab.run.checkpoint import load_checkpoint_file
    from pglab.run.rundir import find_run_dir

    checkpoint = load_checkpoint_file(config.checkpoint, kinds=GHM_KINDS, map_location="cpu")
    agent = agent_from_checkpoint(checkpoint, device="cpu")
    if not isinstance(agent.model, GHMModel):
        raise ConfigError(
            "checkpoint",
            str(config.checkpoint),
            f"was trained on --model {agent.config.model}, whose state has {agent.model.state_dim} variables; "
            "pglab validate checks the HJB equation of a one-state model",
        )
    path = Path(checkpoint["path"])
    try:
        run_dir = find_run_dir(path)
        cache = run_dir / "fd_reference.npz"
    except UsageError:  # a checkpoint outside a run directory: no cached reference
        run_dir, cache = path.parent, None
    solution = reference_solution(agent.config, agent.model, cache if cache is not None and cache.exists() else None)
    c_max = config.c_max if config.c_max is not None else float(agent.model.state_high[0])
    if c_max <= config.c_min:
        raise ConfigError("c_min", config.c_min, f"must be below c_max={c_max} (the run's initial_cash_high)")
    if c_max > float(solution.grid[-1]):
        raise ConfigError("c_max", c_max, f"must not exceed the FD reference's x_max={float(solution.grid[-1])}")
    validator = HJBResidualValidator(
        agent.model,
        reference=solution,
        c_min=config.c_min,
        c_max=c_max,
        n_points=config.n_points,
        tolerance=config.tolerance,
    )
    # float64 copies: the grid and V* are float64, and --method fd's small step needs the precision
    # (V'' by differences has rounding error eps / h^2: 1e-8 in float64, 1e+1 in float32 at h = 1.2e-4)
    policy = copy.deepcopy(agent.policy).double()
    value_net = None if agent.baseline is None else copy.deepcopy(agent.baseline).double()
    policy_fn = lambda states: policy.mean_std(states)[0]  # noqa: E731  (the deterministic action; clipped by the validator)
    with torch.enable_grad():
        learned = validator.validate(
            value_net,
            policy_fn,
            method=config.method,
            fd_step=config.fd_step,
            source=f"{checkpoint['kind']} iteration {agent.iteration}",
        )
    reference = validator.validate_solution(solution, source="FD reference")
    payload = _plain(
        {
            "checkpoint": str(path),
            "kind": checkpoint["kind"],
            "iteration": agent.iteration,
            "state": state_label(agent.model),  # the unit of c_min, c_max, argmax and the thresholds
            "value_network": agent.baseline is not None,
            "learned": learned.to_dict(),
            "fd_reference": reference.to_dict(),
        }
    )
    return payload, learned, reference, run_dir


def validate(argv: list[str]) -> int:
    """``pglab validate CHECKPOINT [FLAGS]``."""
    config = parse_flags(
        ValidateConfig,
        argv,
        prog="pglab validate",
        description="HJB residual, boundary value and distance to the FD optimum of a GHM checkpoint.",
    ).config
    check_output_path("output", config.output, folder=True)
    from pglab.run.atomic import atomic_write_json

    payload, learned, reference, run_dir = validate_checkpoint(config)
    out_dir = config.output if config.output is not None else run_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path = atomic_write_json(out_dir / "validation.json", payload)
        png_path = plot_validation(learned, reference, out_dir / "validation.png")
    except OSError as error:
        from pglab.errors import ConfigError

        raise ConfigError("output", str(out_dir), f"cannot be written: {error.strerror or error}") from error
    if config.json:
        print(json.dumps({**payload, "files": [str(json_path), str(png_path)]}, indent=2))
    else:
        print(
            format_report(
                learned,
                reference,
                title=f"{payload['checkpoint']} ({payload['kind']}, iteration {payload['iteration']})",
                state=payload["state"],
            )
        )
        print(f"wrote {json_path} and {png_path}", file=sys.stderr)
    return 0


def _plain(obj):
    """NumPy scalars to Python numbers (json cannot write float32/int64)."""
    import numpy as np

    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def format_report(learned, reference, *, title: str = "", state: str = "cash c") -> str:
    """The side-by-side table of ``pglab validate`` (``state``: what the states and
    thresholds are, e.g. ``liquidity = cash + 0.25`` for a credit-line run)."""

    def number(value, spec=".2e"):
        return "-" if value is None else format(value, spec)

    def stat(report, name, key):
        stats = getattr(report, name)
        return None if stats is None else getattr(stats, key)

    rows: list[tuple[str, str, str]] = []
    for name, label in (
        ("residual_optimal", "|rho V - max_u H|"),
        ("residual_policy", "|rho V - H(pi)|"),
        ("hamiltonian_gap", "gap max_u H - H(pi) at V*"),
    ):
        for key in ("max", "mean", "rms"):
            rows.append((f"{label} {key}", number(stat(learned, name, key)), number(stat(reference, name, key))))
    rows.append(
        (
            "|R_opt| max / (rho V*)",
            number(stat(learned, "residual_optimal", "max_relative")),
            number(stat(reference, "residual_optimal", "max_relative")),
        )
    )
    rows.append(
        (
            "  at c =",
            number(stat(learned, "residual_optimal", "argmax"), ".3f"),
            number(stat(reference, "residual_optimal", "argmax"), ".3f"),
        )
    )
    rows.append(
        (
            f"boundary layer (0, {learned.c_min:g}): |R_opt| max",
            number(stat(learned, "boundary_layer_residual", "max")),
            number(stat(reference, "boundary_layer_residual", "max")),
        )
    )
    rows.append(
        (
            f"V(0) (boundary value {learned.terminal_value:g})",
            number(learned.value_at_zero, ".4f"),
            number(reference.value_at_zero, ".4f"),
        )
    )
    error = learned.value_error or {}
    rows.append(("sup |V - V*|", number(error.get("sup_abs"), ".4f"), "0 (def.)"))
    rows.append(("mean |V - V*|", number(error.get("mean_abs"), ".4f"), ""))
    rows.append(("sup |V - V*| / V*", number(error.get("sup_rel"), ".2%"), ""))
    for name, errors in (learned.policy_error or {}).items():
        rows.append((f"mean |{name} - FD|", number(errors["mean_abs"], ".4f"), ""))
    policy_thresholds = learned.thresholds.get("policy") or {}
    for name, value in learned.thresholds["reference"].items():
        rows.append((f"threshold {name}", number(policy_thresholds.get(name), ".3f"), number(value, ".3f")))
    verdict = {None: "n/a (no value network)", True: "met", False: "NOT met"}[learned.meets_tolerance]
    width = max(len(row[0]) for row in rows)
    lines = [title] if title else []
    lines.append(
        f"HJB residual on the state c ({state}) in [{learned.c_min:g}, {learned.c_max:g}] "
        f"({learned.n_interior} points; "
        f"value derivatives: {learned.method})"
    )
    lines.append(f"{'':<{width}}  {'learned':>10}  {'FD reference':>12}")
    lines += [f"{label:<{width}}  {a:>10}  {b:>12}" for label, a, b in rows]
    lines.append(
        f"criterion max |rho V - max_u H| <= {learned.tolerance:g}: learned {verdict}; "
        f"FD reference {'met' if reference.meets_tolerance else 'NOT met'}"
    )
    if learned.residual_optimal is None:
        lines.append(
            "this checkpoint has no value network (--no-baseline): the residual needs one, so only the "
            "policy is compared (its Hamiltonian gap under V* bounds V* - V^pi <= sup gap / rho)"
        )
    return "\n".join(lines)


def plot_validation(learned, reference, output: str | os.PathLike) -> Path:
    """``validation.png``: |residual| vs c (log scale), V vs V*, controls vs the FD
    controls, |V - V*|. Written through a temporary file and ``os.replace``."""
    import matplotlib
    import numpy as np

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves, ref_curves = learned.curves, reference.curves
    states = curves["states"]
    inner = slice(1, None)  # the HJB holds on x > 0
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    tiny = 1e-12

    ax = axes[0, 0]
    for report_curves, key, style, label in (
        (curves, "residual_optimal", dict(color="tab:green"), "learned |rho V - max H|"),
        (curves, "residual_policy", dict(color="tab:blue", alpha=0.7), "learned |rho V - H(pi)|"),
        (curves, "hamiltonian_gap", dict(color="tab:orange", alpha=0.7), "policy gap at V*"),
        (ref_curves, "residual_optimal", dict(color="black", ls="--"), "FD reference |rho V* - max H|"),
    ):
        if key in report_curves:
            ax.semilogy(states[inner], np.abs(report_curves[key][inner]) + tiny, label=label, **style)
    ax.axvspan(0.0, learned.c_min, color="grey", alpha=0.15, label="boundary layer (not in the stats)")
    ax.axhline(learned.tolerance, color="red", ls=":", label=f"tolerance {learned.tolerance:g}")
    ax.set(xlabel="state", ylabel="|residual| (value per unit time)", title="HJB residual")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")

    ax = axes[0, 1]
    if "value" in curves:
        ax.plot(states, curves["value"], color="tab:green", label="learned V")
    else:
        ax.text(0.5, 0.5, "no value network", transform=ax.transAxes, ha="center")
    ax.plot(states, curves["value_reference"], color="black", ls="--", label="FD optimum V*")
    ax.set(xlabel="state", ylabel="value", title="Value function")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1, 0]
    colours = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    names = learned.model.get("control", [])
    for j in range(curves["controls_reference"].shape[1]):
        name = names[j] if j < len(names) else f"u{j}"
        if "controls" in curves:
            ax.plot(states, curves["controls"][:, j], color=colours[j % 4], label=f"{name} (learned)")
        ax.plot(
            states, curves["controls_reference"][:, j], color=colours[j % 4], ls="--", alpha=0.6, label=f"{name} (FD)"
        )
    ax.set(xlabel="state", ylabel="rate", title="Policy (deterministic action) vs FD optimum")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1, 1]
    if "value" in curves:
        ax.semilogy(states, np.abs(curves["value"] - curves["value_reference"]) + tiny, color="tab:green")
    ax.axvspan(0.0, learned.c_min, color="grey", alpha=0.15)
    ax.set(xlabel="state", ylabel="|V - V*|", title="Value error")
    ax.grid(alpha=0.3, which="both")
    fig.suptitle(f"HJB validation: {learned.source}")
    fig.tight_layout()

    from pglab.run.plots import save_figure

    return save_figure(fig, output, dpi=100)
