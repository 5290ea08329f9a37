"""The client's protocol decisions as a pure state machine: no sockets, no clock, no threads.

Feed it what happened — a caller's command (`submit`, `cancel`, `status`), a message from
the broker (`received`), the socket taking the next message (`message_sent`), the time
(`tick`) — and it returns the actions to perform, in order. What it wants sent waits in its
outbox until the socket takes it (`next_message`, then `message_sent`). The I/O loop
(`enlarger._loop`) is the poll-and-perform loop around it; tests drive it with a hand-made
clock. It follows the Swift client's core (Sources/Enlarger/ClientCore*.swift) rule for rule:

- **One end per request.** Every request gets exactly one terminal `Deliver` and nothing
  after it.
- **One request per id on the wire.** A request whose id still belongs to an earlier one of
  this client (cancelled, timed out, or given up with a silent connection, the broker's end
  not heard yet) waits, unsent, until that end is heard: so a frame about an id belongs to
  the one request the broker can be talking about. Since the broker accepts a request
  before it says anything else about it, a frame about an id whose request has not been
  accepted is about another one (another connection of the same principal): it is dropped.
- **Degraded, then final.** A degraded result is delivered at most once, and only before
  the final one.
- **Liveness.** While anything is outstanding, the broker must be heard at least once per
  `missed_heartbeats` heartbeat intervals, counted from its last message or from when the
  wait began; otherwise everything outstanding fails (`BROKER_LOST`, or
  `BROKER_UNREACHABLE` when nothing was heard on the connection) and the loop connects
  afresh. A Ping goes out whenever the client has been quiet for its heartbeat interval, or
  the broker's if that is shorter (from Accepted or Pong). One Ping also goes out as soon as
  a connection is made, to learn the broker's limits early.
- **Sync.** Every `sync_interval`, while anything the socket took waits for an answer, the
  broker is asked which of the requests it holds: the others fail `REQUEST_LOST`. Calls
  whose answer should have come before the Sync's reply were lost with a reset connection:
  a status call is asked again, and so is a cancel unless a later request with the id is on
  the wire; that one fails `REQUEST_LOST`.
- **Timeouts.** A request with a timeout fails `DEADLINE_EXCEEDED` one heartbeat interval
  after it, should the broker not have ended it by then; the broker is asked to cancel it,
  and its late frames are absorbed until the broker's end.
- **Size.** An image over the broker's limit (from its Pong, else the configured one) is
  refused before it is sent: libzmq would drop the whole connection for it.
- **Broker restarts.** When a new broker instance shows, a Sync asks it at once which
  requests it holds; those it does not, sent to an older instance, are submitted again (one
  whose degraded result was delivered asks for the final one only). With
  `resubmit_after_broker_restart` off, everything outstanding fails `BROKER_LOST`.

**Strict cancel is not decided here.** `Client.cancel()` marks the request's channel before
the core hears of it, and the channel alone decides what reaches the consumer. The core
sends the Cancel, keeps the request until the broker's end of it is heard (so its late frames
are not taken for a later request with the same id), and never submits it again.

Not thread-safe: one thread (the loop's) owns it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Union

from ._proto import client_pb2, common_pb2
from .codes import CancelOutcome, ErrorCode, ImageFormat
from .events import (Accepted, BrokerStatus, Cancelled, Degraded, Download, Event, Failed, Final, ImageInfo, Info,
                     Placeholder, Rejected, Started)
from .wire import MAX_SYNC_REQUEST_IDS

_DOWNLOAD_PHASES = {
    common_pb2.DOWNLOAD_PHASE_STARTED: "started",
    common_pb2.DOWNLOAD_PHASE_PROGRESS: "progress",
    common_pb2.DOWNLOAD_PHASE_FINISHED: "finished",
}


# ---------------------------------------------------------------------------------------
# Actions


class Deliver(NamedTuple):
    """Hand `event` to the request's consumer; when `terminal`, it is the last one."""

    token: int
    event: Event
    terminal: bool


class CallFailure(NamedTuple):
    """Why a call got no answer."""

    code: ErrorCode
    message: str


class AnswerCancel(NamedTuple):
    token: int
    outcome: Union[CancelOutcome, CallFailure]


class AnswerStatus(NamedTuple):
    token: int
    status: Union[BrokerStatus, CallFailure]


class Reconnect(NamedTuple):
    """Close the socket, dropping whatever it has not sent, and connect a fresh one: nothing
    from the old conversation may reach later requests."""


Action = Union[Deliver, AnswerCancel, AnswerStatus, Reconnect]


