"""countgym: Gymnasium environments, baseline agents and audits for VLM counting.

Importing the package registers the environments (``countgym/DotArrays-v0`` and friends) with
Gymnasium; nothing heavy is imported until an environment is made.
"""

__version__ = "0.1.0"

from countgym.registration import register_envs as _register_envs

_register_envs()

__all__ = ["__version__"]


def __getattr__(name: str) -> object:
    # verifiers loads an environment by importing the module named after its id:
    # `vf.load_environment("countgym", ...)` and `vf-eval countgym` find this (extra `verifiers`).
    if name == "load_environment":
        from countgym.integrations.verifiers import load_environment

        return load_environment
    raise AttributeError(f"module 'countgym' has no attribute {name!r}")
