"""GHM models with several states against V* (see pglab/bench/ghm_multi.py): ``python bench/ghm_multi.py [--help]``."""

import sys

from pglab.bench.ghm_multi import main

raise SystemExit(main(sys.argv[1:]))
