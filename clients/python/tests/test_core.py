"""The client core and the request channel without sockets or threads: a hand-made clock and
hand-made broker messages."""

from __future__ import annotations

import unittest

import enlarger
from enlarger._proto import client_pb2, common_pb2
from enlarger.core import (AnswerCancel, AnswerStatus, CallFailure, ClientCore, Configuration, Deliver,
                           Reconnect)
from enlarger.request import _Channel

CONFIG = Configuration(heartbeat_interval=1.0, missed_heartbeats=3, sync_interval=2.0, max_input_bytes=1000,
                       endpoint="ipc:///run/enlarger/clients.sock")
INSTANCE = 77


def submit_header(request_id: str, deadline_ms: int = 0) -> client_pb2.Submit:
    submit = client_pb2.Submit(request_id=request_id, deadline_ms=deadline_ms)
    submit.spec.width = 10
    return submit


def broker(kind: str, **fields) -> tuple[client_pb2.BrokerToClient, str]:
    message = client_pb2.BrokerToClient()
    getattr(message, kind).SetInParent()
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(getattr(message, kind), name).extend(value)
        else:
            setattr(getattr(message, kind), name, value)
    return message, kind


class CoreHarness:
    """A core, its clock, and a socket that takes everything."""

    def __init__(self, configuration: Configuration = CONFIG) -> None:
        self.now = 100.0
        self.core = ClientCore(configuration, self.now)
        self.sent: list[client_pb2.ClientToBroker] = []

    def flush(self) -> list[str]:
        kinds = []
        while (outgoing := self.core.next_message()) is not None:
            self.sent.append(outgoing.message)
            kinds.append(outgoing.message.WhichOneof("kind"))
            self.core.message_sent(self.now)
        return kinds

    def receive(self, kind: str, payload: bytes | None = None, **fields) -> list:
        message, kind = broker(kind, **fields)
        return self.core.received(message, kind, payload, self.now)

    def advance(self, seconds: float) -> list:
        self.now += seconds
        return self.core.tick(self.now)

    def accept(self, request_id: str, instance: int = INSTANCE, interval_ms: int = 1000) -> list:
        return self.receive("accepted", request_id=request_id, broker_instance=instance,
                            heartbeat_interval_ms=interval_ms, deadline_ms=300_000)

    def result(self, request_id: str, stage: int, terminal: bool, payload: bytes = b"\xff\xd8img") -> list:
        return self.receive("result", payload, request_id=request_id, stage=stage, width=4, height=3,
                            format=common_pb2.IMAGE_FORMAT_JPEG, terminal=terminal)


def events(actions) -> list:
    return [(a.token, a.event, a.terminal) for a in actions if isinstance(a, Deliver)]


