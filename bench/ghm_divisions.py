"""GHM divisions benchmark (see pglab/bench/ghm_divisions.py): ``python bench/ghm_divisions.py [--help]``."""

import sys

from pglab.bench.ghm_divisions import main

raise SystemExit(main(sys.argv[1:]))
