"""Metrics from log lines: each definition's regex is searched in every new complete line of every
host's log, without the rank label a host of several processes gives its lines (`algo-1[1] | `), so a
regex anchored at `^` matches what the script printed; the first capture group, if it parses as a number,
is a datapoint. Definitions that never match are reported at the end of the job rather than ignored."""

from __future__ import annotations

import re
import time
from pathlib import Path

from shipyard.runtime.launchers.base import split_rank_label
from shipyard.runtime.tail import FileTail
from shipyard.spec.job import MetricDefinition


class LogScraper:
    def __init__(self, host: str, path: Path, definitions: tuple[MetricDefinition, ...], offset: int = 0) -> None:
        self.host, self.tail = host, FileTail(path, offset)
        self.patterns = [(d.name, re.compile(d.regex)) for d in definitions]
        self.matched: set[str] = set()
        self.unparsable: dict[str, str] = {}

    def scrape(self) -> list[tuple[str, str, float, float]]:
        """New datapoints as (metric, host, timestamp, value)."""
        if not self.patterns:
            return []
        now, rows = time.time(), []
        for line in self.tail.read():
            _, line = split_rank_label(self.host, line)
            for name, pattern in self.patterns:
                match = pattern.search(line)
                if not match:
                    continue
                try:
                    value = float(match.group(1))
                except (TypeError, ValueError):
                    self.unparsable.setdefault(name, match.group(1) or "")
                    continue
                self.matched.add(name)
                rows.append((name, self.host, now, value))
        return rows


def unmatched_report(definitions: tuple[MetricDefinition, ...], scrapers: list[LogScraper],
                     matched_before: set[str] = frozenset()) -> list[str]:
    """`matched_before`: what an earlier controller of the same job already scraped."""
    matched = set(matched_before).union(*(s.matched for s in scrapers))
    unparsable: dict[str, str] = {}
    for scraper in scrapers:
        unparsable.update(scraper.unparsable)
    problems = []
    for definition in definitions:
        if definition.name in matched:
            continue
        if definition.name in unparsable:
            problems.append(
                f"metric {definition.name!r}: regex {definition.regex!r} matched, but its first group "
                f"captured {unparsable[definition.name]!r}, which is not a number"
            )
        else:
            problems.append(f"metric {definition.name!r}: regex {definition.regex!r} never matched a log line")
    return problems
