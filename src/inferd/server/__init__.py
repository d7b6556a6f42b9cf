"""Composition root: the typed configuration and the server that wires every component."""

from inferd.server.config import ServerConfig
from inferd.server.server import Server, StartupError

__all__ = ["Server", "ServerConfig", "StartupError"]
