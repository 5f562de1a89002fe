"""Speed of the streaming A2C trainer: env-only, model-only and full training steps/s."""

import sys

from pglab.bench.a2c_stream import main

raise SystemExit(main(sys.argv[1:]))
