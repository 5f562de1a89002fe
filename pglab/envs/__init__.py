"""Batched simulators written as tensor operations over ``[num_envs, ...]``, and an
adapter that gives Gymnasium vector environments the same interface."""
