"""End to end: deadlines, cancel bookkeeping, duplicates, size limits, a broker that dies or was
never there. Most run against a broker with no workers, so requests stay queued."""

from __future__ import annotations

import os
import tempfile
import time
import unittest

import enlarger

from .support import SMALL_IMAGES, Service, check_life, collect, corpus, wait_for

#: Small enough for queued requests; the broker's input limit sits just above it.
IMAGE = corpus(SMALL_IMAGES[0])
BROKER_LIMIT = len(IMAGE) + 1000


class QueuedRequestsTest(unittest.TestCase):
    """A broker without workers: every accepted request waits in its queue."""

    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=0, heartbeat_ms=200, broker_args=("--max-bytes", str(BROKER_LIMIT))).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def setUp(self):
        self.client = self.service.client(heartbeat_interval=0.25)
        self.addCleanup(self.client.close)

    def test_deadline_exceeded(self):
        before = self.client.status().totals
        start = time.monotonic()
        events = collect(self.client.submit(IMAGE, width=100, timeout=0.3), timeout=5)
        elapsed = time.monotonic() - start
        check_life(self, events)
        self.assertIsInstance(events[0], enlarger.Accepted)
        self.assertEqual(events[0].deadline_ms, 300)
        self.assertIsInstance(events[-1], enlarger.Failed, events)
        self.assertEqual(events[-1].code, enlarger.ErrorCode.DEADLINE_EXCEEDED)
        self.assertGreaterEqual(elapsed, 0.29)
        self.assertLess(elapsed, 3)
        after = self.client.status().totals
        self.assertEqual(after.deadlines_exceeded - before.deadlines_exceeded, 1)
        self.assertEqual(after.failed - before.failed, 1)

    def test_cancel_a_queued_request(self):
        before = self.client.status()
        request = self.client.submit(IMAGE, width=100)
        self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
        self.assertEqual(self.client.status().queue_depth, before.queue_depth + 1)
        outcome = request.cancel().result(timeout=5)
        self.assertEqual(outcome, enlarger.CancelOutcome.CANCELLED)
        self.assertEqual(collect(request), [enlarger.Cancelled(request.id, by_this_client=True)])
        after = self.client.status()
        self.assertEqual(after.totals.cancelled - before.totals.cancelled, 1)
        self.assertEqual(after.queue_depth, before.queue_depth)
        # A second cancel finds it ended; an id nobody used is unknown.
        self.assertEqual(self.client.cancel(request.id).result(5), enlarger.CancelOutcome.FINISHED)
        self.assertEqual(self.client.cancel("never-submitted").result(5), enlarger.CancelOutcome.UNKNOWN)

    def test_cancel_from_another_connection(self):
        request = self.client.submit(IMAGE, width=100)
        self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
        with self.service.client() as other:
            self.assertEqual(other.cancel(request.id).result(5), enlarger.CancelOutcome.CANCELLED)
        self.assertEqual(collect(request), [enlarger.Cancelled(request.id, by_this_client=False)])

    def test_duplicate_ids(self):
        request = self.client.submit(IMAGE, width=100, request_id="dup")
        self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
        # Live in this client: refused before anything is sent.
        with self.assertRaises(enlarger.DuplicateRequestIdError):
            self.client.submit(IMAGE, width=100, request_id="dup")
        # Live through another connection: the broker refuses only the duplicate.
        with self.service.client() as other:
            events = collect(other.submit(IMAGE, width=100, request_id="dup"))
            self.assertEqual(len(events), 1, events)
            self.assertIsInstance(events[0], enlarger.Failed)
            self.assertEqual(events[0].code, enlarger.ErrorCode.DUPLICATE_ID)
        self.assertEqual(self.client.cancel("dup").result(5), enlarger.CancelOutcome.CANCELLED)

    def test_id_reused_right_after_cancel(self):
        first = self.client.submit(IMAGE, width=100, request_id="again")
        self.client.cancel("again")
        second = self.client.submit(IMAGE, width=100, request_id="again")
        self.assertEqual(collect(first), [enlarger.Cancelled("again")])
        # The second waits until the broker has ended the first, then is accepted in its own right.
        self.assertIsInstance(second.next_event(timeout=5), enlarger.Accepted)
        self.assertEqual(self.client.cancel("again").result(5), enlarger.CancelOutcome.CANCELLED)
        self.assertEqual(collect(second), [enlarger.Cancelled("again")])

    def test_oversize_input_refused_locally_with_the_brokers_limit(self):
        # The client pings on connecting; the broker's Pong carries its limit.
        wait_for(lambda: self.client.max_input_bytes == BROKER_LIMIT, 5, "the broker's limit")
        with self.assertRaises(enlarger.InputTooLargeError) as caught:
            self.client.submit(b"\xff\xd8" + bytes(BROKER_LIMIT), width=100)
        self.assertEqual(caught.exception.limit, BROKER_LIMIT)
        self.assertIsInstance(caught.exception, ValueError)
        # Exactly at the limit is allowed (and then queued).
        request = self.client.submit(IMAGE + bytes(BROKER_LIMIT - len(IMAGE)), width=100)
        self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
        request.cancel()

    def test_close_ends_outstanding_requests(self):
        request = self.client.submit(IMAGE, width=100)
        self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
        self.client.close()
        events = collect(request)
        self.assertEqual(len(events), 1, events)
        self.assertEqual(events[0].code, enlarger.ErrorCode.CLIENT_CLOSED)
        with self.assertRaises(enlarger.ClientClosedError):
            self.client.submit(IMAGE, width=100)
        with self.assertRaises(enlarger.ClientClosedError):
            self.client.status()
        with self.assertRaises(enlarger.ClientClosedError):
            self.client.cancel(request.id).result(5)
        self.client.close()  # idempotent


