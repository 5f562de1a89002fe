"""Support for ``make mutants`` (docs/mutation-testing.md): the selection of mutated
functions, a pytest plugin, and the score.

``SELECTION`` is the one list of what ``make mutants`` mutation-tests: all of
``pglab/estimators/`` and ``pglab/losses/``, and the update functions of ``pglab/algos/``
(the code that turns a batch into a parameter change), named as mutmut 3 names mutants:
``module.x_function__mutmut_N`` for a function and ``module.xǁClassǁmethod__mutmut_N`` for
a method. mutmut mutates the whole files listed in pyproject.toml's ``only_mutate``; the
Makefile passes these patterns to ``mutmut run`` so that only the selected functions' mutants
are run, and :func:`score` counts only those.

    python mutants_support.py --patterns   # the patterns, one a line (the Makefile's input)
    python mutants_support.py              # killed / total per group, after a run

As a pytest plugin (mutmut runs the tests with ``-p mutants_support``):

mutmut forks every mutant's test run from a process that has already run the tests, so
the ``functools.lru_cache`` tables of pglab.estimators.maxk (binomial coefficients,
position bits) arrive filled with values computed by the unmutated code, and a mutant in
the functions that fill them would never run. Clearing them when the pytest run starts gives each
mutant the empty caches a fresh ``pytest`` process has.
"""

import fnmatch
import glob
import json
import sys

M = "__mutmut_*"  # every mutant of the function named before it
SEP = "ǁ"  # mutmut's separator between class and method in a mutant's name


def _methods(module: str, cls: str, *names: str) -> list[str]:
    return [f"{module}.x{SEP}{cls}{SEP}{name}{M}" for name in names]


def _functions(module: str, *names: str) -> list[str]:
    return [f"{module}.x_{name}{M}" for name in names]


# group -> mutant-name patterns (fnmatch). Decorated functions are never mutated by mutmut 3
# (ObGD.step carries @torch.no_grad()): docs/mutation-testing.md lists the hand-made breaks
# that stand in for them.
SELECTION: dict[str, list[str]] = {
    "estimators/": ["pglab.estimators.*"],
    "losses/": ["pglab.losses.*"],
    "algos/onpolicy (REINFORCE, VPG+GAE, PPO)": _functions(
        "pglab.algos.onpolicy",
        "gradient_step",
        "clip_and_step",
        "onpolicy_update",
        "_single_step",
        "_ppo_epochs",
        "_ppo_autograd",
        "_ppo_closed_form",
        "minibatch_indices",
        "explained_variance",
    ),
    "algos/a2c (A2C TD(0))": _methods("pglab.algos.a2c", "A2CTrainer", "env_step", "optimizer_step", "window")
    + _functions("pglab.algos.a2c_common", "sample_actions"),
    "algos/stream_ac (stream-AC(lambda))": _methods("pglab.algos.stream_ac", "RewardScaler", "__call__"),
    "algos/tabular (Q-learning, WoLF-PHC, RARL)": _methods(
        "pglab.algos.tabular.agents", "QTableAgent", "update", "_greedy", "policy"
    )
    + _methods("pglab.algos.tabular.agents", "WoLFPHCAgent", "update", "policy", "average_policy")
    + _methods("pglab.algos.tabular.loops", "RADversarialTrainer", "phase"),
    "algos/maxk_pomo (MaxKPOMO)": _methods("pglab.algos.maxk_pomo", "MaxKPOMO", "calculate_loss"),
    "algos/pso_tsp (Deep-PSO)": _functions("pglab.algos.pso_tsp", "shaped_reward", "advantages_and_returns"),
    "algos/GHM (MC-PG, pathwise, actor-critic)": _methods(
        "pglab.algos.mc_pg",
        "MonteCarloPolicyGradient",
        "train_step",
        "collect",
        "bootstrap_value",
        "score_pairs",
        "estimate_advantages",
        "_trajectory_advantages",
        "_reward_to_go_advantages",
        "update_policy",
        "update_baseline",
        "diagnostics",
    )
    + _functions("pglab.algos.pathwise", "soft_clip")
    + _methods(
        "pglab.algos.pathwise", "PathwisePolicyGradient", "rollout", "critic_targets", "critic_loss", "train_step"
    )
    + _functions("pglab.algos.actor_critic", "policy_hjb_residual")
    + _methods("pglab.algos.actor_critic", "ActorCritic", "critic_targets", "critic_loss"),
}


