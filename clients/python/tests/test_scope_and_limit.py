"""Leaving a request's ``with`` / ``async with`` block cancels it at the broker; the client-side
in-flight limit makes submits wait or fail fast. Against a broker without workers, so
requests stay queued until cancelled."""

from __future__ import annotations

import asyncio
import threading
import time
import unittest

import enlarger

from .support import SMALL_IMAGES, Service, collect, corpus, wait_for

IMAGE = corpus(SMALL_IMAGES[0])


class _Queued(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=0, heartbeat_ms=200).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def setUp(self):
        self.client = self.service.client(heartbeat_interval=0.25)
        self.addCleanup(self.client.close)
        self.before = self.client.status().totals

    def wait_cancelled_at_broker(self, count: int) -> None:
        """The broker counts `count` more cancelled requests than before the test, and no queue."""
        def settled():
            status = self.client.status()
            done = status.totals.cancelled - self.before.cancelled >= count and status.queue_depth == 0
            return status if done else None
        status = wait_for(settled, 5, f"{count} request(s) cancelled at the broker")
        self.assertEqual(status.totals.cancelled - self.before.cancelled, count)


class LeavingTheBlockTest(_Queued):
    def test_break_out_of_the_iteration_cancels(self):
        with self.client.submit(IMAGE, width=100) as request:
            for event in request:
                self.assertIsInstance(event, enlarger.Accepted)
                break  # the block ends here: the request is still queued at the broker
        self.wait_cancelled_at_broker(1)
        # The request object is cancelled for its consumer too.
        self.assertEqual(collect(request), [enlarger.Cancelled(request.id, by_this_client=True)])

    def test_an_exception_in_the_block_cancels_and_propagates(self):
        with self.assertRaises(KeyError):
            with self.client.submit(IMAGE, width=100) as request:
                self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
                raise KeyError("the consumer failed")
        self.wait_cancelled_at_broker(1)

    def test_leaving_before_anything_arrived_cancels(self):
        with self.client.submit(IMAGE, width=100):
            pass
        self.wait_cancelled_at_broker(1)

    def test_a_request_that_ended_is_left_alone(self):
        # It ends with DEADLINE_EXCEEDED from the broker; leaving sends no cancel, and a new
        # request with its id is not touched by the old block's exit.
        with self.client.submit(IMAGE, width=100, timeout=0.2, request_id="ended") as request:
            events = collect(request, timeout=5)
            self.assertEqual(events[-1].code, enlarger.ErrorCode.DEADLINE_EXCEEDED)
            second = self.client.submit(IMAGE, width=100, request_id="ended")
            self.assertIsInstance(second.next_event(timeout=5), enlarger.Accepted)
        time.sleep(0.3)
        self.assertEqual(self.client.status().totals.cancelled, self.before.cancelled)
        self.assertEqual(second.cancel().result(5), enlarger.CancelOutcome.CANCELLED)

    def test_a_bare_loop_that_breaks_does_not_cancel(self):
        # The documented difference: without the block nothing is cleaned up behind the caller.
        for event in self.client.submit(IMAGE, width=100, request_id="bare"):
            break
        time.sleep(0.3)
        # Still live at the broker: this cancel is the one that ends it.
        self.assertEqual(self.client.cancel("bare").result(5), enlarger.CancelOutcome.CANCELLED)

    def test_async_block_cancels_on_break_and_on_exception(self):
        async def main():
            async with enlarger.AsyncClient(self.service.endpoint, heartbeat_interval=0.25) as client:
                async with client.submit(IMAGE, width=100) as request:
                    async for event in request:
                        self.assertIsInstance(event, enlarger.Accepted)
                        break
                self.assertEqual([e async for e in request], [enlarger.Cancelled(request.id)])
                with self.assertRaises(ZeroDivisionError):
                    async with await client.submit(IMAGE, width=100) as request:
                        self.assertIsInstance(await request.next_event(timeout=5), enlarger.Accepted)
                        1 / 0
        asyncio.run(main())
        self.wait_cancelled_at_broker(2)


