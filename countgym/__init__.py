"""countgym: Gymnasium environments, baseline agents and audits for VLM counting.

Importing the package registers the environments (``countgym/DotArrays-v0`` and friends) with
Gymnasium; nothing heavy is imported until an environment is made.
"""

__version__ = "0.1.0"

from countgym.registration import register_envs as _register_envs

_register_envs()

_PUBLIC = ["__version__"]
# verifiers loads plugins by importing the module named after their id, so `countgym` is one:
# 0.3's `vf.load_environment("countgym", ...)` calls `load_environment`; 0.4's `vf-eval countgym`
# takes the Taskset, Env and Harness classes that `__all__` names (extra `verifiers`). Resolved
# on first use: importing `countgym` alone imports no verifiers.
_VF_PLUGINS = ("CountgymTaskset", "CountgymEnv", "CountgymHarness")


def __getattr__(name: str) -> object:
    if name == "__all__":
        from countgym.integrations import vf_version

        return _PUBLIC + list(_VF_PLUGINS) if vf_version.uses_v1() else list(_PUBLIC)
    if name == "load_environment" or name in _VF_PLUGINS:
        from countgym.integrations import verifiers

        return getattr(verifiers, name)
    raise AttributeError(f"module 'countgym' has no attribute {name!r}")
