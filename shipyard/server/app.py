"""The application: the routers ROUTES names (each a module over one resource, registered by name as
launchers and rules are), the AWS API under /aws (aws/protocol.py: SigV4 instead of the token, AWS's
errors instead of ours), the dashboard's files, the API's documentation, and the security
every response gets (auth.py; a Content-Security-Policy that lets a page run only the server's own
scripts, so text from a job can never run as code even if it were put in a page unescaped)."""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from shipyard.errors import ConflictError, NotFoundError, ShipyardError, ValidationError
from shipyard.registry import Registry
from shipyard.server import auth
from shipyard.server.aws import protocol as aws_protocol
from shipyard.store import Store

# One module per resource, each a FastAPI router mounted under /api; a new resource is a module named here
# (or a package's entry point in the group shipyard.server_routes).
ROUTES = Registry("server_routes", "server route", {
    "jobs": "shipyard.server.jobs:router",
    "tuning": "shipyard.server.tuning:router",
    "pools": "shipyard.server.pools:router",
    "costs": "shipyard.server.costs:router",
})
STATIC = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATUS_OF = ((NotFoundError, 404), (ConflictError, 409), (ValidationError, 400), (ShipyardError, 400))


@dataclass(frozen=True)
class Settings:
    store: Store
    token: str
    loopback: bool    # bound to 127.0.0.1 (or ::1): reads need no token


def settings(request: Request) -> Settings:
    return request.app.state.settings


def reader(request: Request) -> Store:
    """A route that reads: the token too when the server is reachable from other machines."""
    current = settings(request)
    if not current.loopback:
        auth.check(request, current.token)
    return current.store


def writer(request: Request) -> Store:
    """A route that changes state: always the token."""
    current = settings(request)
    auth.check(request, current.token)
    return current.store


def create_app(store: Store, token: str, loopback: bool = True) -> FastAPI:
    app = FastAPI(title="shipyard", version="1", docs_url=None, redoc_url=None,
                  description="Jobs, tuning jobs, warm pools and costs from the store the CLI uses. "
                              f"Changes need `{auth.HEADER}: {auth.SCHEME} <token>`.")
    app.state.settings = Settings(store, token, loopback)

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if not auth.host_allowed(request.headers.get("host", ""), loopback):
            return JSONResponse({"detail": "this server answers requests to 127.0.0.1 or localhost only"}, 400)
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.exception_handler(ShipyardError)
    async def shipyard_error(request: Request, exc: ShipyardError):
        status = next(code for kind, code in STATUS_OF if isinstance(exc, kind))
        message = exc.args[0] if isinstance(exc, NotFoundError) and exc.args else str(exc)
        return JSONResponse({"detail": message, "error": type(exc).__name__}, status)

    for name in ROUTES:
        app.include_router(ROUTES.load(name), prefix="/api")
    app.include_router(aws_protocol.router)

    @app.get("/docs", include_in_schema=False)
    def docs():
        from shipyard.server.docs import page

        return Response(page(app.openapi()), media_type="text/html")

    files = {p.name: p.read_bytes() for p in STATIC.iterdir() if p.is_file()}
    # The page names its files with a digest of them all: a browser keeps them until the dashboard changes.
    version = hashlib.sha256(b"".join(files[name] for name in sorted(files))).hexdigest()[:12]
    page = files.pop("index.html").decode().replace("{{version}}", version)

    @app.get("/", include_in_schema=False)
    def index():
        return Response(page, media_type="text/html", headers={"Cache-Control": "no-cache"})

    @app.get("/static/{name}", include_in_schema=False)
    def static(name: str, v: str | None = None):
        # Only the files shipped in static/, by exact name: nothing else on disk is reachable.
        if name not in files:
            return JSONResponse({"detail": f"no static file {name!r}"}, 404)
        cache = "public, max-age=31536000, immutable" if v == version else "no-cache"
        return Response(files[name], media_type=mimetypes.guess_type(name)[0], headers={"Cache-Control": cache})

    return app
