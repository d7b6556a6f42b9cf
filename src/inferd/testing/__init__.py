"""Public helpers for testing against inferd: a real server process on ephemeral ports."""

from inferd.testing.process import ServerProcess, running_server

__all__ = ["ServerProcess", "running_server"]
