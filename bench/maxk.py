"""Max@K estimator benchmark (see pglab/bench/maxk.py)."""

import sys

from pglab.bench.maxk import main

raise SystemExit(main(sys.argv[1:]))
