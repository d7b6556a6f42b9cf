"""The web console served on the HTTP port under ``/console`` (:mod:`.app`): the server's state,
every model, one model's live figures, a request form and, with the admin token, actions."""

from inferd.frontends.console.app import ConsoleApp, ConsoleInfo

__all__ = ["ConsoleApp", "ConsoleInfo"]
