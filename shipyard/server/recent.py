"""Answers shared between clients for a moment: twenty pages following one running job ask the same
questions every 2 s, and the server reads the store once for all of them (at most `ttl` seconds old)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")


class Recent:
    def __init__(self, ttl: float, size: int = 2048) -> None:
        self.ttl, self.size = ttl, size
        self._values: dict[Hashable, tuple[float, object]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        now = time.monotonic()
        with self._lock:
            hit = self._values.get(key)
        if hit is not None and now - hit[0] < self.ttl:
            return hit[1]  # type: ignore[return-value]
        value = compute()
        with self._lock:
            if len(self._values) >= self.size:   # the oldest half goes
                for old in sorted(self._values, key=lambda k: self._values[k][0])[: self.size // 2]:
                    del self._values[old]
            self._values[key] = (now, value)
        return value
