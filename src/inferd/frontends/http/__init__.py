"""The HTTP front end (KServe v2 REST with Triton extensions): raw ASGI app served by uvicorn."""

from inferd.frontends.http.app import HttpApp
from inferd.frontends.http.server import HttpServer, start_http_server

__all__ = ["HttpApp", "HttpServer", "start_http_server"]