def patterns() -> list[str]:
    return [pattern for group in SELECTION.values() for pattern in group]


# Tests that fail under mutmut's trampolines whatever the mutant, deselected in its runs only:
# the trampoline adds a call frame between MaxKPOMO.__init__ and save_hyperparameters, which
# reads the __init__ arguments from its caller's frame (Lightning), so hparams come out empty
# and a model cannot be rebuilt from them. MaxKPOMO.calculate_loss keeps its own tests.
FAIL_UNDER_TRAMPOLINES = (
    "tests/test_maxk_pomo.py::test_real_tsp_training_step_changes_parameters_and_saves_hyperparameters",
    "tests/test_maxk_pomo.py::test_hyperparameters_describe_the_environment_so_the_model_rebuilds_without_env",
    "tests/test_maxk_pomo.py::test_rl4co_lightning_trainer_fits_maxk_pomo_and_logs_rho_hat",
)


def pytest_collection_modifyitems(config, items):
    deselected = [item for item in items if item.nodeid in FAIL_UNDER_TRAMPOLINES]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid not in FAIL_UNDER_TRAMPOLINES]


def pytest_sessionstart(session):
    from pglab.estimators import maxk

    for cached in (maxk._coefficients, maxk._sorted_coefficients, maxk._position_bits):
        cached.cache_clear()


# mutmut's exit codes of a mutant's test run (mutmut/stats.py); a timeout counts as killed.
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not checked",
}


def score(root: str = "mutants") -> int:
    """Print killed / total per group of ``SELECTION`` (and per function within the
    algos groups) from mutmut's ``mutants/**/*.py.meta``; mutants outside the selection
    (the other functions of the algos files) are not counted."""
    codes: dict[str, int | None] = {}
    for meta in sorted(glob.glob(f"{root}/pglab/**/*.py.meta", recursive=True)):
        with open(meta) as f:
            codes.update(json.load(f)["exit_code_by_key"])
    grand_killed = grand_total = 0
    survivors: list[str] = []

    def line(label: str, names: list[str], indent: str = "") -> int:
        counts: dict[str, int] = {}
        for name in names:
            status = STATUS.get(codes[name], f"exit {codes[name]}")
            counts[status] = counts.get(status, 0) + 1
        killed = counts.get("killed", 0) + counts.get("timeout", 0)
        detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        share = 100 * killed / max(len(names), 1)
        print(f"{indent}{label:{60 - len(indent)}s} {killed:4d} / {len(names):4d} = {share:5.1f}%  ({detail})")
        return killed

    for group, group_patterns in SELECTION.items():
        names = sorted(n for n in codes if any(fnmatch.fnmatch(n, p) for p in group_patterns))
        grand_killed += line(group, names)
        grand_total += len(names)
        survivors += [n for n in names if codes[n] not in (1, 3, 36, 24, -24, 152, 255)]
        if group.startswith("algos/"):
            for pattern in group_patterns:
                function = sorted(n for n in names if fnmatch.fnmatch(n, pattern))
                line(pattern[: -len(M)].replace("pglab.algos.", ""), function, indent="    ")
    if grand_total:
        print(f"{'all':60s} {grand_killed:4d} / {grand_total:4d} = {100 * grand_killed / grand_total:5.1f}%")
    print(f"{len(survivors)} not killed (`.venv/bin/mutmut show NAME` shows one):")
    for name in survivors:
        print("   ", name, STATUS.get(codes[name], codes[name]))
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--patterns"]:
        print("\n".join(patterns()))
        raise SystemExit(0)
    raise SystemExit(score())
