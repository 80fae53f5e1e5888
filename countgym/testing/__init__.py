"""Test and demo infrastructure, not part of running or analysing: a fake OpenAI-compatible
model server (``countgym.testing.server``, ``countgym testserver``) that answers like a model,
so the litellm path, the arms and the audit can be exercised offline."""

from countgym.testing.server import TestServer

__all__ = ["TestServer"]