# ---------------------------------------------------------------------------------------
# State


@dataclass(frozen=True)
class Configuration:
    #: Seconds between Pings while anything is outstanding.
    heartbeat_interval: float = 1.0
    #: Intervals without a word from the broker after which it is presumed gone.
    missed_heartbeats: int = 3
    #: Seconds between Syncs while anything sent waits for an answer.
    sync_interval: float = 2.0
    resubmit_after_broker_restart: bool = True
    #: The input limit until the broker's own is known.
    max_input_bytes: int = 64 << 20
    #: Named in error messages only.
    endpoint: str = ""

    @property
    def silence_limit(self) -> float:
        return self.heartbeat_interval * self.missed_heartbeats


@dataclass
class _Route:
    """One submitted request, from its Submit until the broker's end of it is heard."""

    token: int
    #: Submission order, kept when the request is submitted again.
    order: int
    submit: client_pb2.Submit
    image: bytes
    #: When the client stops waiting for the broker's end.
    deadline: float | None
    #: `send_serial` when the socket took its Submit; None while it waits.
    sent_serial: int | None = None
    #: The broker accepted this submission of it; until then a frame about the id other than
    #: the answer to the Submit is about another request.
    accepted: bool = False
    #: The consumer was told Accepted (once: a resubmission is not announced again).
    announced: bool = False
    #: The broker instance believed to hold it.
    instance: int | None = None
    degraded_delivered: bool = False
    placeholder_delivered: bool = False
    #: The caller cancelled it: it is never submitted again.
    cancelled: bool = False
    #: Its terminal action was given already (local deadline, or connection given up).
    ended: bool = False

    @property
    def request_id(self) -> str:
        return self.submit.request_id


@dataclass
class _Call:
    """A Cancel or a StatusRequest waiting for the broker's answer."""

    #: Who waits; None for a cancel nobody waits for.
    token: int | None
    sent_serial: int | None = None

    @property
    def order(self) -> float:
        return float("inf") if self.token is None else self.token


@dataclass
class _Outgoing:
    """A message in the outbox, and what to note when the socket takes it."""

    message: client_pb2.ClientToBroker
    payload: bytes | None
    #: ("route", id, token) | ("cancel", id) | ("status",) | ("sync", nonce) | ("ping",)
    note: tuple[Any, ...]
    #: The loop's encoded frames, kept so that a message the socket refused is not encoded again.
    frames: list[bytes] | None = field(default=None, repr=False)


def _ping() -> _Outgoing:
    message = client_pb2.ClientToBroker()
    message.ping.SetInParent()
    return _Outgoing(message, None, ("ping",))