class CoreTest(unittest.TestCase):
    def setUp(self):
        self.h = CoreHarness()
        self.assertEqual(self.h.flush(), ["ping"], "a fresh connection pings once")

    def test_the_digest_flag_follows_the_latest_accepted(self):
        h = self.h
        self.assertFalse(h.core.digests_unused, "unknown until a broker says: digests are sent")
        for token, (request_id, unused) in enumerate((("a", True), ("b", True), ("c", False)), start=1):
            h.core.submit(token, submit_header(request_id), b"\xff\xd8", h.now)
            h.flush()
            h.receive("accepted", request_id=request_id, broker_instance=INSTANCE, digests_unused=unused)
            self.assertEqual(h.core.digests_unused, unused, request_id)

    def test_a_request_from_submit_to_final(self):
        h = self.h
        self.assertEqual(h.core.submit(1, submit_header("a"), b"\xff\xd8", h.now), [])
        self.assertEqual(h.flush(), ["submit"])
        self.assertEqual(events(h.accept("a")), [(1, enlarger.Accepted("a", 300_000, INSTANCE), False)])
        self.assertEqual(events(h.receive("started", request_id="a", attempt=1)), [(1, enlarger.Started("a", 1), False)])
        (token, degraded, terminal), = events(h.result("a", common_pb2.STAGE_DEGRADED, False))
        self.assertIsInstance(degraded, enlarger.Degraded)
        self.assertEqual((degraded.width, degraded.height, degraded.data, terminal), (4, 3, b"\xff\xd8img", False))
        # A second degraded (a retry's) is never delivered.
        self.assertEqual(events(h.result("a", common_pb2.STAGE_DEGRADED, False)), [])
        (_, final, terminal), = events(h.result("a", common_pb2.STAGE_FINAL, True))
        self.assertIsInstance(final, enlarger.Final)
        self.assertTrue(terminal)
        # Nothing follows the terminal event, and the client is idle again.
        self.assertEqual(events(h.result("a", common_pb2.STAGE_FINAL, True)), [])
        self.assertTrue(h.core.is_idle)
        self.assertIsNone(h.core.next_wakeup())

    def test_download_steps_come_before_the_results_and_never_after_the_end(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"", h.now)
        h.flush()
        self.assertEqual(events(h.receive("download", request_id="a", phase=common_pb2.DOWNLOAD_PHASE_STARTED)), [],
                         "not accepted yet: about another request with the id")
        h.accept("a")
        (_, started, terminal), = events(h.receive("download", request_id="a", phase=common_pb2.DOWNLOAD_PHASE_STARTED,
                                                   expected_bytes=1000))
        self.assertEqual((started, terminal), (enlarger.Download("a", "started", 0, 1000), False))
        (_, progress, _), = events(h.receive("download", request_id="a", phase=common_pb2.DOWNLOAD_PHASE_PROGRESS,
                                             bytes=400))
        self.assertEqual(progress, enlarger.Download("a", "progress", 400, None), "no Content-Length: None")
        self.assertEqual(events(h.receive("download", request_id="a", phase=99)), [], "an unknown phase is skipped")
        h.result("a", common_pb2.STAGE_FINAL, True)
        self.assertEqual(events(h.receive("download", request_id="a", phase=common_pb2.DOWNLOAD_PHASE_FINISHED)), [])

    def test_frames_about_an_unaccepted_id_are_dropped(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        # Another connection's request with the id, moved here by a Sync, talks first.
        self.assertEqual(events(h.receive("started", request_id="a", attempt=1)), [])
        self.assertEqual(events(h.result("a", common_pb2.STAGE_FINAL, True)), [])
        self.assertEqual(events(h.receive("failed", request_id="a", code=common_pb2.ERROR_CODE_CORRUPT)), [])
        # The answers to the Submit do count.
        (_, failed, _), = events(h.receive("failed", request_id="a", code=common_pb2.ERROR_CODE_DUPLICATE_ID,
                                           message="live"))
        self.assertEqual(failed, enlarger.Failed("a", enlarger.ErrorCode.DUPLICATE_ID, "live"))

    def test_a_cancelled_request_absorbs_late_frames_and_a_reused_id_waits(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        h.accept("a")
        self.assertEqual(h.core.cancel("a", 10, h.now), [])
        h.core.submit(2, submit_header("a"), b"y", h.now)
        self.assertEqual(h.flush(), ["cancel"], "the second Submit waits for the first's end")
        # Late results of the first are the first's (whose channel drops them), never the second's.
        self.assertEqual([token for token, _, _ in events(h.result("a", common_pb2.STAGE_DEGRADED, False))], [1])
        actions = h.receive("cancelled", request_id="a")
        self.assertEqual(events(actions), [(1, enlarger.Cancelled("a", by_this_client=False), True)])
        self.assertEqual(h.flush(), ["submit"], "the first ended: the second goes out")
        actions = h.receive("cancel_ack", request_id="a", outcome=client_pb2.CancelAck.OUTCOME_CANCELLED)
        self.assertEqual(actions, [AnswerCancel(10, enlarger.CancelOutcome.CANCELLED)])
        self.assertEqual(events(h.accept("a")), [(2, enlarger.Accepted("a", 300_000, INSTANCE), False)])

    def test_cancel_ends_requests_waiting_behind_the_one_on_the_wire(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        h.core.cancel("a", None, h.now)
        h.core.submit(2, submit_header("a"), b"y", h.now)
        actions = h.core.cancel("a", None, h.now)
        self.assertEqual(events(actions), [(2, enlarger.Cancelled("a"), True)])
        self.assertEqual(h.flush(), ["cancel", "cancel"])
        # The broker never accepted the first: it answers only the Cancels.
        h.receive("rejected", request_id="a", code=common_pb2.ERROR_CODE_OVERLOADED)
        h.receive("cancel_ack", request_id="a", outcome=client_pb2.CancelAck.OUTCOME_UNKNOWN)
        h.receive("cancel_ack", request_id="a", outcome=client_pb2.CancelAck.OUTCOME_UNKNOWN)
        self.assertTrue(h.core.is_idle)

    def test_unreachable_then_reconnect(self):
        h = CoreHarness()
        h.core.submit(1, submit_header("a"), b"x", h.now)
        # The socket takes nothing (no broker connected).
        self.assertEqual(h.core.next_wakeup(), h.now + 3.0)
        self.assertEqual(h.advance(2.9), [])
        actions = h.advance(0.1)
        (token, failed, terminal), = events(actions)
        self.assertEqual(failed.code, enlarger.ErrorCode.BROKER_UNREACHABLE)
        self.assertIn("ipc:///run/enlarger/clients.sock", failed.message)
        self.assertIn(Reconnect(), actions)
        self.assertEqual(h.flush(), ["ping"], "the new connection pings first")

    def test_broker_lost_after_silence(self):
        h = self.h
        h.receive("pong", heartbeat_interval_ms=500, broker_instance=INSTANCE, max_input_bytes=2000)
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        h.accept("a", interval_ms=500)
        # The client pings at the broker's shorter interval.
        self.assertEqual(h.core.next_wakeup(), h.now + 0.5)
        h.advance(0.5)
        self.assertEqual(h.flush(), ["ping"])
        h.advance(2.4)
        actions = h.advance(0.1)
        (_, failed, _), = events(actions)
        self.assertEqual(failed.code, enlarger.ErrorCode.BROKER_LOST)
        self.assertIn(Reconnect(), actions)

    def test_status_fails_with_the_connection(self):
        h = CoreHarness()
        h.core.status(5, h.now)
        actions = h.advance(3.0)
        answer, = [a for a in actions if isinstance(a, AnswerStatus)]
        self.assertEqual(answer.status.code, enlarger.ErrorCode.BROKER_UNREACHABLE)

    def test_local_deadline(self):
        h = self.h
        h.core.submit(1, submit_header("a", deadline_ms=200), b"x", h.now)
        h.flush()
        h.accept("a")
        h.advance(0.5)
        h.receive("pong")
        actions = h.advance(0.7)  # 0.2 s + one heartbeat interval
        self.assertEqual(events(actions), [(1, enlarger.Failed("a", enlarger.ErrorCode.DEADLINE_EXCEEDED,
                                                                "no end heard from the broker within the request's timeout"),
                                            True)])
        self.assertEqual(h.flush(), ["cancel"], "the broker is asked to stop it")
        # Its late end is absorbed.
        self.assertEqual(events(h.receive("failed", request_id="a", code=common_pb2.ERROR_CODE_DEADLINE_EXCEEDED)), [])

    def test_sync_fails_lost_requests(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.core.submit(2, submit_header("b"), b"x", h.now)
        h.flush()
        h.accept("a")
        h.accept("b")
        h.advance(1.0)
        self.assertEqual(h.flush(), ["ping"])
        h.receive("pong", broker_instance=INSTANCE)
        h.advance(1.0)
        self.assertEqual(h.flush(), ["sync"], "a Sync is a sign of life too: no Ping besides")
        sync = h.sent[-1].sync
        self.assertEqual(list(sync.request_ids), ["a", "b"])
        actions = h.receive("sync_reply", nonce=sync.nonce, unknown_request_ids=["b"], broker_instance=INSTANCE)
        (token, failed, _), = events(actions)
        self.assertEqual((token, failed.code), (2, enlarger.ErrorCode.REQUEST_LOST))

    def test_broker_restart_resubmits_for_the_final_only(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        h.accept("a")
        h.result("a", common_pb2.STAGE_DEGRADED, False)
        h.receive("pong", broker_instance=INSTANCE + 1)  # a new broker on the endpoint
        h.advance(0)
        self.assertEqual(h.flush(), ["sync"], "the new instance is asked at once")
        sync = h.sent[-1].sync
        h.receive("sync_reply", nonce=sync.nonce, unknown_request_ids=["a"], broker_instance=INSTANCE + 1)
        self.assertEqual(h.flush(), ["submit"])
        self.assertEqual(h.sent[-1].submit.delivery, common_pb2.DELIVERY_FINAL)
        self.assertEqual(events(h.accept("a", INSTANCE + 1)), [], "announced once only")
        (_, final, terminal), = events(h.result("a", common_pb2.STAGE_FINAL, True))
        self.assertIsInstance(final, enlarger.Final)

    def test_oversize_input_refused_with_the_brokers_limit(self):
        h = self.h
        h.receive("pong", max_input_bytes=10)
        self.assertEqual(h.core.max_input_bytes, 10)
        (_, rejected, terminal), = events(h.core.submit(1, submit_header("a"), bytes(11), h.now))
        self.assertEqual(rejected.code, enlarger.ErrorCode.TOO_LARGE)
        self.assertEqual(h.flush(), [])

    def test_a_broken_result_ends_the_request(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.flush()
        h.accept("a")
        (_, failed, _), = events(h.result("a", common_pb2.STAGE_FINAL, False))
        self.assertEqual(failed.code, enlarger.ErrorCode.MALFORMED)

    def test_close_fails_everything(self):
        h = self.h
        h.core.submit(1, submit_header("a"), b"x", h.now)
        h.core.status(2, h.now)
        actions = h.core.close(enlarger.ErrorCode.CLIENT_CLOSED, "closed")
        self.assertEqual(actions, [Deliver(1, enlarger.Failed("a", enlarger.ErrorCode.CLIENT_CLOSED, "closed"), True),
                                   AnswerStatus(2, CallFailure(enlarger.ErrorCode.CLIENT_CLOSED, "closed"))])
        self.assertIsNone(h.core.next_message())


class ChannelTest(unittest.TestCase):
    def test_cancel_drops_queued_events(self):
        channel = _Channel("a")
        channel.deliver(enlarger.Accepted("a"), False)
        channel.deliver(enlarger.Final("a", b"img"), True)
        channel.cancel()
        self.assertEqual(channel.take(0), enlarger.Cancelled("a", by_this_client=True))
        self.assertIsNone(channel.take(0))
        channel.deliver(enlarger.Started("a"), False)
        self.assertIsNone(channel.take(0))

    def test_cancel_after_the_terminal_event_was_taken_yields_nothing(self):
        channel = _Channel("a")
        channel.deliver(enlarger.Failed("a", enlarger.ErrorCode.CORRUPT), True)
        channel.deliver(enlarger.Final("a", b"img"), True)  # after the terminal: never queued
        self.assertEqual(channel.take(0).code, enlarger.ErrorCode.CORRUPT)
        channel.cancel()
        self.assertIsNone(channel.take(0))

    def test_take_times_out(self):
        with self.assertRaises(TimeoutError):
            _Channel("a").take(0.01)


if __name__ == "__main__":
    unittest.main()
