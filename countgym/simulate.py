"""``--simulate``: run cells against a simulated model, through the real path.

``simulation(profile)`` starts a ``SimulatedServer`` (``countgym.testing.simulated``) on
127.0.0.1 and stops it afterwards. ``Simulation.prepare(cell)`` loads the cell's dataset,
registers it with the server and builds the cell's policy factory: the arm's own policy over the
ordinary litellm backend (direct OpenAI-compatible transport), pointed at the server, with prices
of 0. So the arm's prompts go over HTTP and the replies come back through the same parsing,
retries, logging and cost code as a real model's. The model id of the cell is kept (logs,
tables and reports show the config's names; ``REPLACE:`` placeholders are valid here); every
episode's log records ``simulated = {"profile": ..., "source": ...}``.

Scripted policies and plug-ins call no model: they run as they always do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from countgym.cells import CellSpec
from countgym.errors import UserError
from countgym.simulate_context import register_endpoint, unregister_endpoint
from countgym.stimulus import Dataset
from countgym.testing.profiles import BUILTIN, ProfileSet, load_profiles
from countgym.testing.simulated import DATASET_HEADER, SimulatedServer

SIMULATED_ENDPOINT = "simulated"
"""The ``api_base`` a simulated cell's log records for its model (the server is gone after the run)."""

# Backend options a simulated cell sets itself (a config's endpoint, key or prices do not apply).
_REPLACED = frozenset({"api_base", "api_key", "transport", "input_cost_per_token", "output_cost_per_token",
                       "extra_params"})


@dataclass
class Simulation:
    """A running simulated server and the profiles its models follow."""

    server: SimulatedServer
    profiles: ProfileSet

    def prepare(self, cell: CellSpec, *, concurrency: int = 1) -> tuple[Callable[[], Any], Dataset]:
        """(policy factory, dataset) of a cell, for ``run_cell(..., policy_factory=, dataset=)``."""
        from countgym.agents.registry import check_agent_task, family_of, policy_factory
        from countgym.tasks import load_dataset, task_of_env

        env_id = cell.env_id()
        check_agent_task(cell.agent, task_of_env(env_id), env_id)
        ds = load_dataset(env_id, cell.dataset)
        fam = family_of(cell.agent)
        if fam is None:
            return policy_factory(cell.agent, cell.model, cell.agent_options, concurrency=concurrency), ds
        if not cell.model:
            raise UserError(f"arm {cell.agent!r} calls a model: pass --model (any name works with --simulate)")
        token = self.server.add_dataset(ds)
        opts = {k: v for k, v in cell.agent_options.items() if k not in _REPLACED}
        opts.update(
            api_base=self.server.base_url, transport="direct", input_cost_per_token=0.0,
            output_cost_per_token=0.0, extra_params={"extra_headers": {DATASET_HEADER: token}},
        )
        try:
            backend = fam.backend(cell.agent, f"openai/{cell.model}", **opts)
        except TypeError as e:
            raise UserError(f"invalid backend option for {cell.model!r}: {e}") from None
        params = dict(backend.provider_params()) if hasattr(backend, "provider_params") else {}
        params.pop("extra_params", None)
        provider = {**params, "model": cell.model, "api_base": SIMULATED_ENDPOINT}

        def factory() -> Any:
            return fam.policy(cell.agent, backend)

        factory.provider = provider  # type: ignore[attr-defined]
        factory.simulated = self.profiles.provenance(cell.model)  # type: ignore[attr-defined]
        return factory, ds


def profiles_from(path: str | Path | None) -> ProfileSet:
    """The profiles of ``--simulate [PROFILE]``: the file's, or the built-in ones (None or "")."""
    return load_profiles(path) if path else BUILTIN


@contextmanager
def simulation(profile: str | Path | ProfileSet | None = None, *, seed: int = 0) -> Iterator[Simulation]:
    """Start a simulated server for the duration of the block."""
    profiles = profile if isinstance(profile, ProfileSet) else profiles_from(profile)
    server = SimulatedServer(profiles, seed=seed)
    server.start()
    register_endpoint(server.base_url)
    try:
        yield Simulation(server=server, profiles=profiles)
    finally:
        unregister_endpoint(server.base_url)
        server.stop()


def run_cell_simulated(spec: CellSpec, out_dir: str | Path, sim: Simulation, **kwargs: Any) -> Any:
    """``run_cell`` of one cell against the simulated model (same keyword arguments)."""
    from countgym.runner import run_cell

    factory, ds = sim.prepare(spec, concurrency=kwargs.get("concurrency", 1))
    return run_cell(spec, out_dir, policy_factory=factory, dataset=ds, **kwargs)


class SimulatedJudges:
    """The CounterCount judge for replies a simulated model wrote (their log's endpoint is
    ``SIMULATED_ENDPOINT``): the same simulated model, on a simulated server started on first use
    and stopped by ``close``, through the ordinary backend (HTTP, retries, parsing), so the
    judge path runs on a rehearsal. ``judge_backend`` wraps the audit's other builder (None:
    only simulated logs get a judge)."""

    def __init__(self, profiles: ProfileSet | None = None) -> None:
        self._profiles = profiles or BUILTIN
        self._block: Any = None
        self._sim: Simulation | None = None

    def build(self, model: str) -> Any:
        """A judge backend for the simulated ``model``."""
        from countgym.agents.cf_arm import make_cf_backend

        if self._sim is None:
            self._block = simulation(self._profiles)
            self._sim = self._block.__enter__()
        return make_cf_backend(
            "cf-mcq", f"openai/{model}", api_base=self._sim.server.base_url, transport="direct",
            input_cost_per_token=0.0, output_cost_per_token=0.0, max_attempts=2, max_total_wait_s=10.0,
        )

    def judge_backend(self, other: Callable[[str, str | None], Any] | None) -> Callable[[str, str | None], Any]:
        """``judge_backend(model, api_base)``: the simulated judge for simulated logs, ``other``
        for the rest."""

        def build(model: str, api_base: str | None) -> Any:
            if api_base == SIMULATED_ENDPOINT:
                return self.build(model)
            if other is None:
                raise UserError("no backend builds the run's own model")
            return other(model, api_base)

        return build

    def close(self) -> None:
        """Stop the simulated server, if one was started."""
        if self._block is not None:
            self._block.__exit__(None, None, None)
            self._block = self._sim = None

    def __enter__(self) -> SimulatedJudges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
