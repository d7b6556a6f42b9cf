"""The HTTP front end (KServe v2 REST with Triton extensions): a raw ASGI app on inferd's own
HTTP/1.1 connection protocol (httptools' parser, asyncio's server)."""

from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.server import HttpServer, start_http_server

__all__ = ["HttpApp", "HttpServer", "start_http_server"]
