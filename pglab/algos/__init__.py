"""Algorithms: the imperative shells that wire envs, estimators, losses and nets."""
