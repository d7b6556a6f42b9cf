"""``inferd model``'s client of a server's model repository API: the index, and inferd's
rollback and unpin endpoints, through :class:`inferd.client.AdminClient` (which maps refusals to
:class:`~inferd.errors.AccessDeniedError` and other error answers to
:class:`~inferd.errors.RepositoryCallError` with the server's message).
"""

from __future__ import annotations

from inferd.client.admin import AdminClient
from inferd.client.endpoint import Endpoint
from inferd.client.headers import Headers
from inferd.client.tls import HttpsSettings
from inferd.errors import RepositoryCallError

__all__ = ["RepositoryCallError", "RepositoryClient"]


class RepositoryClient(AdminClient):
    """An :class:`AdminClient` built from ``-u URL`` and the connection flags."""

    def __init__(
        self,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: HttpsSettings | None = None,
    ) -> None:
        super().__init__(Endpoint.from_url(url, tls=tls, headers=headers, token=admin_token))
