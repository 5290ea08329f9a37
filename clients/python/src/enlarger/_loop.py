"""The client's I/O thread: the only code that touches its ZeroMQ sockets.

Poll and perform: it polls a wakeup pipe (callers' mail), the DEALER socket and the
socket's monitor; feeds callers' commands, the broker's messages and the time to the
`ClientCore`; hands the core's outbox to the socket as far as the socket takes it; and
performs the actions the core returns. What it adds is I/O: the socket, and the map from the
core's tokens to the channels and futures they stand for.

Callers never touch a socket. They post mail under `_Shared`'s lock, which also records which
channels a cancel must reach, so the broker sees a request's Submit and Cancel in the order
the calls were made.
"""

from __future__ import annotations

import itertools
import math
import os
import secrets
import threading
import time
import weakref
from collections import deque
from concurrent.futures import Future, InvalidStateError
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from . import wire
from .codes import ErrorCode
from .core import Action, AnswerCancel, AnswerStatus, CallFailure, ClientCore, Deliver, Reconnect
from .errors import ClientClosedError, DuplicateRequestIdError, call_error
from .events import Failed
from ._limit import InFlightLimit
from .keys import CurveCredentials
from .request import _Channel

# Messages handled per readiness of the socket before the mailbox gets a turn.
_RECEIVE_BUDGET = 256

_HANDSHAKE_EVENTS = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                     | zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_SUCCEEDED)


class _Shared:
    """What callers share with the I/O thread: the mailbox, which requests a cancel must
    reach, whether the client still takes commands, and the slots of the in-flight limit
    (taken by callers before `submit`, given back by the I/O thread)."""

    def __init__(self, max_in_flight: int | None = None) -> None:
        self.limit = InFlightLimit(max_in_flight)
        self._lock = threading.Lock()
        self._mail: deque[tuple[Any, ...]] = deque()
        # Every request whose consumer may still take events, by id: a cancel must reach a
        # request whose end is queued but not yet taken, too. Weak: a request whose consumer
        # dropped it, and that the I/O thread is done with, goes away; its entry is pruned.
        self._channels: dict[str, list[weakref.ref[_Channel]]] = {}
        self._prune_at = 64
        self._open = True
        self.wake_fd, self._wake_write_fd = os.pipe()
        os.set_blocking(self.wake_fd, False)
        os.set_blocking(self._wake_write_fd, False)

    def _post(self, mail: tuple[Any, ...]) -> None:
        # Under the lock. One byte per empty-to-non-empty change: the loop drains the pipe
        # before it takes the mail, so a mail posted after that always finds the queue empty.
        if not self._mail:
            try:
                os.write(self._wake_write_fd, b"\0")
            except BlockingIOError:
                pass  # the pipe is full of wakeups already
        self._mail.append(mail)

    # -- Callers --------------------------------------------------------------------------

    # A submit comes in two steps, so that a cancel reaches a request from the moment it is
    # submitted, also while it waits for a slot of the in-flight limit (or, in asyncio, for
    # its local file): `register` makes its id live and cancellable, `post` hands it to the
    # I/O thread once it holds a slot, unless it was cancelled meanwhile: then it never goes
    # out, and its consumer gets the local Cancelled.

    def register(self, channel: _Channel) -> None:
        """Takes the channel's id for it; raises when the id is live or the client closed."""
        with self._lock:
            if not self._open:
                raise ClientClosedError(ErrorCode.CLIENT_CLOSED, "the client is closed")
            others = self._reachable(channel.request_id)
            if any(other.is_live for other in others):
                raise DuplicateRequestIdError(f"request id {channel.request_id!r} is live in this client")
            channel.on_finished = self._forget
            self._channels[channel.request_id] = [weakref.ref(c) for c in (*others, channel)]
            if len(self._channels) >= self._prune_at:
                for request_id in list(self._channels):
                    if not self._reachable(request_id):
                        del self._channels[request_id]
                self._prune_at = 2 * len(self._channels) + 64

    def unregister(self, channel: _Channel) -> None:
        """A registered request that will not be posted (no slot, no file) frees its id."""
        self._forget(channel)

    def post(self, channel: _Channel, submit: Any, image: bytes) -> None:
        """Hands a registered request holding a slot of the limit to the I/O thread, which
        gives the slot back once it is done with it; a request cancelled meanwhile, or one
        that cannot be posted, gives it back here."""
        try:
            with self._lock:
                if not self._open:
                    raise ClientClosedError(ErrorCode.CLIENT_CLOSED, "the client is closed")
                if channel.is_live:
                    self._post(("submit", channel, submit, image))
                    return
        except BaseException:
            self.limit.release()
            raise
        self.limit.release()

    def _reachable(self, request_id: str) -> list[_Channel]:
        """The requests with this id whose consumers may still take events."""
        channels = (ref() for ref in self._channels.get(request_id, ()))
        return [c for c in channels if c is not None and not c.is_finished]

    def _forget(self, channel: _Channel) -> None:
        """The consumer has taken its request's last event: a cancel need not reach it."""
        with self._lock:
            refs = self._channels.get(channel.request_id)
            if refs is None:
                return
            kept = [ref for ref in refs if ref() is not None and ref() is not channel]
            if kept:
                self._channels[channel.request_id] = kept
            else:
                del self._channels[channel.request_id]

    def cancel(self, request_id: str, future: Future[Any] | None) -> None:
        """Marks every request with this id cancelled, at once, then posts the Cancel."""
        with self._lock:
            if self._cancel_locked(request_id, future):
                return
        if future is not None:
            _settle_future(future, error=ClientClosedError(ErrorCode.CLIENT_CLOSED, "the client is closed"))

    def _cancel_locked(self, request_id: str, future: Future[Any] | None) -> bool:
        for channel in self._reachable(request_id):
            channel.cancel()
        # Cancelled channels take no more events: a cancel need not reach them again.
        self._channels.pop(request_id, None)
        # A submit of the id waiting for a slot gives up.
        self.limit.wake()
        if self._open:
            self._post(("cancel", request_id, future))
        return self._open

    def abandon(self, channel: _Channel) -> None:
        """The consumer left the request's scope: if it has not ended, cancel its id as
        `cancel` does. Checked and done under the lock that `submit` checks ids under: while
        this request is live no other request of this client holds its id."""
        with self._lock:
            if channel.is_live:
                self._cancel_locked(channel.request_id, None)

    def status(self, future: Future[Any]) -> None:
        with self._lock:
            if self._open:
                self._post(("status", future))
                return
        _settle_future(future, error=ClientClosedError(ErrorCode.CLIENT_CLOSED, "the client is closed"))

    def request_close(self) -> None:
        with self._lock:
            if self._open:
                self._post(("close",))

    # -- I/O thread -----------------------------------------------------------------------

    def take_all(self) -> list[tuple[Any, ...]]:
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            mail = list(self._mail)
            self._mail.clear()
        return mail

    def mark_closed(self) -> list[tuple[Any, ...]]:
        """Refuses every later command, then returns the mail posted before that moment."""
        with self._lock:
            self._open = False
            self._channels.clear()
            mail = list(self._mail)
            self._mail.clear()
        os.close(self._wake_write_fd)
        os.close(self.wake_fd)
        return mail


