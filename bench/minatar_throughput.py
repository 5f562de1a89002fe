"""Steps per second of the batched MinAtar games, the minatar package and gymnax (where installed):
``python bench/minatar_throughput.py [--help]``."""

import sys

from pglab.bench.minatar_throughput import main

raise SystemExit(main(sys.argv[1:]))
