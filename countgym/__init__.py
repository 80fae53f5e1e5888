"""countgym: Gymnasium environments, baseline agents and audits for VLM counting.

Importing the package registers the environments (``countgym/DotArrays-v0`` and friends) with
Gymnasium; nothing heavy is imported until an environment is made.
"""

__version__ = "0.1.0"

from countgym.registration import register_envs as _register_envs

_register_envs()

__all__ = ["__version__"]