class BrokerDiesTest(unittest.TestCase):
    def test_broker_killed_mid_request_ends_the_request(self):
        with Service(workers=0, heartbeat_ms=200) as service, service.client(heartbeat_interval=0.25) as client:
            request = client.submit(IMAGE, width=100)
            self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
            service.kill_broker()
            start = time.monotonic()
            events = collect(request, timeout=10)
            self.assertLess(time.monotonic() - start, 3)
            self.assertEqual(len(events), 1, events)
            self.assertIsInstance(events[0], enlarger.Failed)
            self.assertEqual(events[0].code, enlarger.ErrorCode.BROKER_LOST)
            self.assertIn(service.endpoint, events[0].message)
            with self.assertRaises(enlarger.BrokerUnreachableError):
                client.status()

    def test_broker_killed_while_a_worker_runs_the_request(self):
        # A 100 MP source resampled to 9000 px wide takes seconds: the broker dies mid-job.
        with Service(workers=1, concurrency=1, heartbeat_ms=200) as service, \
                service.client(heartbeat_interval=0.25) as client:
            request = client.submit(corpus("thumbor_9643x10328.jpg"), width=9000, degraded=False)
            self.assertIsInstance(request.next_event(timeout=5), enlarger.Accepted)
            self.assertIsInstance(request.next_event(timeout=5), enlarger.Started)
            service.kill_broker()
            events = collect(request, timeout=10)
            self.assertEqual([type(e) for e in events], [enlarger.Failed], events)
            self.assertEqual(events[0].code, enlarger.ErrorCode.BROKER_LOST)


class NoBrokerTest(unittest.TestCase):
    def setUp(self):
        directory = tempfile.mkdtemp(prefix="enl-py-")
        self.addCleanup(os.rmdir, directory)
        self.endpoint = f"ipc://{directory}/clients.sock"

    def test_request_to_an_unreachable_broker_fails_naming_the_endpoint(self):
        with enlarger.Client(self.endpoint, heartbeat_interval=0.2) as client:
            start = time.monotonic()
            events = collect(client.submit(IMAGE, width=100), timeout=5)
            self.assertLess(time.monotonic() - start, 2)
            self.assertEqual(len(events), 1, events)
            self.assertEqual(events[0].code, enlarger.ErrorCode.BROKER_UNREACHABLE)
            self.assertIn(self.endpoint, events[0].message)
            with self.assertRaises(enlarger.BrokerUnreachableError) as caught:
                client.status()
            self.assertIn(self.endpoint, str(caught.exception))
            self.assertIsInstance(caught.exception, ConnectionError)

    def test_local_deadline_when_the_broker_cannot_say(self):
        with enlarger.Client(self.endpoint, heartbeat_interval=0.5, missed_heartbeats=10) as client:
            events = collect(client.submit(IMAGE, width=100, timeout=0.1), timeout=5)
            self.assertEqual(len(events), 1, events)
            self.assertEqual(events[0].code, enlarger.ErrorCode.DEADLINE_EXCEEDED)

    def test_configured_limit_applies_until_the_broker_tells_its_own(self):
        with enlarger.Client(self.endpoint, max_input_bytes=1000) as client:
            self.assertEqual(client.max_input_bytes, 1000)
            with self.assertRaises(enlarger.InputTooLargeError):
                client.submit(bytes(1001), width=10)

    def test_status_timeout(self):
        with enlarger.Client(self.endpoint, heartbeat_interval=5) as client:
            with self.assertRaises(TimeoutError):
                client.status(timeout=0.1)


if __name__ == "__main__":
    unittest.main()
