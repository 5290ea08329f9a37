"""The client-side limit on requests in flight, shared by threads and coroutines.

A request holds a slot from `submit` until the client's I/O thread is done with it: its
terminal event was handed over (or it was refused before being sent). A cancelled request
keeps its slot until the broker's end of it is heard, as the work it stands for may still
run. Events waiting for a consumer that has not taken them hold no slot, so a caller that
submits many requests before it reads any never waits on itself.

Threads wait on a condition; coroutines register a future that a release resolves through
their event loop. A release wakes every waiter and each tries again: simple, and a waiter
that gave up (timeout, task cancelled) cannot swallow a wakeup meant for another.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

from .errors import InFlightLimitError


class InFlightLimit:
    def __init__(self, limit: int | None) -> None:
        #: None: no limit.
        self.limit = limit
        self.used = 0
        self._condition = threading.Condition(threading.Lock())
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def _try(self) -> bool:
        # Under the lock.
        if self.limit is not None and self.used >= self.limit:
            return False
        self.used += 1
        return True

    def acquire(self, wait: bool | float, given_up: Callable[[], bool] = lambda: False) -> bool:
        """Takes a slot: at once, or waiting (`True`: as long as it takes, a number: that many
        seconds); raises `InFlightLimitError` when none is free in time. Returns False, with
        no slot, once `given_up()` (checked whenever `wake` is called)."""
        deadline = None if wait is True else time.monotonic() + (0.0 if wait is False else float(wait))
        with self._condition:
            while not self._try():
                if given_up():
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise self._error(wait)
                self._condition.wait(remaining)
        return True

    async def acquire_async(self, wait: bool | float, given_up: Callable[[], bool] = lambda: False) -> bool:
        """`acquire` for a coroutine: waits without blocking its event loop."""
        loop = asyncio.get_running_loop()
        deadline = None if wait is True else loop.time() + (0.0 if wait is False else float(wait))
        while True:
            with self._condition:
                if self._try():
                    return True
                if given_up():
                    return False
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    raise self._error(wait)
                future: asyncio.Future[None] = loop.create_future()
                self._async_waiters.append((loop, future))
            try:
                await asyncio.wait([future], timeout=remaining)
            finally:
                with self._condition:
                    try:
                        self._async_waiters.remove((loop, future))
                    except ValueError:
                        pass

    def release(self) -> None:
        with self._condition:
            self.used -= 1
        self.wake()

    def wake(self) -> None:
        """Has every waiter look again (a slot came free, or a waiter may have given up)."""
        with self._condition:
            self._condition.notify_all()
            waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # its loop is closed
                pass

    def _error(self, wait: bool | float) -> InFlightLimitError:
        waited = "" if wait is False else f" after waiting {float(wait):g} s"
        return InFlightLimitError(
            f"the client has max_in_flight={self.limit} requests in flight{waited}; "
            "submit with wait=True to wait for one to end, or raise max_in_flight", self.limit or 0)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
