"""Policies: the policy interface, scripted policies, model backends and the baseline arms."""

from countgym.agents.base import Policy, Task
from countgym.agents.registry import load_policy

__all__ = ["Policy", "Task", "load_policy"]
