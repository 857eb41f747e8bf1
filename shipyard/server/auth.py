"""Who may do what: the token (a header, never a query string) for anything that changes state, and for
reads too when the server is reachable beyond this machine; on loopback, a request must name this
machine as its Host, so a web page elsewhere cannot reach the API through a rebound DNS name."""

from __future__ import annotations

import hmac
import ipaddress
import secrets

from fastapi import HTTPException, Request

HEADER = "Authorization"   # "Bearer <token>"
SCHEME = "Bearer"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def presented(request: Request) -> str | None:
    scheme, _, value = request.headers.get(HEADER, "").partition(" ")
    return value.strip() if scheme == SCHEME and value.strip() else None


def check(request: Request, token: str) -> None:
    given = presented(request)
    if given is None:
        raise HTTPException(401, f"this needs the server's token: send the header `{HEADER}: {SCHEME} <token>` "
                                 "(the token is printed when the server starts and kept in $SHIPYARD_HOME/server.json)",
                            headers={"WWW-Authenticate": SCHEME})
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(403, "wrong token: use the one the running server printed (in $SHIPYARD_HOME/server.json)")


def host_allowed(host_header: str, loopback: bool) -> bool:
    """On loopback only requests addressed to this machine by name or address (DNS rebinding)."""
    if not loopback:
        return True
    if host_header.startswith("["):   # [::1]:8765
        host = host_header[1:host_header.find("]")]
    else:
        host = host_header.split(":", 1)[0]
    return is_loopback(host)
