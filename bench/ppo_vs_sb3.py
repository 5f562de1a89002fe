"""pglab PPO vs Stable-Baselines3 PPO (see pglab/bench/ppo_vs_sb3.py)."""

import sys

from pglab.bench.ppo_vs_sb3 import main

raise SystemExit(main(sys.argv[1:]))
