"""One request's events on their way from the client's I/O thread to the consumer.

**Strict cancel is enforced here, in `_Channel.take()`, and nowhere else.** Events wait in
a queue guarded by a lock; an event leaves it only through `take()`, under that lock, after
checking `cancelled`. `cancel()` sets that flag under the same lock (and empties the queue),
so once `Client.cancel(id)` has returned, no event — already queued or still to come — is
ever handed to the consumer: the iterator yields one local `Cancelled` (unless the consumer
had already taken the request's terminal event) and stops.

The same channel serves the threaded `Request` and the asyncio `AsyncRequest`: a thread
waits on its condition; a coroutine registers a future that the I/O thread resolves through
the event loop (`call_soon_threadsafe`) and then takes, through the same `take` path.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Iterator

from .events import Cancelled, Degraded, Event, Final, Result
from .errors import EnlargerError, RequestError

if TYPE_CHECKING:
    from concurrent.futures import Future

    import asyncio

    from .client import Client
    from .codes import CancelOutcome

__all__ = ["Request"]


class _Empty:
    """No event to take yet (the request is not over)."""


EMPTY = _Empty()


class _Channel:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self._condition = threading.Condition(threading.Lock())
        self._events: deque[Event] = deque()
        # The terminal event has been queued: nothing more is.
        self._ended = False
        self._cancelled = False
        # The consumer has taken a terminal event: the iterator is exhausted.
        self._finished = False
        #: Called (outside the lock) once the consumer has taken the last event.
        self.on_finished: Callable[[_Channel], None] | None = None
        # Coroutines waiting for something to take: their event loops and futures.
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def _wake_async(self) -> None:
        """Under the lock: resolves the waiting coroutines' futures on their own loops."""
        waiters, self._async_waiters = self._async_waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # its loop is closed: nobody waits any more
                pass

    # -- I/O thread side ------------------------------------------------------------------

    def deliver(self, event: Event, terminal: bool) -> None:
        """Queues `event`; when `terminal`, it is the last one."""
        with self._condition:
            # Not an enforcement point: take() would never hand the event out after a
            # cancel; dropping it here only saves keeping the image.
            if self._ended or self._cancelled:
                return
            self._events.append(event)
            if terminal:
                self._ended = True
            self._condition.notify_all()
            self._wake_async()

    # -- Caller side ----------------------------------------------------------------------

    def cancel(self) -> None:
        """From now on the consumer gets nothing but a local Cancelled (if it has not taken a
        terminal event yet), then the end."""
        with self._condition:
            self._cancelled = True
            self._events.clear()
            self._condition.notify_all()
            self._wake_async()

    @property
    def is_live(self) -> bool:
        """Neither ended nor cancelled: its id is taken in this client."""
        with self._condition:
            return not (self._ended or self._cancelled)

    @property
    def is_finished(self) -> bool:
        """The consumer has taken the last event, or was cancelled: nothing more reaches it."""
        with self._condition:
            return self._finished or self._cancelled

    def take(self, timeout: float | None) -> Event | None:
        """The consumer's next event; None when the iterator is exhausted. Raises
        TimeoutError when none comes within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while (event := self._take_locked()) is EMPTY:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no event for request {self.request_id} within {timeout:g} s")
                self._condition.wait(remaining)
        return self._taken(event)

    def take_nowait(self) -> Event | None | _Empty:
        """The next event, None when exhausted, or EMPTY when it has to wait."""
        with self._condition:
            event = self._take_locked()
        return event if event is EMPTY else self._taken(event)

    def wait_async(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> bool:
        """Has `future` resolved (on `loop`) when there is something to take; False, and
        nothing registered, when there is already."""
        with self._condition:
            if self._cancelled or self._events or self._finished:
                return False
            self._async_waiters.append((loop, future))
            return True

    def stop_waiting(self, future: asyncio.Future[None]) -> None:
        with self._condition:
            self._async_waiters = [waiter for waiter in self._async_waiters if waiter[1] is not future]

    def _taken(self, event: Event | None | _Empty) -> Event | None:
        assert not isinstance(event, _Empty)
        if event is not None and event.terminal and self.on_finished is not None:
            self.on_finished(self)
        return event

    def _take_locked(self) -> Event | None | _Empty:
        # The cancel flag is checked before anything else.
        if self._cancelled:
            if self._finished:
                return None
            self._finished = True
            return Cancelled(self.request_id, by_this_client=True)
        if self._events:
            event = self._events.popleft()
            if event.terminal:
                self._finished = True
            return event
        if self._finished:
            return None
        return EMPTY


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Request:
    """A submitted request: an iterator of its events (see `enlarger.events`), ending with
    exactly one terminal event.

    The client always ends a request, even if the broker dies (its liveness rules fail it
    with `BROKER_LOST` or `BROKER_UNREACHABLE`), so iterating never hangs for longer than the
    silence limit past the broker's last word. One thread iterates a request at a time;
    `cancel()` may be called from any thread.

    **Abandoning it cancels it** when it is used as a context manager::

        with client.submit(jpeg, width=320) as request:
            for event in request:
                if isinstance(event, enlarger.Degraded):
                    break          # the block ends: the request is cancelled at the broker

    Leaving the block before the request ended — a `break`, a `return`, an exception —
    cancels it exactly as `cancel()` does. A bare ``for`` loop that breaks leaves the request
    running to its end (nothing is cleaned up behind the caller's back); use the ``with``
    form when you may stop early.
    """

    def __init__(self, client: Client, channel: _Channel) -> None:
        self._client = client
        self._channel = channel

    @property
    def id(self) -> str:
        """The request id, as submitted."""
        return self._channel.request_id

    def __repr__(self) -> str:
        return f"Request(id={self.id!r})"

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        event = self._channel.take(None)
        if event is None:
            raise StopIteration
        return event

    def next_event(self, timeout: float | None = None) -> Event | None:
        """The next event, waiting at most `timeout` seconds (TimeoutError after that); None
        once the terminal event has been taken."""
        return self._channel.take(timeout)

    def cancel(self) -> Future[CancelOutcome]:
        """Same as `client.cancel(request.id)`."""
        return self._client.cancel(self.id)

    def __enter__(self) -> Request:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._client._abandon(self._channel)

    def finals(self, timeout: float | None = None) -> list[Final]:
        """Consumes the events and returns every `Final` once the terminal one arrived: for a
        request with variants, one per variant in the order of its list. Raises as `result`
        (and `EnlargerError` for a delivery that ends with a degraded result)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        finals: list[Final] = []
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = _gather_final(self.id, self._channel.take(remaining), finals)
            if done is not None:
                return done

    def result(self, timeout: float | None = None) -> Result:
        """Consumes the events and returns the terminal result (`Final`, or the `Degraded`
        one for delivery DEGRADED). Raises `RequestError` when the request ended otherwise,
        TimeoutError when it has not ended within `timeout` seconds (it stays live)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            event = self._channel.take(remaining)
            if event is None:
                raise EnlargerError(f"request {self.id}: its terminal event was taken already")
            if isinstance(event, (Final, Degraded)) and event.terminal:
                return event
            if event.terminal:
                raise RequestError(event)


def _gather_final(request_id: str, event: Event | None, finals: list[Final]) -> list[Final] | None:
    """One step of `finals()` (here and in `AsyncRequest`): keeps a `Final`; returns them all,
    in variant order, once the terminal one came; raises as `result()` for any other end."""
    if event is None:
        raise EnlargerError(f"request {request_id}: its terminal event was taken already")
    if isinstance(event, Final):
        finals.append(event)
        return sorted(finals, key=lambda final: final.variant) if event.terminal else None
    if isinstance(event, Degraded) and event.terminal:
        raise EnlargerError(f"request {request_id} ended with a degraded result: use result()")
    if event.terminal:
        raise RequestError(event)
    return None
