"""One request's events on their way from the client's I/O thread to the consumer.

**Strict cancel is enforced here, in `_Channel.take()`, and nowhere else.** Events wait in
a queue guarded by a lock; an event leaves it only through `take()`, under that lock, after
checking `cancelled`. `cancel()` sets that flag under the same lock (and empties the queue),
so once `Client.cancel(id)` has returned, no event — already queued or still to come — is
ever handed to the consumer: the iterator yields one local `Cancelled` (unless the consumer
had already taken the request's terminal event) and stops.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Iterator

from .events import Cancelled, Degraded, Event, Final, Result
from .errors import EnlargerError, RequestError

if TYPE_CHECKING:
    from concurrent.futures import Future

    from .client import Client
    from .codes import CancelOutcome

__all__ = ["Request"]


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

    # -- Caller side ----------------------------------------------------------------------

    def cancel(self) -> None:
        """From now on the consumer gets nothing but a local Cancelled (if it has not taken a
        terminal event yet), then the end."""
        with self._condition:
            self._cancelled = True
            self._events.clear()
            self._condition.notify_all()

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
        event = self._take(timeout)
        if event is not None and event.terminal and self.on_finished is not None:
            self.on_finished(self)
        return event

    def _take(self, timeout: float | None) -> Event | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._condition:
            while True:
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
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"no event for request {self.request_id} within {timeout:g} s")
                self._condition.wait(remaining)


class Request:
    """A submitted request: an iterator of its events (see `enlarger.events`), ending with
    exactly one terminal event.

    The client always ends a request, even if the broker dies (its liveness rules fail it
    with `BROKER_LOST` or `BROKER_UNREACHABLE`), so iterating never hangs for longer than the
    silence limit past the broker's last word. One thread iterates a request at a time;
    `cancel()` may be called from any thread.
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
