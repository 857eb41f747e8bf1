"""Warm pools: the list (as `shipyard pools list --json`) and release."""

from __future__ import annotations

import dataclasses
import time
from typing import Annotated

from fastapi import APIRouter, Depends

from shipyard.server.app import reader, writer
from shipyard.store import Store

router = APIRouter(tags=["pools"])


@router.get("/pools")
def list_pools(store: Annotated[Store, Depends(reader)], everything: bool = True) -> list[dict]:
    """Each pool with every field, and `expires_in` (seconds) while it is Available."""
    from shipyard.control.pools import reconcile_pools
    from shipyard.store.pools import PoolStore

    reconcile_pools(store)
    now = time.time()
    return [{**dataclasses.asdict(pool), "expires_in": max(0.0, pool.expires_at - now) if pool.expires_at else None}
            for pool in PoolStore(store).list(include_terminated=everything)]


@router.post("/pools/{name}/release")
def release_pool(store: Annotated[Store, Depends(writer)], name: str) -> dict:
    """End an Available pool now, as `shipyard pools release`."""
    from shipyard.store.pools import PoolStore

    return dataclasses.asdict(PoolStore(store).release(name))
