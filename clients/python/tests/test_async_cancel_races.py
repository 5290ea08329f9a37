"""Strict cancel in asyncio under randomised races against a real broker and worker.

The asyncio twin of test_cancel_races: many requests share one `AsyncClient`, each in its own
task, cancelled at a random moment (right after submit, after some events, after a pause while
its events pile up, from another task while it is being iterated, by leaving an ``async with``
block early), or not at all, or cancelled and its id submitted again at once. Whatever the
timing, nothing about a request reaches its consumer once `cancel()` has returned, except at
most one local `Cancelled`.

The seed is printed; ENLARGER_TEST_SEED=N replays the same choices (timing still varies).
"""

from __future__ import annotations

import asyncio
import os
import random
import unittest

import enlarger

from .support import SMALL_IMAGES, WITH_DEGRADED, Service, check_life, corpus, jpeg_size, log, wait_for

REQUESTS = 300
#: Requests in flight at once (each in its own task).
CONCURRENCY = 12
LOCAL_CANCEL = enlarger.Cancelled


async def collect(request: enlarger.AsyncRequest, timeout: float = 30.0) -> list[enlarger.Event]:
    """All of a request's events; fails instead of hanging."""
    try:
        return await asyncio.wait_for(_drain(request), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"request {request.id} did not end within {timeout} s") from None


async def _drain(request: enlarger.AsyncRequest) -> list[enlarger.Event]:
    return [event async for event in request]


class AsyncCancelRaceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def test_nothing_is_delivered_after_cancel(self):
        seed = int(os.environ.get("ENLARGER_TEST_SEED") or random.SystemRandom().randrange(2**32))
        log(f"\nasync cancel races: seed {seed} (ENLARGER_TEST_SEED={seed} replays the choices)")
        failures, counts = asyncio.run(self.race(seed))
        self.assertEqual(failures, [], f"seed {seed}")
        log(f"async cancel races: {counts}")

    async def race(self, seed: int) -> tuple[list[str], dict[str, int]]:
        rng = random.Random(seed)
        strategies = ["immediately", "before_await", "after_events", "pause", "other_task", "other_task", "abandon",
                      "no_cancel", "reuse_id"]
        plans = [(index, rng.choice(strategies)) for index in range(REQUESTS)]
        failures: list[str] = []
        counts: dict[str, int] = {}
        gate = asyncio.Semaphore(CONCURRENCY)

        async with enlarger.AsyncClient(self.service.endpoint) as client:
            async def run(index: int, strategy: str) -> None:
                async with gate:
                    local = random.Random(f"{seed}-{index}")
                    try:
                        await getattr(self, f"run_{strategy}")(client, f"arace-{seed}-{index}", local)
                    except BaseException as error:  # collected for the test
                        failures.append(f"request {index} ({strategy}), seed {seed}: {error!r}")
                    counts[strategy] = counts.get(strategy, 0) + 1

            await asyncio.wait_for(asyncio.gather(*(run(i, s) for i, s in plans)), 180)

            # Every accepted request ended at the broker too, once it settles.
            async def settled() -> enlarger.BrokerStatus:
                while True:
                    status = await client.status(timeout=10)
                    if status.in_flight == 0 and status.queue_depth == 0:
                        return status
                    await asyncio.sleep(0.05)

            totals = (await asyncio.wait_for(settled(), 15)).totals
            if totals.accepted != totals.finished + totals.failed + totals.cancelled or totals.failed:
                failures.append(f"the broker's totals do not add up: {totals}")
        return failures, counts

    # -- Strategies: each returns normally when the rules held, raises AssertionError otherwise.

    async def submit(self, client, request_id, rng) -> enlarger.AsyncRequest:
        image = corpus(rng.choice([WITH_DEGRADED, *SMALL_IMAGES]))
        return await client.submit(image, width=rng.choice([64, 160, 320]), height=rng.choice([None, 200]),
                                   request_id=request_id)

    def assert_only_local_cancel(self, events, request_id, context=""):
        self.assertEqual(events, [LOCAL_CANCEL(request_id, by_this_client=True)], context)

    async def run_immediately(self, client, request_id, rng):
        request = await self.submit(client, request_id, rng)
        client.cancel(request_id)
        self.assert_only_local_cancel(await collect(request), request_id)

    async def run_before_await(self, client, request_id, rng):
        # Cancelled between the submit call and its await (maybe after other tasks ran): the
        # request never goes out.
        image = corpus(rng.choice([WITH_DEGRADED, *SMALL_IMAGES]))
        pending = client.submit(image, width=rng.choice([64, 160]), request_id=request_id)
        if rng.random() < 0.5:
            await asyncio.sleep(0)
        client.cancel(request_id)
        self.assert_only_local_cancel(await collect(await pending), request_id)

    async def run_pause(self, client, request_id, rng):
        # Events pile up in the request's channel during the pause; none may come out. A
        # blocking sleep also lets the I/O thread deliver while the loop cannot run.
        request = await self.submit(client, request_id, rng)
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0, 0.1))
        else:
            import time
            time.sleep(rng.uniform(0, 0.03))
        outcome = client.cancel(request_id)
        self.assert_only_local_cancel(await collect(request), request_id)
        self.assertIn(await outcome, set(enlarger.CancelOutcome))

    async def run_after_events(self, client, request_id, rng):
        request = await self.submit(client, request_id, rng)
        taken = []
        for _ in range(rng.randint(1, 4)):
            event = await request.next_event(timeout=30)
            if event is None:
                break
            taken.append(event)
        await request.cancel()  # awaiting the broker's answer changes nothing for the consumer
        rest = await collect(request)
        if any(event.terminal for event in taken):
            self.assertEqual(rest, [], f"after the terminal event: {taken}")
        else:
            self.assert_only_local_cancel(rest, request_id, f"after {taken}")
        check_life(self, taken + rest)

    async def run_other_task(self, client, request_id, rng):
        request = await self.submit(client, request_id, rng)
        cancelled = asyncio.Event()

        async def cancel_later():
            await asyncio.sleep(rng.uniform(0, 0.1))
            client.cancel(request_id)
            cancelled.set()  # cancel() has returned

        canceller = asyncio.create_task(cancel_later())
        events, after_cancel = [], []
        while True:
            cancel_had_returned = cancelled.is_set()  # before the step begins
            event = await request.next_event(timeout=30)
            if event is None:
                break
            events.append(event)
            if cancel_had_returned:
                after_cancel.append(event)
        await canceller
        self.assertTrue(all(e == LOCAL_CANCEL(request_id, by_this_client=True) for e in after_cancel),
                        f"delivered after cancel() returned: {after_cancel} (all: {events})")
        check_life(self, events)
        if not isinstance(events[-1], enlarger.Final):
            self.assertEqual(events[-1], LOCAL_CANCEL(request_id, by_this_client=True), events)
        # Later cancels change nothing for a finished iterator.
        client.cancel(request_id)
        self.assertIsNone(await request.next_event(timeout=0))

    async def run_abandon(self, client, request_id, rng):
        # Leaving the block early cancels; the same request object then yields nothing more
        # than a local Cancelled, unless it had ended.
        image = corpus(rng.choice([WITH_DEGRADED, *SMALL_IMAGES]))
        taken = []
        async with client.submit(image, width=rng.choice([64, 160]), request_id=request_id) as request:
            for _ in range(rng.randint(0, 3)):
                event = await request.next_event(timeout=30)
                if event is None:
                    break
                taken.append(event)
        rest = await collect(request)
        if any(event.terminal for event in taken):
            self.assertEqual(rest, [], taken)
        elif rest != [LOCAL_CANCEL(request_id, by_this_client=True)]:
            # It had ended before the block was left (nothing to cancel): its remaining
            # events, the terminal one last, wait untaken.
            self.assertTrue(rest and rest[-1].terminal, f"after {taken}: {rest}")
            self.assertNotIsInstance(rest[-1], enlarger.Cancelled, rest)
        check_life(self, taken + rest)

    async def run_no_cancel(self, client, request_id, rng):
        events = await collect(await self.submit(client, request_id, rng))
        check_life(self, events)
        final = events[-1]
        self.assertIsInstance(final, enlarger.Final, events)
        self.assertEqual(jpeg_size(final.data), (final.width, final.height))

    async def run_reuse_id(self, client, request_id, rng):
        first = await self.submit(client, request_id, rng)
        if rng.random() < 0.5:
            await asyncio.sleep(rng.uniform(0, 0.05))
        client.cancel(request_id)
        second = await self.submit(client, request_id, rng)
        self.assert_only_local_cancel(await collect(first), request_id)
        events = await collect(second)
        check_life(self, events)
        self.assertIsInstance(events[0], enlarger.Accepted, events)
        self.assertIsInstance(events[-1], enlarger.Final, events)


if __name__ == "__main__":
    unittest.main()
