"""The web page, ``/ui``: its files ship in the package (``ctxmgmt/api/ui/``), need no CDN
and no network but this server, and read everything through the REST API with the
session's API key. The page itself needs no key: it holds no data."""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .errors import HTTPProblem

__all__ = ["asset", "home", "page"]

_FILES = {
    "": ("index.html", "text/html; charset=utf-8"),
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
}
"""The page's files: nothing else is served, whatever the path asks for."""
_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


@cache
def _read(name: str) -> bytes:
    return (resources.files("ctxmgmt.api") / "ui" / name).read_bytes()


async def page(request: Request) -> Response:
    name, media_type = _FILES[""]
    return Response(_read(name), media_type=media_type, headers=_HEADERS)


async def home(request: Request) -> Response:
    """The server's root (and ``/ui/``): to the page, where a browser opened at the address
    the server printed, or a path one typed, finds it (a JSON 404 was all it got)."""
    return RedirectResponse("/ui", 302)


async def asset(request: Request) -> Response:
    found = _FILES.get(request.path_params["file"])
    if found is None or not request.path_params["file"]:
        raise HTTPProblem(404, "no such file of the page", "resource_not_found_exception")
    name, media_type = found
    return Response(_read(name), media_type=media_type, headers=_HEADERS)
