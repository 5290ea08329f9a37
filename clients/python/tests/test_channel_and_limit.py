"""The request channel and the in-flight limit without a broker: threads and coroutines
woken by another thread, strict cancel for a waiting coroutine, timeouts; and a close that
races a submit still ends it."""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
import time
import unittest

import enlarger
from enlarger._limit import InFlightLimit
from enlarger.request import EMPTY, _Channel

from .support import collect


def later(delay: float, action) -> threading.Timer:
    timer = threading.Timer(delay, action)
    timer.start()
    return timer


class ChannelTest(unittest.TestCase):
    def test_a_coroutine_is_woken_by_the_io_thread(self):
        async def main():
            channel = _Channel("r")
            request = enlarger.AsyncRequest(None, channel)  # type: ignore[arg-type]
            self.assertIs(channel.take_nowait(), EMPTY)
            later(0.05, lambda: channel.deliver(enlarger.Accepted("r"), False))
            later(0.1, lambda: channel.deliver(enlarger.Failed("r", enlarger.ErrorCode.CORRUPT, "x"), True))
            events = [event async for event in request]
            self.assertEqual([type(e) for e in events], [enlarger.Accepted, enlarger.Failed])
            with self.assertRaises(StopAsyncIteration):
                await request.__anext__()
        asyncio.run(main())

    def test_cancel_reaches_a_waiting_coroutine_and_drops_what_is_queued(self):
        async def main():
            channel = _Channel("r")
            request = enlarger.AsyncRequest(None, channel)  # type: ignore[arg-type]
            waiter = asyncio.ensure_future(request.next_event())
            await asyncio.sleep(0.01)
            self.assertFalse(waiter.done())
            channel.cancel()  # what Client.cancel does to it, on this thread
            # Whatever the I/O thread delivers now is never handed out.
            channel.deliver(enlarger.Final("r"), True)
            self.assertEqual(await asyncio.wait_for(waiter, 1), enlarger.Cancelled("r"))
            self.assertIsNone(await request.next_event(timeout=0))
        asyncio.run(main())

    def test_timeout_loses_no_event(self):
        async def main():
            channel = _Channel("r")
            request = enlarger.AsyncRequest(None, channel)  # type: ignore[arg-type]
            with self.assertRaises(TimeoutError):
                await request.next_event(timeout=0.02)
            channel.deliver(enlarger.Accepted("r"), False)
            self.assertEqual(await request.next_event(timeout=0), enlarger.Accepted("r"))
            # A task cancelled while it waits leaves nothing registered behind.
            waiter = asyncio.ensure_future(request.next_event())
            await asyncio.sleep(0.01)
            waiter.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await waiter
            channel.deliver(enlarger.Started("r"), False)
            self.assertEqual(await request.next_event(timeout=1), enlarger.Started("r"))
        asyncio.run(main())


    def test_two_waiting_coroutines_both_hear_the_end(self):
        async def main():
            channel = _Channel("r")
            request = enlarger.AsyncRequest(None, channel)  # type: ignore[arg-type]
            waiters = [asyncio.ensure_future(request.next_event()) for _ in range(2)]
            await asyncio.sleep(0.01)
            later(0.02, lambda: channel.deliver(enlarger.Failed("r", enlarger.ErrorCode.CORRUPT, "x"), True))
            results = await asyncio.wait_for(asyncio.gather(*waiters), 1)
            self.assertEqual(sorted(type(r).__name__ for r in results), ["Failed", "NoneType"])
        asyncio.run(main())


class LimitTest(unittest.TestCase):
    def test_threads_wait_and_fail_fast(self):
        limit = InFlightLimit(2)
        limit.acquire(False)
        limit.acquire(True)
        with self.assertRaises(enlarger.InFlightLimitError):
            limit.acquire(False)
        start = time.monotonic()
        with self.assertRaises(enlarger.InFlightLimitError):
            limit.acquire(0.1)
        self.assertGreaterEqual(time.monotonic() - start, 0.09)
        later(0.05, limit.release)
        limit.acquire(5)  # woken by the release
        self.assertEqual(limit.used, 2)
        unlimited = InFlightLimit(None)
        for _ in range(1000):
            unlimited.acquire(False)

    def test_coroutines_wait_and_give_up_cleanly(self):
        async def main():
            limit = InFlightLimit(1)
            await limit.acquire_async(False)
            with self.assertRaises(enlarger.InFlightLimitError):
                await limit.acquire_async(False)
            with self.assertRaises(enlarger.InFlightLimitError):
                await limit.acquire_async(0.05)
            gave_up = asyncio.ensure_future(limit.acquire_async(True))
            waiting = asyncio.ensure_future(limit.acquire_async(True))
            await asyncio.sleep(0.01)
            gave_up.cancel()
            later(0.02, limit.release)  # from another thread, as the I/O thread does
            await asyncio.wait_for(waiting, 1)
            self.assertTrue(gave_up.cancelled())
            self.assertEqual(limit.used, 1)
        asyncio.run(main())


class CloseRacesSubmitTest(unittest.TestCase):
    def test_a_submit_posted_with_the_close_still_ends(self):
        directory = tempfile.mkdtemp(prefix="enl-py-")
        self.addCleanup(os.rmdir, directory)
        ended = refused = 0
        for _ in range(30):
            client = enlarger.Client(f"ipc://{directory}/clients.sock")
            client._shared.request_close()
            try:
                request = client.submit(b"\xff\xd8", width=10)
            except enlarger.ClientClosedError:
                refused += 1
            else:
                events = collect(request, timeout=5)
                self.assertEqual(events[-1].code, enlarger.ErrorCode.CLIENT_CLOSED, events)
                ended += 1
            client.close()
            self.assertEqual(client._shared.limit.used, 0, "every slot given back")
        self.assertEqual(ended + refused, 30)


if __name__ == "__main__":
    unittest.main()
