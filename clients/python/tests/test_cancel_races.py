"""Strict cancel under randomised races against a real broker and worker.

Many requests share one client; each is cancelled at a random moment (right after submit,
after some of its events, after a random pause while its events pile up, from another thread
while it is being iterated, by leaving its ``with`` block early), or not at all, or cancelled
and its id submitted again at once.
Whatever the timing, nothing about a request reaches its consumer once `cancel()` has
returned, except at most one local `Cancelled`.

The seed is printed; ENLARGER_TEST_SEED=N replays the same choices (timing still varies).
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
import unittest

import enlarger

from .support import SMALL_IMAGES, WITH_DEGRADED, Service, check_life, collect, corpus, jpeg_size, log, wait_for

REQUESTS = 300
CONSUMERS = 6
LOCAL_CANCEL = enlarger.Cancelled


class CancelRaceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def test_nothing_is_delivered_after_cancel(self):
        seed = int(os.environ.get("ENLARGER_TEST_SEED") or random.SystemRandom().randrange(2**32))
        log(f"\ncancel races: seed {seed} (ENLARGER_TEST_SEED={seed} replays the choices)")
        rng = random.Random(seed)
        strategies = ["immediately", "after_events", "pause", "other_thread", "other_thread", "abandon", "no_cancel",
                      "reuse_id"]
        plans = queue.SimpleQueue()
        for index in range(REQUESTS):
            plans.put((index, rng.choice(strategies)))
        failures: list[str] = []
        counts: dict[str, int] = {}
        counts_lock = threading.Lock()

        with self.service.client() as client:
            def consume():
                while True:
                    try:
                        index, strategy = plans.get_nowait()
                    except queue.Empty:
                        return
                    local = random.Random(f"{seed}-{index}")
                    try:
                        getattr(self, f"run_{strategy}")(client, f"race-{seed}-{index}", local)
                    except BaseException as error:  # collected for the main thread
                        failures.append(f"request {index} ({strategy}), seed {seed}: {error!r}")
                    with counts_lock:
                        counts[strategy] = counts.get(strategy, 0) + 1

            threads = [threading.Thread(target=consume) for _ in range(CONSUMERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            self.assertEqual(failures, [], f"seed {seed}")
            log(f"cancel races: {counts}")

            # Every accepted request ended at the broker too, once it settles.
            status = wait_for(lambda: s if (s := client.status()).in_flight == 0 and s.queue_depth == 0 else None,
                              15, "the broker to settle")
            totals = status.totals
            self.assertEqual(totals.accepted, totals.finished + totals.failed + totals.cancelled, totals)
            self.assertEqual(totals.failed, 0, totals)

    # -- Strategies: each returns normally when the rules held, raises AssertionError otherwise.

    def submit(self, client, request_id, rng):
        image = corpus(rng.choice([WITH_DEGRADED, *SMALL_IMAGES]))
        return client.submit(image, width=rng.choice([64, 160, 320]), height=rng.choice([None, 200]),
                             request_id=request_id)

    def assert_only_local_cancel(self, events, request_id, context=""):
        self.assertEqual(events, [LOCAL_CANCEL(request_id, by_this_client=True)], context)

    def run_immediately(self, client, request_id, rng):
        request = self.submit(client, request_id, rng)
        client.cancel(request_id)
        self.assert_only_local_cancel(collect(request), request_id)

    def run_pause(self, client, request_id, rng):
        # Events pile up in the request's queue during the pause; none may come out.
        request = self.submit(client, request_id, rng)
        time.sleep(rng.uniform(0, 0.1))
        client.cancel(request_id)
        self.assert_only_local_cancel(collect(request), request_id)

    def run_after_events(self, client, request_id, rng):
        request = self.submit(client, request_id, rng)
        taken = []
        for _ in range(rng.randint(1, 4)):
            event = request.next_event(timeout=30)
            if event is None:
                break
            taken.append(event)
        client.cancel(request_id)
        rest = collect(request)
        if any(event.terminal for event in taken):
            self.assertEqual(rest, [], f"after the terminal event: {taken}")
        else:
            self.assert_only_local_cancel(rest, request_id, f"after {taken}")
        check_life(self, taken + rest)

    def run_other_thread(self, client, request_id, rng):
        request = self.submit(client, request_id, rng)
        cancelled = threading.Event()

        def cancel_later():
            client.cancel(request_id)
            cancelled.set()  # cancel() has returned

        timer = threading.Timer(rng.uniform(0, 0.1), cancel_later)
        timer.start()
        events, after_cancel = [], []
        while True:
            cancel_had_returned = cancelled.is_set()  # before the step begins
            event = request.next_event(timeout=30)
            if event is None:
                break
            events.append(event)
            if cancel_had_returned:
                after_cancel.append(event)
        timer.join()
        self.assertTrue(all(e == LOCAL_CANCEL(request_id, by_this_client=True) for e in after_cancel),
                        f"delivered after cancel() returned: {after_cancel} (all: {events})")
        check_life(self, events)
        if not isinstance(events[-1], enlarger.Final):
            self.assertEqual(events[-1], LOCAL_CANCEL(request_id, by_this_client=True), events)
        # Later cancels change nothing for a finished iterator.
        client.cancel(request_id)
        self.assertIsNone(request.next_event(timeout=0))

    def run_abandon(self, client, request_id, rng):
        # Leaving the block early cancels; the request then yields nothing more than a local
        # Cancelled, unless it had ended before the block was left.
        image = corpus(rng.choice([WITH_DEGRADED, *SMALL_IMAGES]))
        taken = []
        with client.submit(image, width=rng.choice([64, 160]), request_id=request_id) as request:
            for event in request:
                taken.append(event)
                if len(taken) > rng.randint(0, 3):
                    break
        rest = collect(request)
        if any(event.terminal for event in taken):
            self.assertEqual(rest, [], taken)
        elif rest != [LOCAL_CANCEL(request_id, by_this_client=True)]:
            self.assertTrue(rest and rest[-1].terminal, f"after {taken}: {rest}")
            self.assertNotIsInstance(rest[-1], enlarger.Cancelled, rest)
        check_life(self, taken + rest)

    def run_no_cancel(self, client, request_id, rng):
        events = collect(self.submit(client, request_id, rng))
        check_life(self, events)
        final = events[-1]
        self.assertIsInstance(final, enlarger.Final, events)
        self.assertEqual(jpeg_size(final.data), (final.width, final.height))

    def run_reuse_id(self, client, request_id, rng):
        # The second request waits for the broker's end of the first; no frame of the first
        # may be taken for the second's.
        first = self.submit(client, request_id, rng)
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0, 0.05))
        client.cancel(request_id)
        second = self.submit(client, request_id, rng)
        self.assert_only_local_cancel(collect(first), request_id)
        events = collect(second)
        check_life(self, events)
        self.assertIsInstance(events[0], enlarger.Accepted, events)
        self.assertIsInstance(events[-1], enlarger.Final, events)


if __name__ == "__main__":
    unittest.main()