class _DeadlineHeap:
    """Tokens by deadline; removal is lazy (a popped entry must match the live map)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self._live: dict[int, float] = {}

    def insert(self, token: int, deadline: float) -> None:
        self._live[token] = deadline
        heapq.heappush(self._heap, (deadline, token))

    def remove(self, token: int) -> None:
        self._live.pop(token, None)

    def clear(self) -> None:
        self._heap.clear()
        self._live.clear()

    def _drop_stale(self) -> None:
        while self._heap and self._live.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)

    @property
    def earliest(self) -> float | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self, now: float) -> int | None:
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now:
            return None
        _, token = heapq.heappop(self._heap)
        del self._live[token]
        return token


class ClientCore:
    """See the module's notes. `now` is any monotonic clock in seconds."""

    def __init__(self, configuration: Configuration, now: float) -> None:
        self.configuration = configuration
        # A route's list per id, in submission order: the first is on the wire, the others
        # wait for it to end.
        self.routes: dict[str, list[_Route]] = {}
        self.route_ids: dict[int, str] = {}
        self.deadlines = _DeadlineHeap()
        self._orders = itertools.count(1)
        self.outbox: deque[_Outgoing] = deque()
        self.cancel_calls: dict[str, list[_Call]] = {}
        self.status_calls: list[_Call] = []
        #: Routes and calls taken by the socket and not answered yet: a Sync is due only
        #: while there are some.
        self.awaiting_answer = 0
        #: Numbers the messages the socket takes, so that a SyncReply is judged against
        #: exactly what went out before its Sync.
        self.send_serial = 0
        #: Syncs sent and not answered: nonce -> the serial they went out at.
        self.pending_syncs: dict[int, int] = {}
        self._sync_nonces = itertools.count(1)
        self.last_sync = now
        # Liveness.
        self.heard_on_connection = False
        self.last_heard = now
        #: Since when something has been outstanding; None while idle.
        self.busy_since: float | None = None
        self.last_sent = now
        #: The broker's heartbeat interval from Accepted or Pong (seconds).
        self.broker_interval: float | None = None
        self.broker_instance: int | None = None
        self.broker_max_input_bytes: int | None = None
        #: Whether the latest Accepted said that the broker neither caches nor shares: an
        #: inline digest would then be computed for nothing, and Submits go without one.
        self.digests_unused = False
        #: The first Ping on a fresh connection, not yet taken by the socket. It does not make
        #: the client busy: an idle client with no broker simply waits.
        self.hello_due = True
        self._hello = _ping()
        #: What the loop last saw go wrong on the connection (a failed handshake), for the
        #: BROKER_UNREACHABLE message.
        self.connection_note: str | None = None
        self.closed = False

    # -- Introspection ------------------------------------------------------------------

    def next_message(self) -> _Outgoing | None:
        """The message the socket should take next, if any; once it has, call `message_sent`."""
        if self.outbox:
            return self.outbox[0]
        if self.hello_due and not self.closed:
            return self._hello
        return None

    @property
    def is_idle(self) -> bool:
        return not (self.routes or self.outbox or self.cancel_calls or self.status_calls)

    @property
    def max_input_bytes(self) -> int:
        return self.broker_max_input_bytes or self.configuration.max_input_bytes

    @property
    def ping_interval(self) -> float:
        own = self.configuration.heartbeat_interval
        return min(own, self.broker_interval) if self.broker_interval else own

    def next_wakeup(self) -> float | None:
        """The earliest time `tick` has something to do; None while idle."""
        if self.busy_since is None or self.closed:
            return None
        wakeup = max(self.busy_since, self.last_heard) + self.configuration.silence_limit
        earliest = self.deadlines.earliest
        if earliest is not None:
            wakeup = min(wakeup, earliest)
        # While messages wait, the socket's writability is what matters, not Pings or Syncs.
        if not self.outbox:
            wakeup = min(wakeup, self.last_sent + self.ping_interval)
            if self.awaiting_answer > 0:
                wakeup = min(wakeup, self.last_sync + self.configuration.sync_interval)
        return wakeup

    # -- Commands from callers ----------------------------------------------------------

    def submit(self, token: int, submit: client_pb2.Submit, image: bytes, now: float) -> list[Action]:
        """A caller submitted a request (already validated)."""
        if token in self.route_ids:
            raise AssertionError(f"request #{token} submitted twice")
        request_id = submit.request_id
        if self.closed:
            return [Deliver(token, Failed(request_id, ErrorCode.CLIENT_CLOSED, "the client is closed"), True)]
        limit = self.max_input_bytes
        if len(image) > limit:
            # Sent anyway, an oversize frame would make libzmq drop the connection.
            return [Deliver(token, Rejected(request_id, ErrorCode.TOO_LARGE,
                                            f"input of {len(image)} bytes exceeds the broker's limit of {limit}"),
                            True)]
        deadline = None
        if submit.deadline_ms:
            deadline = now + submit.deadline_ms / 1000 + self.configuration.heartbeat_interval
        waits = request_id in self.routes
        self.routes.setdefault(request_id, []).append(
            _Route(token=token, order=next(self._orders), submit=submit, image=image, deadline=deadline))
        self.route_ids[token] = request_id
        if deadline is not None:
            self.deadlines.insert(token, deadline)
        if not waits:
            self._queue_submit(request_id)
        self._note_busy(now)
        return []

    def cancel(self, request_id: str, waiter: int | None, now: float) -> list[Action]:
        """A caller cancelled `request_id` (its channels are marked already). `waiter`, if
        any, gets the broker's answer."""
        if self.closed:
            return [] if waiter is None else [AnswerCancel(waiter, CallFailure(ErrorCode.CLIENT_CLOSED,
                                                                               "the client is closed"))]
        actions: list[Action] = []
        routes = self.routes.get(request_id)
        if routes:
            routes[0].cancelled = True
            # The ones waiting behind it were never sent: they simply end.
            while len(routes) > 1:
                actions.append(Deliver(routes[1].token, Cancelled(request_id, by_this_client=True), True))
                self._remove_route(request_id, 1)
        self._queue_cancel(request_id, _Call(waiter))
        self._note_busy(now)
        return actions

    def status(self, waiter: int, now: float) -> list[Action]:
        if self.closed:
            return [AnswerStatus(waiter, CallFailure(ErrorCode.CLIENT_CLOSED, "the client is closed"))]
        self.status_calls.append(_Call(waiter))
        message = client_pb2.ClientToBroker()
        message.status_request.SetInParent()
        self.outbox.append(_Outgoing(message, None, ("status",)))
        self._note_busy(now)
        return []

    def close(self, code: ErrorCode, message: str) -> list[Action]:
        """The client is closing (or its socket failed): everything outstanding fails, and
        every later command fails CLIENT_CLOSED."""
        if self.closed:
            return []
        actions: list[Action] = []
        self._fail_all(code, message, actions)
        self.closed = True
        self.busy_since = None
        return actions

    # -- The socket -----------------------------------------------------------------------

    def message_sent(self, now: float) -> None:
        """The socket took `next_message()`."""
        if not self.outbox:
            if not self.hello_due:
                raise AssertionError("message_sent with nothing to send")
            self.hello_due = False
            self.send_serial += 1
            self.last_sent = now
            return
        sent = self.outbox.popleft()
        self.send_serial += 1
        self.last_sent = now
        kind = sent.note[0]
        if kind == "route":
            _, request_id, token = sent.note
            route = next((r for r in self.routes.get(request_id, ()) if r.token == token), None)
            if route is not None:
                route.sent_serial = self.send_serial
                route.instance = self.broker_instance
                self.awaiting_answer += 1
        elif kind == "cancel":
            call = next((c for c in self.cancel_calls.get(sent.note[1], ()) if c.sent_serial is None), None)
            if call is not None:
                call.sent_serial = self.send_serial
                self.awaiting_answer += 1
        elif kind == "status":
            call = next((c for c in self.status_calls if c.sent_serial is None), None)
            if call is not None:
                call.sent_serial = self.send_serial
                self.awaiting_answer += 1
        elif kind == "sync":
            self.pending_syncs[sent.note[1]] = self.send_serial
        self._note_busy(now)

    # -- Time -----------------------------------------------------------------------------
    #
    # Nothing happens while idle. While anything is outstanding, `tick` judges the broker's
    # silence first (past the limit, everything outstanding fails and the loop connects
    # afresh), then ends the requests whose local deadline passed, then asks for a Sync and a
    # Ping when due. Syncs and Pings wait until the outbox is empty: while messages wait for
    # the socket, another one would only queue behind them.

    def tick(self, now: float) -> list[Action]:
        """Time passed. Call after every wakeup; nothing is due before `next_wakeup()`."""
        self._note_busy(now)
        if self.busy_since is None or self.closed:
            return []
        actions: list[Action] = []
        if now >= max(self.busy_since, self.last_heard) + self.configuration.silence_limit:
            if self.heard_on_connection:
                self._start_over(ErrorCode.BROKER_LOST, actions)
            else:
                self._start_over(ErrorCode.BROKER_UNREACHABLE, actions)
            self._note_busy(now)
            return actions
        self._expire_deadlines(now, actions)
        if not self.outbox and self.awaiting_answer > 0 and now >= self.last_sync + self.configuration.sync_interval:
            self._queue_sync(now)
        if not self.outbox and now >= self.last_sent + self.ping_interval:
            self.outbox.append(_ping())
        self._note_busy(now)
        return actions

    def _expire_deadlines(self, now: float, actions: list[Action]) -> None:
        # The broker would have sent DEADLINE_EXCEEDED itself, had it been reachable. It is
        # asked to cancel the request in case it still works on it, and the route stays,
        # ended, to absorb its frames until its end is heard.
        while (token := self.deadlines.pop_expired(now)) is not None:
            request_id = self.route_ids.get(token)
            if request_id is None:
                continue
            routes = self.routes.get(request_id, [])
            index = next((i for i, r in enumerate(routes) if r.token == token), None)
            if index is None:
                continue
            actions.append(Deliver(token, Failed(request_id, ErrorCode.DEADLINE_EXCEEDED,
                                                 "no end heard from the broker within the request's timeout"), True))
            if index != 0:  # never sent
                self._remove_route(request_id, index)
                continue
            route = routes[0]
            route.ended = True
            route.deadline = None
            # A request the caller cancelled has its Cancel on the way already.
            if not route.cancelled:
                self._queue_cancel(request_id, _Call(None))

    def _queue_sync(self, now: float) -> None:
        """Asks the broker which of the requests sent so far it still holds (an empty Sync
        when only calls wait: its reply shows which answers were lost)."""
        self.last_sync = now
        ids = sorted(rid for rid, routes in self.routes.items() if any(r.sent_serial is not None for r in routes))
        start = 0
        while True:
            chunk = ids[start:start + MAX_SYNC_REQUEST_IDS]
            start += len(chunk)
            message = client_pb2.ClientToBroker()
            message.sync.request_ids.extend(chunk)
            nonce = next(self._sync_nonces)
            message.sync.nonce = nonce
            self.outbox.append(_Outgoing(message, None, ("sync", nonce)))
            if start >= len(ids):
                break

    # -- Broker restarts and lost connections -------------------------------------------
    #
    # A broker that restarted on the same endpoint has forgotten every request sent to it.
    # The client learns of it from the first message carrying the new instance number
    # (Accepted, Pong, SyncReply) and asks the new instance at once, with a Sync, which it
    # holds; the others are submitted again when the reply comes (see `_sync_reply`).

    def _note_broker_instance(self, instance: int, now: float, actions: list[Action]) -> None:
        if instance == 0:  # a broker that does not say
            return
        if self.broker_instance is not None and self.broker_instance != instance:
            if self.configuration.resubmit_after_broker_restart:
                self.last_sync = now - self.configuration.sync_interval  # a Sync is due at once
            else:
                self._start_over(ErrorCode.BROKER_LOST, actions)
        self.broker_instance = instance

    def _start_over(self, code: ErrorCode, actions: list[Action]) -> None:
        """Fails everything outstanding and has the loop connect afresh.

        A broker that fell silent may only have paused and still hold the requests sent to
        it; those would talk to the new connection as soon as a Sync names their ids. So each
        stays, ended, to absorb what the broker says about it until a Sync reply settles it,
        and a later request with its id waits for that.
        """
        carried = [routes[0] for routes in self.routes.values() if routes[0].sent_serial is not None]
        self._fail_all(code, self._failure_message(code), actions)
        for route in carried:
            route.ended = True
            route.deadline = None
            route.sent_serial = 0  # as if sent before anything on the new connection
            self.routes[route.request_id] = [route]
            self.route_ids[route.token] = route.request_id
            self.awaiting_answer += 1
        actions.append(Reconnect())
        self.heard_on_connection = False
        self.busy_since = None
        self.broker_instance = None
        self.hello_due = True

    def _failure_message(self, code: ErrorCode) -> str:
        endpoint = self.configuration.endpoint or "the endpoint"
        limit = self.configuration.silence_limit
        if code is ErrorCode.BROKER_UNREACHABLE:
            message = f"no broker answered at {endpoint} within {limit:g} s"
            if self.connection_note:
                message += f"; {self.connection_note}"
            return message
        if code is ErrorCode.BROKER_LOST:
            return f"the broker at {endpoint} fell silent for {limit:g} s, or restarted"
        return code.name.lower().replace("_", " ")

    def _fail_all(self, code: ErrorCode, message: str, actions: list[Action]) -> None:
        """Fails every request and waiting call, in the order they were made, and forgets them."""
        for route in sorted((r for routes in self.routes.values() for r in routes), key=lambda r: r.order):
            if not route.ended:
                actions.append(Deliver(route.token, Failed(route.request_id, code, message), True))
        self.routes.clear()
        self.route_ids.clear()
        self.deadlines.clear()
        self.pending_syncs.clear()
        self.outbox.clear()
        self.awaiting_answer = 0
        failure = CallFailure(code, message)
        for call in sorted((c for calls in self.cancel_calls.values() for c in calls), key=lambda c: c.order):
            if call.token is not None:
                actions.append(AnswerCancel(call.token, failure))
        self.cancel_calls.clear()
        for call in self.status_calls:
            if call.token is not None:
                actions.append(AnswerStatus(call.token, failure))
        self.status_calls.clear()

    # -- The broker's messages ------------------------------------------------------------
    #
    # Every frame about an id is about the first route with the id, the only one on the
    # wire: the answer to its Submit (Accepted, Rejected, Failed{DUPLICATE_ID}) while it is
    # not accepted, everything else once it is. A frame that does not fit is about another
    # request with the id and is dropped. A route that had its terminal action already only
    # absorbs frames until the broker's own end. Any message, even one that does not decode,
    # shows that the broker is there.

    def received(self, message: client_pb2.BrokerToClient, kind: str, payload: bytes | None,
                 now: float) -> list[Action]:
        """A decoded message arrived from the broker."""
        if self.closed:
            return []
        self._heard(now)
        actions: list[Action] = []
        if kind == "accepted":
            accepted = message.accepted
            self._note_broker_instance(accepted.broker_instance, now, actions)
            self._adopt_interval(accepted.heartbeat_interval_ms)
            self.digests_unused = accepted.digests_unused
            route = self._first_route(accepted.request_id)
            if route is not None and route.sent_serial is not None and not route.accepted:
                route.accepted = True
                if accepted.broker_instance:
                    route.instance = accepted.broker_instance
                # A resubmitted request was announced before.
                if not route.announced and not route.ended:
                    route.announced = True
                    actions.append(Deliver(route.token, Accepted(accepted.request_id, accepted.deadline_ms,
                                                                 accepted.broker_instance), False))
        elif kind == "started":
            route = self._accepted_route(message.started.request_id)
            if route is not None and not route.ended:
                actions.append(Deliver(route.token, Started(route.request_id, message.started.attempt), False))
        elif kind == "result":
            self._result(message.result, payload or b"", actions)
        elif kind == "download":
            download = message.download
            route = self._accepted_route(download.request_id)
            phase = _DOWNLOAD_PHASES.get(download.phase)
            if route is not None and not route.ended and phase is not None:
                actions.append(Deliver(route.token, Download(route.request_id, phase, download.bytes,
                                                             download.expected_bytes or None), False))
        elif kind == "failed" and message.failed.code == common_pb2.ERROR_CODE_DUPLICATE_ID:
            failed = message.failed
            route = self._first_route(failed.request_id)
            if route is not None and route.sent_serial is not None and not route.accepted:
                self._end_route(failed.request_id, Failed(failed.request_id, ErrorCode.DUPLICATE_ID, failed.message),
                                actions)
        elif kind == "rejected":
            rejected = message.rejected
            route = self._first_route(rejected.request_id)
            if route is not None and route.sent_serial is not None and not route.accepted:
                retry_after = rejected.retry_after_ms / 1000 if rejected.retry_after_ms else None
                self._end_route(rejected.request_id, Rejected(rejected.request_id, ErrorCode.from_wire(rejected.code),
                                                              rejected.message, retry_after), actions)
        elif kind == "failed":
            failed = message.failed
            if self._accepted_route(failed.request_id) is not None:
                self._end_route(failed.request_id, Failed(failed.request_id, ErrorCode.from_wire(failed.code),
                                                          failed.message), actions)
        elif kind == "cancelled":
            request_id = message.cancelled.request_id
            if self._accepted_route(request_id) is not None:
                self._end_route(request_id, Cancelled(request_id, by_this_client=False), actions)
        elif kind == "cancel_ack":
            self._cancel_answered(message.cancel_ack, actions)
        elif kind == "status_reply":
            # After a lost answer a status may have been asked twice: one answer suffices.
            if self.status_calls:
                call = self.status_calls.pop(0)
                if call.sent_serial is not None:
                    self.awaiting_answer -= 1
                if call.token is not None:
                    actions.append(AnswerStatus(call.token, BrokerStatus.from_wire(message.status_reply)))
        elif kind == "pong":
            pong = message.pong
            self._adopt_interval(pong.heartbeat_interval_ms)
            if pong.max_input_bytes > 0:
                self.broker_max_input_bytes = pong.max_input_bytes
            self._note_broker_instance(pong.broker_instance, now, actions)
        elif kind == "sync_reply":
            self._sync_reply(message.sync_reply, now, actions)
        # "error": a sign of life only; an Error names no request, so there is nobody to tell.
        self._note_busy(now)
        return actions

    def received_malformed(self, now: float) -> None:
        """Something arrived that does not decode: it shows the broker is there."""
        if not self.closed:
            self._heard(now)

    def _heard(self, now: float) -> None:
        self.heard_on_connection = True
        self.last_heard = now
        self.connection_note = None

    def _adopt_interval(self, milliseconds: int) -> None:
        # At once: a broker with a shorter interval would otherwise judge the client silent
        # before its first Ping.
        if milliseconds > 0:
            self.broker_interval = milliseconds / 1000

    def _first_route(self, request_id: str) -> _Route | None:
        routes = self.routes.get(request_id)
        return routes[0] if routes else None

    def _accepted_route(self, request_id: str) -> _Route | None:
        """The id's route on the wire, if the broker accepted it."""
        route = self._first_route(request_id)
        return route if route is not None and route.accepted else None

    def _result(self, result: client_pb2.Result, image: bytes, actions: list[Action]) -> None:
        request_id = result.request_id
        route = self._accepted_route(request_id)
        if route is None:
            return
        image_format = ImageFormat.from_wire(result.format)
        violation = None
        if result.stage == common_pb2.STAGE_INFO:
            if not result.terminal or not result.HasField("info"):
                violation = "the broker sent an info result that is not terminal or has no info"
            image_format = ImageFormat.JPEG  # unset for info; nothing to read
        if violation is not None:
            pass
        elif image_format is None:
            violation = f"the broker sent a result in unknown format {result.format}"
        elif result.stage == common_pb2.STAGE_FINAL and not result.terminal and len(route.submit.variants) < 2:
            violation = "the broker sent a final result that is not terminal"
        elif result.stage == common_pb2.STAGE_FINAL and result.variant >= max(1, len(route.submit.variants)):
            violation = f"the broker sent variant {result.variant} of a request with {len(route.submit.variants)}"
        elif result.stage == common_pb2.STAGE_PLACEHOLDER and result.terminal:
            violation = "the broker sent a placeholder that is terminal"
        elif result.stage not in (common_pb2.STAGE_DEGRADED, common_pb2.STAGE_FINAL, common_pb2.STAGE_INFO,
                                  common_pb2.STAGE_PLACEHOLDER):
            violation = f"the broker sent a result with stage {result.stage}"
        if violation is not None:
            self._end_route(request_id, Failed(request_id, ErrorCode.MALFORMED, violation), actions)
            return
        if route.ended:
            if result.terminal:
                self._finish_route(request_id)
            return
        assert image_format is not None  # a violation otherwise
        event: Event
        if result.stage == common_pb2.STAGE_INFO:
            event = Info(request_id, _image_info(result.info))
        elif result.stage == common_pb2.STAGE_PLACEHOLDER:
            # Once, and only before any image.
            if route.placeholder_delivered or route.degraded_delivered:
                return
            route.placeholder_delivered = True
            event = Placeholder(request_id, result.width, result.height, bytes(result.placeholder))
        elif result.stage == common_pb2.STAGE_DEGRADED:
            # After a resubmission only the final may come; a second degraded never.
            if route.degraded_delivered:
                return
            route.degraded_delivered = True
            event = Degraded(request_id, image, result.width, result.height, image_format, tuple(result.notes),
                             result.cached, terminal=result.terminal)
        else:
            event = Final(request_id, image, result.width, result.height, image_format, tuple(result.notes),
                          result.cached, result.variant, terminal=result.terminal)
        actions.append(Deliver(route.token, event, result.terminal))
        if result.terminal:
            self._finish_route(request_id)

    def _cancel_answered(self, ack: client_pb2.CancelAck, actions: list[Action]) -> None:
        """The answer to the oldest Cancel for the id. Whatever the broker had to say about a
        request sent before that Cancel came before the answer: a cancelled or timed-out
        route sent before it is done."""
        request_id = ack.request_id
        calls = self.cancel_calls.get(request_id)
        if not calls:
            return
        call = calls.pop(0)
        if not calls:
            del self.cancel_calls[request_id]
        if call.sent_serial is not None:
            self.awaiting_answer -= 1
        if call.token is not None:
            actions.append(AnswerCancel(call.token, CancelOutcome.from_wire(ack.outcome)))
        route = self._first_route(request_id)
        if (route is not None and (route.cancelled or route.ended) and route.sent_serial is not None
                and call.sent_serial is not None and route.sent_serial < call.sent_serial):
            self._end_route(request_id, Cancelled(request_id, by_this_client=True), actions)

    # The broker answers a connection's messages in order, so its reply to a Sync comes
    # after everything it had to say about what the socket sent before that Sync. A request
    # sent before it that the broker does not hold has ended without the client hearing the
    # end: it fails REQUEST_LOST, unless it was sent while another broker instance held it,
    # and is submitted again to this one.

    def _sync_reply(self, reply: client_pb2.SyncReply, now: float, actions: list[Action]) -> None:
        self._note_broker_instance(reply.broker_instance, now, actions)
        serial = self.pending_syncs.pop(reply.nonce, None)
        if serial is None:
            return
        # Syncs are answered in order: an older one without a reply was lost.
        self.pending_syncs = {n: s for n, s in self.pending_syncs.items() if n > reply.nonce}
        # Before any route ends here: a Cancel sent again must go before the Submit of the
        # next route with its id.
        self._ask_again(serial, actions)
        for request_id in sorted(set(reply.unknown_request_ids)):
            route = self._first_route(request_id)
            if route is None or route.sent_serial is None or route.sent_serial >= serial:
                continue
            restarted = reply.broker_instance != 0 and (route.instance or reply.broker_instance) != reply.broker_instance
            if (restarted and self.configuration.resubmit_after_broker_restart
                    and not route.cancelled and not route.ended):
                route.sent_serial = None
                route.accepted = False
                self.awaiting_answer -= 1
                if route.degraded_delivered:
                    route.submit.delivery = common_pb2.DELIVERY_FINAL
                if route.placeholder_delivered:
                    route.submit.no_placeholder = True
                self._queue_submit(request_id)
            else:
                self._end_route(request_id, Failed(
                    request_id, ErrorCode.REQUEST_LOST,
                    "the broker no longer holds this request; its end was lost (connection reset?)"), actions)

    def _ask_again(self, serial: int, actions: list[Action]) -> None:
        def lost(call: _Call) -> bool:
            return call.sent_serial is not None and call.sent_serial < serial

        for request_id in sorted(self.cancel_calls):
            calls = self.cancel_calls[request_id]
            lost_calls = [c for c in calls if lost(c)]
            if not lost_calls:
                continue
            self.awaiting_answer -= len(lost_calls)
            # Behind every call sent or queued since: answers come in the order of the Cancels.
            kept = [c for c in calls if not lost(c)]
            if kept:
                self.cancel_calls[request_id] = kept
            else:
                del self.cancel_calls[request_id]
            route = self._first_route(request_id)
            safe = route is None or route.cancelled or route.ended
            for call in lost_calls:
                if safe:
                    call.sent_serial = None
                    self._queue_cancel(request_id, call)
                elif call.token is not None:
                    actions.append(AnswerCancel(call.token, CallFailure(
                        ErrorCode.REQUEST_LOST, "the broker's answer to this cancel was lost (connection reset?)")))
        lost_status = [c for c in self.status_calls if lost(c)]
        if not lost_status:
            return
        self.awaiting_answer -= len(lost_status)
        self.status_calls = [c for c in self.status_calls if not lost(c)]
        for call in lost_status:
            call.sent_serial = None
            self.status_calls.append(call)
            message = client_pb2.ClientToBroker()
            message.status_request.SetInParent()
            self.outbox.append(_Outgoing(message, None, ("status",)))

    # -- Helpers --------------------------------------------------------------------------

    def _end_route(self, request_id: str, event: Event, actions: list[Action]) -> None:
        """Ends the id's route on the wire with `event`, unless it had its terminal action
        already, and forgets it."""
        route = self._first_route(request_id)
        if route is None:
            return
        if not route.ended:
            actions.append(Deliver(route.token, event, True))
        self._finish_route(request_id)

    def _finish_route(self, request_id: str) -> None:
        """Forgets the id's route on the wire; the next one with the id, if any, goes out."""
        self._remove_route(request_id, 0)
        if request_id in self.routes:
            self._queue_submit(request_id)

    def _remove_route(self, request_id: str, index: int) -> None:
        routes = self.routes[request_id]
        route = routes.pop(index)
        if not routes:
            del self.routes[request_id]
        self.route_ids.pop(route.token, None)
        self.deadlines.remove(route.token)
        if route.sent_serial is not None:
            self.awaiting_answer -= 1

    def _queue_submit(self, request_id: str) -> None:
        route = self.routes[request_id][0]
        message = client_pb2.ClientToBroker()
        message.submit.CopyFrom(route.submit)
        self.outbox.append(_Outgoing(message, route.image, ("route", request_id, route.token)))

    def _queue_cancel(self, request_id: str, call: _Call) -> None:
        self.cancel_calls.setdefault(request_id, []).append(call)
        message = client_pb2.ClientToBroker()
        message.cancel.request_id = request_id
        self.outbox.append(_Outgoing(message, None, ("cancel", request_id)))

    def _note_busy(self, now: float) -> None:
        """Starts or stops the wait the silence limit counts from."""
        if self.is_idle or self.closed:
            self.busy_since = None
        elif self.busy_since is None:
            self.busy_since = now


def _image_info(info: common_pb2.ImageInfo) -> ImageInfo:
    return ImageInfo(format=info.format, width=info.width, height=info.height, orientation=info.orientation,
                     channels=info.channels, has_alpha=info.has_alpha, bit_depth=info.bit_depth,
                     color_space=info.color_space, profile_description=info.profile_description or None,
                     profile_bytes=info.profile_bytes, progressive=info.progressive,
                     has_embedded_thumbnail=info.has_embedded_thumbnail, byte_size=info.byte_size,
                     has_gain_map=info.has_gain_map)
