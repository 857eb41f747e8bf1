"""What jobs cost, added up by day, by job-name prefix or by tag (as `shipyard costs --json`), and each
job's own figures for the costs page."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query

from shipyard.server.app import reader
from shipyard.store import Store

router = APIRouter(tags=["costs"])


@router.get("/costs")
def costs(store: Annotated[Store, Depends(reader)], by: Literal["day", "prefix", "tag"] = "day",
          since: Annotated[str | None, Query(description="7d, 12h, or a date such as 2026-11-01")] = None) -> dict:
    """Rows of (key, jobs, cost, on_demand, spot_savings, warm_pool_retained) and the total last."""
    from shipyard.control.costs import job_costs, totals
    from shipyard.planner.request import since as moment_since

    return {"by": by, "rows": totals(job_costs(store, moment_since("since", since) if since else None), by)}
