"""Gymnasium environments: the image tool environment, its parser and renderer, single-step envs."""