#: How long closing waits for the broker to answer outstanding cancels.
_CLOSE_WAIT = 1.0


def _settle_future(future: Future[Any], result: Any = None, error: BaseException | None = None) -> None:
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # settled already
        pass


def new_future() -> Future[Any]:
    future: Future[Any] = Future()
    # Running: a caller cannot cancel it (the answer is the loop's to give).
    future.set_running_or_notify_cancel()
    return future


class _Loop:
    """See the module's notes. Created on the caller's thread; `run` is then called on the
    I/O thread, which alone uses it from then on (starting a thread is the full memory
    barrier libzmq asks for when a socket changes threads)."""

    def __init__(self, endpoint: str, core: ClientCore, curve: CurveCredentials | None, shared: _Shared) -> None:
        self.endpoint = endpoint
        self.core = core
        self.curve = curve
        self.shared = shared
        self.context = zmq.Context()
        self.socket: zmq.Socket[bytes] | None = None
        self.monitor: zmq.Socket[bytes] | None = None
        self.running = True
        self._tokens = itertools.count(1)
        self._requests: dict[int, _Channel] = {}
        self._cancel_waiters: dict[int, Future[Any]] = {}
        self._status_waiters: dict[int, Future[Any]] = {}
        self._unhandled: deque[tuple[Any, ...]] = deque()
        # While closing: when the loop stops waiting for the broker to answer the cancels
        # still on their way (a request cancelled just before its client closed).
        self._close_by: float | None = None
        try:
            self._connect()
        except BaseException:
            self._close_sockets()
            self.context.term()
            raise

    def _connect(self) -> None:
        """A DEALER with a fresh random routing id, kept for the socket's life: libzmq
        reconnects a reset connection under the same id, and the broker hands the id (and
        what waited for it) over to the new connection."""
        socket = self.context.socket(zmq.DEALER)
        monitor = None
        try:
            socket.setsockopt(zmq.LINGER, 0)
            # Queue nothing for a connection that is not complete: a message the socket
            # takes then goes to a broker, or fails the silence limit, never to a void.
            socket.setsockopt(zmq.IMMEDIATE, 1)
            if self.curve is not None:
                self.curve.apply(socket)
            identity = bytearray(secrets.token_bytes(16))
            identity[0] = max(identity[0], 1)  # a leading zero byte is reserved by libzmq
            socket.setsockopt(zmq.ROUTING_ID, bytes(identity))
            monitor = socket.get_monitor_socket(_HANDSHAKE_EVENTS)
            socket.connect(self.endpoint)
        except BaseException:
            # Every socket of the context must close, or terminating it waits forever.
            if monitor is not None:
                socket.disable_monitor()
                monitor.close(linger=0)
            socket.close(linger=0)
            raise
        self.socket, self.monitor = socket, monitor

    def _close_sockets(self) -> None:
        if self.socket is not None:
            if self.monitor is not None:
                try:
                    self.socket.disable_monitor()
                except zmq.ZMQError:
                    pass
                self.monitor.close(linger=0)
                self.monitor = None
            self.socket.close(linger=0)
            self.socket = None

    # -- Main loop ------------------------------------------------------------------------

    def run(self) -> None:
        """Serves until closed; any failure closes the client with TRANSPORT."""
        try:
            while self.running:
                self._turn()
        except BaseException as error:  # noqa: BLE001 - every caller must hear of it
            self._shut_down(ErrorCode.TRANSPORT, f"the client's I/O thread failed: {error!r}")
        finally:
            self._close_sockets()
            self.context.term()

    def _turn(self) -> None:
        poller = zmq.Poller()
        poller.register(self.shared.wake_fd, zmq.POLLIN)
        wants_out = self.core.next_message() is not None
        poller.register(self.socket, zmq.POLLIN | (zmq.POLLOUT if wants_out else 0))
        poller.register(self.monitor, zmq.POLLIN)
        wakeups = [w for w in (self.core.next_wakeup(), self._close_by) if w is not None]
        wakeup = min(wakeups) if wakeups else None
        timeout = None if wakeup is None else max(0, math.ceil((wakeup - time.monotonic()) * 1000))
        ready = dict(poller.poll(timeout))

        # Mail taken and not yet handled stays where `_shut_down` finds it: a close (or a
        # failure) in the middle of a batch must still end the requests posted after it.
        self._unhandled.extend(self.shared.take_all())
        while self._unhandled:
            self._handle(self._unhandled.popleft())
            if not self.running:
                return
        if ready.get(self.monitor, 0) & zmq.POLLIN:
            self._read_monitor()
        if ready.get(self.socket, 0) & zmq.POLLIN:
            self._receive()
        self._perform(self.core.tick(time.monotonic()))
        self._flush()
        if self._close_by is not None and (not self.core.cancel_calls or time.monotonic() >= self._close_by):
            self._shut_down(ErrorCode.CLIENT_CLOSED, "the client was closed before the request ended")

    def _handle(self, mail: tuple[Any, ...]) -> None:
        kind = mail[0]
        now = time.monotonic()
        if self._close_by is not None and kind in ("submit", "status"):
            # Closing: only cancels still go out.
            if kind == "submit":
                mail[1].deliver(Failed(mail[1].request_id, ErrorCode.CLIENT_CLOSED, "the client is closed"), True)
                self.shared.limit.release()
            else:
                _settle_future(mail[1], error=ClientClosedError(ErrorCode.CLIENT_CLOSED, "the client is closed"))
            return
        if kind == "submit":
            _, channel, submit, image = mail
            token = next(self._tokens)
            self._requests[token] = channel
            self._perform(self.core.submit(token, submit, image, now))
        elif kind == "cancel":
            _, request_id, future = mail
            token = None
            if future is not None:
                token = next(self._tokens)
                self._cancel_waiters[token] = future
            self._perform(self.core.cancel(request_id, token, now))
        elif kind == "status":
            token = next(self._tokens)
            self._status_waiters[token] = mail[1]
            self._perform(self.core.status(token, now))
        elif kind == "close":
            # Cancels still on their way are sent and answered first (at most a second):
            # the broker would otherwise run those requests to their end for nobody.
            if self._close_by is None:
                self._close_by = now + _CLOSE_WAIT
            if not self.core.cancel_calls:
                self._shut_down(ErrorCode.CLIENT_CLOSED, "the client was closed before the request ended")

    def _flush(self) -> None:
        """Hands the core's outbox to the socket until it takes no more (no broker connected,
        or its queue toward the broker is full)."""
        while (outgoing := self.core.next_message()) is not None:
            if outgoing.frames is None:
                outgoing.frames = wire.encode(outgoing.message, outgoing.payload)
            try:
                # libzmq queues a multipart message atomically: all of it or, with EAGAIN on
                # the first frame, none of it.
                self._socket().send_multipart(outgoing.frames, zmq.DONTWAIT, copy=False)
            except zmq.Again:
                return
            outgoing.frames = None
            self.core.message_sent(time.monotonic())

    def _receive(self) -> None:
        for _ in range(_RECEIVE_BUDGET):
            try:
                frames = self._socket().recv_multipart(zmq.DONTWAIT)
            except zmq.Again:
                return
            now = time.monotonic()
            try:
                message, kind, payload = wire.decode(frames)
            except wire.MalformedMessage:
                # It cannot be attributed to anything, but shows that the broker is there.
                self.core.received_malformed(now)
                continue
            self._perform(self.core.received(message, kind, payload, now))

    def _read_monitor(self) -> None:
        while True:
            try:
                assert self.monitor is not None  # made with the socket
                event = recv_monitor_message(self.monitor, zmq.DONTWAIT)
            except zmq.Again:
                return
            kind = event["event"]
            if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self.core.connection_note = None
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
                self.core.connection_note = (f"the broker refused this client's CURVE key "
                                             f"(ZAP status {event['value']})")
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
                self.core.connection_note = "the security handshake failed (CURVE keys or settings do not match)"
            elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
                self.core.connection_note = ("the security handshake failed (wrong broker public key, or the "
                                             "broker expects a different security mechanism)")

    # -- Actions --------------------------------------------------------------------------

    def _socket(self) -> zmq.Socket[bytes]:
        # Closed only by `_close_sockets`, after which the loop uses it no more.
        assert self.socket is not None
        return self.socket

    def _perform(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Reconnect):
                self._close_sockets()
                self._connect()
            else:
                self._settle(action)

    def _settle(self, action: Action) -> None:
        """Hands an event or an answer over."""
        if isinstance(action, Deliver):
            channel = self._requests.get(action.token)
            if channel is None:
                return
            # The channel, not this loop, decides whether the consumer gets it (strict cancel).
            channel.deliver(action.event, action.terminal)
            if action.terminal:
                del self._requests[action.token]
                self.shared.limit.release()
        elif isinstance(action, AnswerCancel):
            future = self._cancel_waiters.pop(action.token, None)
            if future is not None:
                self._answer(future, action.outcome)
        elif isinstance(action, AnswerStatus):
            future = self._status_waiters.pop(action.token, None)
            if future is not None:
                self._answer(future, action.status)

    @staticmethod
    def _answer(future: Future[Any], answer: Any) -> None:
        if isinstance(answer, CallFailure):
            _settle_future(future, error=call_error(answer.code, answer.message))
        else:
            _settle_future(future, result=answer)

    # -- Closing --------------------------------------------------------------------------

    def _shut_down(self, code: ErrorCode, message: str) -> None:
        """Refuses further commands and fails everything outstanding; the socket closes when
        `run` returns."""
        if not self.running:
            return
        self.running = False
        unhandled = [*self._unhandled, *self.shared.mark_closed()]
        self._unhandled.clear()
        for mail in unhandled:
            if mail[0] == "submit":
                mail[1].deliver(Failed(mail[1].request_id, code, message), True)
                self.shared.limit.release()
            elif mail[0] in ("cancel", "status") and mail[-1] is not None:
                _settle_future(mail[-1], error=call_error(code, message))
        for action in self.core.close(code, message):
            self._settle(action)
        # The core ends every request it knows of; one it never heard of, because the
        # failure came while it was being handed over, ends here.
        for token, channel in list(self._requests.items()):
            del self._requests[token]
            channel.deliver(Failed(channel.request_id, code, message), True)
            self.shared.limit.release()
