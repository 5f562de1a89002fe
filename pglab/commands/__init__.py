"""Command handlers behind ``pglab``: one module per system, each function taking the
remaining ``argv`` and returning an exit code."""
