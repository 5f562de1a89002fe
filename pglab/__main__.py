"""`python -m pglab`: the `pglab` command."""

from pglab.cli import console_main

console_main()