class InFlightLimitTest(_Queued):
    def test_submits_beyond_the_limit_wait_or_fail_fast(self):
        # Different widths: identical requests would share one job at the broker.
        with self.service.client(max_in_flight=2, heartbeat_interval=0.25) as client:
            first = client.submit(IMAGE, width=101)
            client.submit(IMAGE, width=102)
            with self.assertRaises(enlarger.InFlightLimitError) as caught:
                client.submit(IMAGE, width=100, wait=False)
            self.assertIn("max_in_flight", str(caught.exception))
            self.assertEqual(caught.exception.limit, 2)
            start = time.monotonic()
            with self.assertRaises(enlarger.InFlightLimitError):
                client.submit(IMAGE, width=100, wait=0.3)
            self.assertGreaterEqual(time.monotonic() - start, 0.29)

            # A waiting submit goes out once a request ends (here: its cancel is acknowledged).
            third: list[enlarger.Request] = []
            waiter = threading.Thread(target=lambda: third.append(client.submit(IMAGE, width=100)))
            waiter.start()
            time.sleep(0.3)
            self.assertTrue(waiter.is_alive(), "a submit beyond the limit must wait")
            first.cancel()
            waiter.join(5)
            self.assertFalse(waiter.is_alive(), "the waiting submit went out once a slot was free")
            self.assertIsInstance(third[0].next_event(timeout=5), enlarger.Accepted)

    def test_a_refused_submit_gives_its_slot_back(self):
        with self.service.client(max_in_flight=2, heartbeat_interval=0.25) as client:
            client.submit(IMAGE, width=100, request_id="taken")
            for _ in range(5):
                with self.assertRaises(enlarger.DuplicateRequestIdError):
                    client.submit(IMAGE, width=100, request_id="taken", wait=False)
            client.submit(IMAGE, width=100, wait=False)  # the second slot is still free
            with self.assertRaises(enlarger.InFlightLimitError):
                client.submit(IMAGE, width=100, wait=False)

    def test_results_not_yet_read_hold_no_slot(self):
        # Submitting more than the limit before reading any never waits on itself.
        with self.service.client(max_in_flight=1, heartbeat_interval=0.25) as client:
            requests = [client.submit(IMAGE, width=100, timeout=0.1, wait=5) for _ in range(3)]
            for request in requests:
                self.assertEqual(collect(request, timeout=5)[-1].code, enlarger.ErrorCode.DEADLINE_EXCEEDED)

    def test_async_submits_wait_without_blocking_the_loop(self):
        async def main():
            async with enlarger.AsyncClient(self.service.endpoint, max_in_flight=1,
                                            heartbeat_interval=0.25) as client:
                first = await client.submit(IMAGE, width=100)
                with self.assertRaises(enlarger.InFlightLimitError):
                    await client.submit(IMAGE, width=100, wait=False)
                second = asyncio.ensure_future(client.submit(IMAGE, width=100))
                ticks = 0
                for _ in range(10):  # the loop runs while the submit waits
                    await asyncio.sleep(0.02)
                    ticks += 1
                self.assertFalse(second.done())
                self.assertEqual(ticks, 10)
                self.assertEqual(await first.cancel(), enlarger.CancelOutcome.CANCELLED)
                request = await asyncio.wait_for(second, 5)
                self.assertIsInstance(await request.next_event(timeout=5), enlarger.Accepted)
                request.cancel()
        asyncio.run(main())

    def test_a_submit_in_a_callback_never_waits_on_itself(self):
        # Callbacks of cancel()/status() futures run on the I/O thread, the one that frees slots.
        with self.service.client(max_in_flight=1, heartbeat_interval=0.25) as client:
            client.submit(IMAGE, width=103)
            outcome: list[BaseException | enlarger.Request] = []

            def submit_again(_):
                try:
                    outcome.append(client.submit(IMAGE, width=104))
                except BaseException as error:
                    outcome.append(error)
            client.cancel("unknown-id").add_done_callback(submit_again)
            wait_for(lambda: outcome, 5, "the callback")
            self.assertIsInstance(outcome[0], enlarger.InFlightLimitError)
            self.assertIn("callback", str(outcome[0]))

    def test_a_cancel_reaches_a_submit_waiting_for_a_slot(self):
        with self.service.client(max_in_flight=1, heartbeat_interval=0.25) as client:
            first = client.submit(IMAGE, width=105)
            self.assertIsInstance(first.next_event(timeout=5), enlarger.Accepted)
            accepted = self.client.status().totals.accepted
            waiting: list[enlarger.Request] = []
            waiter = threading.Thread(target=lambda: waiting.append(client.submit(IMAGE, width=106,
                                                                                  request_id="waiting")))
            waiter.start()
            time.sleep(0.2)
            self.assertTrue(waiter.is_alive())
            client.cancel("waiting")
            waiter.join(2)
            self.assertFalse(waiter.is_alive(), "a cancelled submit stops waiting")
            self.assertEqual(collect(waiting[0]), [enlarger.Cancelled("waiting")])
            self.assertEqual(client._shared.limit.used, 1, "it took no slot")
            first.cancel()
            time.sleep(0.3)
            self.assertEqual(self.client.status().totals.accepted, accepted, "it never reached the broker")

    def test_async_cancel_before_the_await_sends_nothing(self):
        async def main():
            async with enlarger.AsyncClient(self.service.endpoint, heartbeat_interval=0.25) as client:
                accepted = (await client.status()).totals.accepted
                pending = client.submit(IMAGE, width=107, request_id="never")
                # The id is taken from the call on.
                with self.assertRaises(enlarger.DuplicateRequestIdError):
                    client.submit(IMAGE, width=107, request_id="never")
                client.cancel("never")
                request = await pending
                self.assertEqual([e async for e in request], [enlarger.Cancelled("never")])
                # And one waiting for a slot gives up as soon as it is cancelled.
                async with enlarger.AsyncClient(self.service.endpoint, max_in_flight=1) as small:
                    first = await small.submit(IMAGE, width=108)
                    waiting = asyncio.ensure_future(small.submit(IMAGE, width=109, request_id="waits"))
                    await asyncio.sleep(0.1)
                    self.assertFalse(waiting.done())
                    small.cancel("waits")
                    request = await asyncio.wait_for(waiting, 2)
                    self.assertEqual([e async for e in request], [enlarger.Cancelled("waits")])
                    first.cancel()
                await asyncio.sleep(0.3)
                # Only `first` was accepted.
                self.assertEqual((await client.status()).totals.accepted, accepted + 1)
        asyncio.run(main())

    def test_default_limit(self):
        self.assertEqual(enlarger.DEFAULT_MAX_IN_FLIGHT, 256)
        self.assertEqual(self.client._shared.limit.limit, 256)
        with self.service.client(max_in_flight=None) as unlimited:
            self.assertIsNone(unlimited._shared.limit.limit)


if __name__ == "__main__":
    unittest.main()
