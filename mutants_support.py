"""Support for ``make mutants`` (docs/mutation-testing.md).

As a pytest plugin (mutmut runs the tests with ``-p mutants_support``):

mutmut forks every mutant's test run from a process that has already run the tests, so
the ``functools.lru_cache`` tables of pglab.estimators.maxk (binomial coefficients,
position bits) arrive filled with values computed by the unmutated code, and a mutant in
the functions that fill them would never run. Clearing them at session start gives each
mutant the empty caches a fresh ``pytest`` process has.
"""


def pytest_sessionstart(session):
    from pglab.estimators import maxk

    for cached in (maxk._coefficients, maxk._sorted_coefficients, maxk._position_bits):
        cached.cache_clear()


def score(root: str = "mutants") -> int:
    """Print killed / total per mutated file from mutmut's ``mutants/**/*.py.meta``."""
    import glob
    import json

    status = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout",
              24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}
    grand_killed = grand_total = 0
    for meta in sorted(glob.glob(f"{root}/pglab/**/*.py.meta", recursive=True)):
        with open(meta) as f:
            codes = json.load(f)["exit_code_by_key"]
        if not codes:
            continue
        counts: dict[str, int] = {}
        for code in codes.values():
            name = status.get(code, f"exit {code}")
            counts[name] = counts.get(name, 0) + 1
        killed = counts.get("killed", 0) + counts.get("timeout", 0)
        grand_killed += killed
        grand_total += len(codes)
        detail = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        print(f"{meta[len(root) + 1:-5]:34s} {killed:4d} / {len(codes):4d} = {100 * killed / len(codes):5.1f}%  ({detail})")
    if grand_total:
        print(f"{'all':34s} {grand_killed:4d} / {grand_total:4d} = {100 * grand_killed / grand_total:5.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(score())
