"""Pure loss functions. Each returns a dict of named tensors: ``"loss"`` (what to
backpropagate) plus ``"loss/*"`` components and ``"stats/*"`` diagnostics, so trainers
log them without knowing their names."""
