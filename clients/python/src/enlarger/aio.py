"""`AsyncClient`: the client for asyncio programs.

    async with enlarger.AsyncClient() as client:
        async with client.submit(jpeg, width=320) as request:
            async for event in request:
                ...

It is the threaded `Client` seen from an event loop, not a second implementation: the same
protocol state machine (`enlarger.core.ClientCore`) run by the same I/O thread, which alone
touches the ZeroMQ socket, and the same per-request channel, which alone decides what reaches
the consumer (strict cancel). Only the waiting differs: a coroutine waiting for an event, a
slot of the in-flight limit or an answer registers a future that the I/O thread resolves
through the event loop, so nothing here blocks the loop.

Every method is called on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Any

from ._loop import new_future
from .client import DEFAULT_MAX_IN_FLIGHT, Client, _check_wait, _one_source, _worker_file, read_local_file
from .codes import CancelOutcome, Chroma, Delivery, FailOn, Fit, GainMap, ImageFormat, Priority
from .errors import EnlargerError, RequestError
from .events import BrokerStatus, Degraded, Event, Final, ImageInfo, Info, Result
from .request import _Channel, _Empty, _gather_final

__all__ = ["AsyncClient", "AsyncRequest"]


class AsyncClient:
    """A connection to the broker for asyncio code; the arguments, threading notes, liveness
    and strict-cancel rules are `Client`'s. Use it as ``async with AsyncClient(...) as
    client``, or call ``await client.close()``."""

    def __init__(self, endpoint: str | None = None, *, server_public_key: str | os.PathLike[str] | None = None,
                 key: str | os.PathLike[str] | None = None, insecure: bool | None = None,
                 max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT, heartbeat_interval: float = 1.0,
                 missed_heartbeats: int = 3, sync_interval: float = 2.0, max_input_bytes: int = 64 << 20,
                 resubmit_after_broker_restart: bool = True) -> None:
        self._client = Client(endpoint, server_public_key=server_public_key, key=key, insecure=insecure,
                              max_in_flight=max_in_flight, heartbeat_interval=heartbeat_interval,
                              missed_heartbeats=missed_heartbeats, sync_interval=sync_interval,
                              max_input_bytes=max_input_bytes,
                              resubmit_after_broker_restart=resubmit_after_broker_restart)

    @property
    def endpoint(self) -> str:
        return self._client.endpoint

    @property
    def max_input_bytes(self) -> int:
        """As `Client.max_input_bytes`."""
        return self._client.max_input_bytes

    # -- Requests -------------------------------------------------------------------------

    def submit(self, image: bytes | bytearray | memoryview | None = None, *,
               local_file: str | os.PathLike[str] | None = None, worker_file: str | None = None,
               url: str | None = None, file: str | None = None, width: int | None = None,
               height: int | None = None, fit: Fit | str = Fit.INSIDE, enlarge: bool = False,
               quality: int | None = None, progressive: bool = False, chroma: Chroma | str = Chroma.YUV420,
               format: ImageFormat | str = ImageFormat.JPEG, fail_on: FailOn | str = FailOn.ERROR,
               keep_profile: bool = False, accept: Sequence[ImageFormat | str] | None = None, flatten: bool = False,
               background: str | int | None = None, lossless: bool = False,
               gain_map: GainMap | str = GainMap.KEEP, variants: Sequence[dict[str, Any]] | None = None,
               degraded: bool = True, delivery: Delivery | str | None = None, request_id: str | None = None,
               timeout: float | None = None, share: bool = True, wait: bool | float = True,
               priority: Priority | str = Priority.INTERACTIVE, placeholder: bool = True) -> PendingRequest:
        """Submits one image, as `Client.submit` (same arguments): ``await`` the result for the
        `AsyncRequest`, or use it directly as ``async with client.submit(...) as request``,
        which cancels the request when the block is left before it ended.

        Arguments are checked at once (the argument errors of `Client.submit` raise here);
        the request is sent when awaited, after a `local_file` is read (in a worker thread)
        and a slot of the in-flight limit is free (`wait`)."""
        worker_file = _worker_file(worker_file, file)
        _check_wait(wait)
        _one_source(image, local_file, worker_file, url)
        if request_id is None:
            request_id = str(uuid.uuid4())
        spec: dict[str, Any] = dict(
            width=width, height=height, fit=fit, enlarge=enlarge, quality=quality, progressive=progressive,
            chroma=chroma, format=format, fail_on=fail_on, keep_profile=keep_profile, accept=accept,
            flatten=flatten, background=background, lossless=lossless, gain_map=gain_map, variants=variants,
            degraded=degraded,
            delivery=delivery,
            request_id=request_id, timeout=timeout, priority=priority, placeholder=placeholder)
        client = self._client
        path = local_file
        # Argument errors at once, before a local file is read.
        prepared = client._prepare(b"" if path is not None else image, worker_file, url, spec, share)
        # Cancellable by its id from here on, while it waits for its file and a slot.
        channel = client._register(request_id)

        async def start() -> AsyncRequest:
            try:
                submit, data = prepared
                if path is not None:
                    image = await asyncio.to_thread(read_local_file, path, client.max_input_bytes)
                    submit, data = client._prepare(image, None, None, spec, share)
                holds_slot = await client._shared.limit.acquire_async(wait, lambda: not channel.is_live)
            except BaseException:
                client._shared.unregister(channel)
                raise
            if holds_slot:
                client._shared.post(channel, submit, data)
            # Else it was cancelled while it waited: it never goes out.
            return AsyncRequest(self, channel)
        return PendingRequest(start)

    def cancel(self, request_id: str) -> asyncio.Future[CancelOutcome]:
        """Cancels the request with this id, as `Client.cancel`.

        **Strict from the call, not from the await:** before it returns, this client's
        requests with the id are marked cancelled, so their iterators yield nothing more than
        a local `Cancelled`. The returned future gets the broker's answer; awaiting it is
        optional (a failure nobody awaits is not logged)."""
        loop = asyncio.get_running_loop()
        answer = self._client.cancel(request_id)
        future = asyncio.wrap_future(answer, loop=loop)
        future.add_done_callback(_retrieve)
        return future

    async def info(self, image: bytes | bytearray | memoryview | None = None, *,
                   local_file: str | os.PathLike[str] | None = None, worker_file: str | None = None,
                   url: str | None = None, file: str | None = None, fail_on: FailOn | str = FailOn.ERROR,
                   request_id: str | None = None, timeout: float | None = None,
                   wait: bool | float = True) -> ImageInfo:
        """What the image's header says, as `Client.info`; raises `RequestError` when the
        request fails."""
        client = self._client
        worker_file = _worker_file(worker_file, file)
        _check_wait(wait)
        _one_source(image, local_file, worker_file, url)
        if local_file is not None:
            client._prepare_info(b"", None, None, fail_on, request_id, timeout)  # argument errors first
            image = await asyncio.to_thread(read_local_file, local_file, client.max_input_bytes)
        submit, data = client._prepare_info(image, worker_file, url, fail_on, request_id, timeout)
        channel = client._register(submit.request_id)
        try:
            holds_slot = await client._shared.limit.acquire_async(wait, lambda: not channel.is_live)
        except BaseException:
            client._shared.unregister(channel)
            raise
        if holds_slot:
            client._shared.post(channel, submit, data)
        async with AsyncRequest(self, channel) as request:
            async for event in request:
                if isinstance(event, Info) and event.info is not None:
                    return event.info
                if event.terminal:
                    raise RequestError(event)
        raise RequestError(Info(submit.request_id))

    async def status(self, timeout: float | None = None) -> BrokerStatus:
        """The broker's workers, queue and counters, as `Client.status`."""
        answer = new_future()
        self._client._shared.status(answer)
        try:
            status: BrokerStatus = await asyncio.wait_for(asyncio.wrap_future(answer), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no status from {self.endpoint} within {timeout:g} s") from None
        return status

    # -- Lifetime -------------------------------------------------------------------------

    async def close(self) -> None:
        """As `Client.close`; waits for the I/O thread to stop without blocking the loop."""
        await asyncio.to_thread(self._client.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"AsyncClient({self.endpoint!r})"


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class PendingRequest:
    """What `AsyncClient.submit` returns: await it for the `AsyncRequest`, or enter it with
    ``async with`` (leaving the block before the request ended cancels it). Once only.

    Its request id is taken from the `submit` call on: `cancel(id)` reaches it while it waits
    (for its local file, for a slot of the in-flight limit, to be awaited at all); it then
    never goes out, and its request yields only the local `Cancelled`."""

    def __init__(self, start: Callable[[], Awaitable[AsyncRequest]]) -> None:
        self._start: Callable[[], Awaitable[AsyncRequest]] | None = start
        self._request: AsyncRequest | None = None

    def _begin(self) -> Awaitable[AsyncRequest]:
        if self._start is None:
            raise EnlargerError("this submit was awaited already: each call of submit() sends one request")
        start, self._start = self._start, None
        return start()

    def __await__(self) -> Generator[Any, None, AsyncRequest]:
        return self._begin().__await__()

    async def __aenter__(self) -> AsyncRequest:
        self._request = await self._begin()
        return self._request

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._request is not None:
            await self._request.__aexit__(exc_type, exc, traceback)


class AsyncRequest:
    """A submitted request: an async iterator of its events (see `enlarger.events`), ending
    with exactly one terminal event; the asyncio twin of `Request`. One task iterates it at
    a time. ``async with request:`` cancels it when the block is left before it ended."""

    def __init__(self, client: AsyncClient, channel: _Channel) -> None:
        self._client = client
        self._channel = channel

    @property
    def id(self) -> str:
        return self._channel.request_id

    def __repr__(self) -> str:
        return f"AsyncRequest(id={self.id!r})"

    def __aiter__(self) -> AsyncRequest:
        return self

    async def __anext__(self) -> Event:
        event = await self.next_event()
        if event is None:
            raise StopAsyncIteration
        return event

    async def next_event(self, timeout: float | None = None) -> Event | None:
        """The next event, waiting at most `timeout` seconds (TimeoutError after that); None
        once the terminal event has been taken."""
        channel = self._channel
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            event = channel.take_nowait()
            if not isinstance(event, _Empty):
                return event
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no event for request {self.id} within {timeout:g} s")
            woken: asyncio.Future[None] = loop.create_future()
            if not channel.wait_async(loop, woken):
                continue  # something arrived meanwhile
            try:
                # The event is taken only after the wait, so a timeout or a cancelled task
                # never loses one.
                await asyncio.wait([woken], timeout=remaining)
            finally:
                channel.stop_waiting(woken)

    def cancel(self) -> asyncio.Future[CancelOutcome]:
        """Same as `client.cancel(request.id)`: strict from the call."""
        return self._client.cancel(self.id)

    async def finals(self, timeout: float | None = None) -> list[Final]:
        """Consumes the events and returns every `Final`, as `Request.finals`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        finals: list[Final] = []
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            done = _gather_final(self.id, await self.next_event(remaining), finals)
            if done is not None:
                return done

    async def result(self, timeout: float | None = None) -> Result:
        """Consumes the events and returns the terminal result, as `Request.result`."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - loop.time())
            event = await self.next_event(remaining)
            if event is None:
                raise EnlargerError(f"request {self.id}: its terminal event was taken already")
            if isinstance(event, (Final, Degraded)) and event.terminal:
                return event
            if event.terminal:
                raise RequestError(event)

    async def __aenter__(self) -> AsyncRequest:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        self._client._client._abandon(self._channel)
