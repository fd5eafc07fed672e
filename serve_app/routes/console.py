"""`/console`: the operator console, static pages that call the public API from the browser.

The files ship in the package (`serve_app/console/`) and are served as they are, with a strict
Content-Security-Policy: scripts and styles from this server only, nothing inline, no frames,
and Trusted Types required, so that no page can turn a string into markup. They hold no data: the
browser signs in with an API key and every read and change is an API call that the key's role
allows or refuses. Without API keys configured (every call the default org's, as an admin) the
console answers only requests from this machine, as the API itself is bound to loopback then.
"""

import ipaddress
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse, Response

import serve_app
from serve_app import middleware

router = APIRouter(tags=["console"])

PREFIX = "/console"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml",
}
POLICY = "; ".join((
    "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
    "font-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'", "frame-ancestors 'none'",
    "require-trusted-types-for 'script'", "trusted-types 'none'",
))
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    # The pages change with the package: the browser asks again each time (answered 304 when unchanged).
    "Cache-Control": "no-cache",
}


def console_files() -> dict[str, Path]:
    """The console's files by their path under /console/, read in the replica that serves them."""
    root = Path(serve_app.__file__).parent / "console"
    return {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.suffix in CONTENT_TYPES}


def from_this_machine(request: Request) -> bool:
    """Whether the request, and every hop it says it passed through, came from a loopback address."""
    hops = [request.client.host if request.client else ""]
    hops += [h.strip() for h in request.headers.get("x-forwarded-for", "").split(",") if h.strip()]
    try:
        return all(ipaddress.ip_address(h).is_loopback for h in hops)
    except ValueError:
        return False


def refused(request: Request) -> JSONResponse | None:
    """403 for a request from elsewhere when no API keys are configured; None when it may be served."""
    # Through the module: this one reaches a replica by value, and would carry a copy of the state.
    if middleware.STATE.keys is not None or from_this_machine(request):
        return None
    return JSONResponse({"error": {"code": "forbidden", "message": (
        "this server has no API keys configured: its console answers only on this machine "
        "(configure AGENT_MEMORY_API_KEYS_FILE to open it to others)")}}, status_code=403, headers=HEADERS)


@router.get(PREFIX, include_in_schema=False)
async def console_root() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/", status_code=308)


@router.get(PREFIX + "/{name:path}", include_in_schema=False)
async def console_file(name: str, request: Request) -> Response:
    """A file of the console (`/console/` is its page: the part of the address after `#` says which)."""
    denied = refused(request)
    if denied is not None:
        return denied
    files = console_files()
    path = files.get(name or "index.html")
    if path is None:
        return JSONResponse({"error": {"code": "not_found", "message": f"no console file {name}"}},
                            status_code=404, headers=HEADERS)
    return FileResponse(path, media_type=CONTENT_TYPES[path.suffix], headers=HEADERS)
