"""Public helpers for testing with inferd: a real server process on ephemeral ports, a fake
clock and a scriptable model instance."""

from inferd.testing.fakes import FakeClock, FakeInstance
from inferd.testing.process import ServerProcess, running_server

__all__ = ["FakeClock", "FakeInstance", "ServerProcess", "running_server"]
