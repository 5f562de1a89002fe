"""Policy/value plots of GHM-type 1-D models (a 2x2 grid).

The numbers plotted come in a :class:`PolicyPlotData` (computed by
:func:`pglab.algos.ghm_train.policy_plot_data`), so that tests can check what a figure
shows without reading pixels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class PolicyPlotData:
    """What the policy/value figure shows, on a grid of ``N`` states.

    Attributes:
        states: ``[N]`` states (cash for GHM; the model's state, e.g. liquidity, otherwise).
        rates: ``[N, A]`` the deterministic policy's *applied* controls: its Gaussian mean
            clipped to the control box ``[low, high]`` (what the simulator pays out).
        pre_clip_means: ``[N, A]`` the Gaussian mean before that clip (it may lie below 0:
            the mean shift puts it there where the policy should not act).
        std: ``[N, A]`` the policy's standard deviation.
        values: ``[N]`` the learned value, or ``None`` without a value network.
        payout: ``[N]`` net payout rate of the applied controls, ``a_L - (1 + lambda) a_E``;
            within ``[-(1 + lambda) a_E_max, a_L_max]``.
        control_names: names of the ``A`` controls.
        state_label: the x axis's label (what the state is).
    """

    states: np.ndarray
    rates: np.ndarray
    pre_clip_means: np.ndarray
    std: np.ndarray
    values: np.ndarray | None
    payout: np.ndarray
    control_names: tuple[str, ...]
    state_label: str = "cash c"


COLOURS = ("tab:blue", "tab:red", "tab:green", "tab:purple")  # one per control


def plot_policy_value(
    *,
    data: PolicyPlotData,
    iteration: int,
    output: str | os.PathLike,
    reference_states: np.ndarray | None = None,
    reference_values: np.ndarray | None = None,
    reference_controls: np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Write the 2x2 grid: applied rates (with the FD-optimal controls and, dotted, the
    pre-clip Gaussian mean), net payout of the applied rates, value against the FD
    optimum, and the policy's standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pglab.run.plots import save_figure

    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    _plot_rates(axes[0, 0], data, iteration, reference_states, reference_controls)
    _plot_payout(axes[0, 1], data)
    _plot_value(axes[1, 0], data, reference_states, reference_values)
    _plot_std(axes[1, 1], data)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, output, dpi=100)


def _plot_rates(
    ax: Any,
    data: PolicyPlotData,
    iteration: int,
    reference_states: np.ndarray | None,
    reference_controls: np.ndarray | None,
) -> None:
    """The applied rates, their pre-clip Gaussian means (dotted) and the FD optimum (dashed)."""
    for j, name in enumerate(data.control_names):
        colour = COLOURS[j % len(COLOURS)]
        ax.plot(data.states, data.rates[:, j], color=colour, label=f"{name} (learned, applied)")
        ax.plot(
            data.states,
            data.pre_clip_means[:, j],
            color=colour,
            ls=":",
            alpha=0.5,
            label=f"{name} pre-clip Gaussian mean (< 0: none applied)",
        )
        if reference_controls is not None:
            ax.plot(
                reference_states,
                reference_controls[:, j],
                color=colour,
                ls="--",
                alpha=0.6,
                label=f"{name} (FD optimum)",
            )
    ax.set(
        xlabel=data.state_label,
        ylabel="rate (applied = mean clipped to [0, max])",
        title=f"Deterministic policy (iter {iteration})",
    )
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def _plot_payout(ax: Any, data: PolicyPlotData) -> None:
    """The net payout rate of the applied rates."""
    ax.plot(data.states, data.payout, color="tab:purple")
    ax.axhline(0.0, color="black", ls="--", alpha=0.3)
    ax.set(
        xlabel=data.state_label,
        ylabel="a_L - (1 + lambda) a_E (applied rates)",
        title="Net payout rate to shareholders (deterministic policy)",
    )
    ax.grid(alpha=0.3)


def _plot_value(
    ax: Any, data: PolicyPlotData, reference_states: np.ndarray | None, reference_values: np.ndarray | None
) -> None:
    """The learned value against the FD optimum (or a note that there is no value network)."""
    if data.values is not None:
        ax.plot(data.states, data.values, color="tab:green", label="learned V(c)")
    if reference_values is not None:
        ax.plot(reference_states, reference_values, color="black", ls="--", label="FD optimum V*(c)")
    ax.set(xlabel=data.state_label, ylabel="value", title="Value function")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no value network", transform=ax.transAxes, ha="center")
    ax.grid(alpha=0.3)


def _plot_std(ax: Any, data: PolicyPlotData) -> None:
    """The policy's standard deviation per control."""
    for j, name in enumerate(data.control_names):
        ax.plot(data.states, data.std[:, j], color=COLOURS[j % len(COLOURS)], ls="--", label=f"{name} std")
    ax.set(xlabel=data.state_label, ylabel="std", title="Exploration level")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
