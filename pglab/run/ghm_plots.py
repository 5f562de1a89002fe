"""Policy/value plots of GHM-type 1-D models (the design note's 2x2 grid)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def plot_policy_value(
    *,
    states: np.ndarray,
    mean_actions: np.ndarray,
    std_actions: np.ndarray,
    values: np.ndarray | None,
    control_names: tuple[str, ...],
    iteration: int,
    output: str | os.PathLike,
    payout: np.ndarray | None = None,
    reference_states: np.ndarray | None = None,
    reference_values: np.ndarray | None = None,
    reference_controls: np.ndarray | None = None,
    title: str = "",
) -> Path:
    """Write the 2x2 grid: policy means (with the FD-optimal controls), net payout,
    value against the FD optimum, and the policy's standard deviation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = ["tab:blue", "tab:red", "tab:green", "tab:purple"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 9))
    ax = axes[0, 0]
    for j, name in enumerate(control_names):
        ax.plot(states, mean_actions[:, j], color=colours[j % 4], label=f"{name} (learned mean)")
        if reference_controls is not None:
            ax.plot(reference_states, reference_controls[:, j], color=colours[j % 4], ls="--", alpha=0.6, label=f"{name} (FD optimum)")
    ax.set(xlabel="cash c", ylabel="rate", title=f"Policy mean actions (iter {iteration})")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[0, 1]
    if payout is not None:
        ax.plot(states, payout, color="tab:purple")
    ax.axhline(0.0, color="black", ls="--", alpha=0.3)
    ax.set(xlabel="cash c", ylabel="a_L - (1 + lambda) a_E", title="Expected net payout to shareholders")
    ax.grid(alpha=0.3)

    ax = axes[1, 0]
    if values is not None:
        ax.plot(states, values, color="tab:green", label="learned V(c)")
    if reference_values is not None:
        ax.plot(reference_states, reference_values, color="black", ls="--", label="FD optimum V*(c)")
    ax.set(xlabel="cash c", ylabel="value", title="Value function")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

    ax = axes[1, 1]
    for j, name in enumerate(control_names):
        ax.plot(states, std_actions[:, j], color=colours[j % 4], ls="--", label=f"{name} std")
    ax.set(xlabel="cash c", ylabel="std", title="Exploration level")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, target)
    return target
