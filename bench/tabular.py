"""Tabular learner speed and WoLF-PHC convergence: ``python bench/tabular.py [--help]``."""

import sys

from pglab.bench.tabular import main

raise SystemExit(main(sys.argv[1:]))
