"""Deciding that a job hangs, from its processes' heartbeats (runtime/heartbeat.py): no rank has moved
for the timeout. The ranks to blame are those not waiting for the others (not inside a collective) and
those whose heartbeat stopped; the ranks waiting in a collective are the victims."""

from __future__ import annotations


def _rank(beat: dict) -> str:
    return f"rank {beat['rank']} on {beat['host']}"


def find_hang(beats: list[dict], now: float, timeout: float) -> str | None:
    """The failure reason when the job hangs, else None."""
    if not beats or timeout <= 0:
        return None
    if now - max(b["progress_time"] for b in beats) < timeout:
        return None
    stale = [b for b in beats if now - b["time"] > timeout]
    blamed = stale + [b for b in beats if b not in stale and not b["collective"]]
    waiting = [b for b in beats if b not in blamed]
    steps = max(b.get("steps", 0) for b in beats)
    parts = [f"no rank made progress for {timeout:g} s (last optimizer step {steps})"]
    for beat in sorted(blamed, key=lambda b: b["rank"]):
        if beat in stale:
            parts.append(f"{_rank(beat)} stopped sending heartbeats {now - beat['time']:.0f} s ago"
                         + (f", last at {beat['where']}" if beat["where"] else ""))
        else:
            parts.append(f"{_rank(beat)} is not waiting for the others: it is at {beat['where'] or 'an unknown place'}")
    if waiting:
        ranks = ", ".join(str(b["rank"]) for b in sorted(waiting, key=lambda b: b["rank"]))
        parts.append(f"ranks {ranks} wait in a collective" if len(waiting) > 1 else f"rank {ranks} waits in a collective")
    if not blamed:
        parts.append("every rank waits in a collective: a rank may have left the process group")
    return "Hang: " + "; ".join(parts)
