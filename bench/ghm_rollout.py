"""GHM batched-rollout benchmark (see pglab/bench/ghm_rollout.py): ``python bench/ghm_rollout.py [--help]``."""

import sys

from pglab.bench.ghm_rollout import main

raise SystemExit(main(sys.argv[1:]))
