"""Trainer and evaluator configs as frozen dataclasses, importable without torch.

``pglab train X --help`` (and every other ``--help``) builds its flag list from these
modules alone, so it never imports torch. Each system has one module here; the algos/
and envs/ modules import their configs from it.
"""
