"""GHM parallel-rollout benchmark (see pglab/bench/ghm_parallel.py): ``python bench/ghm_parallel.py [--help]``."""

import sys

from pglab.bench.ghm_parallel import main

# The guard matters here: the worker processes re-import this file as their main module.
if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
