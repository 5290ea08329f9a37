"""Exceptions raised by the client.

A request that fails does not raise: its iterator ends with a `Failed`, `Rejected` or
`Cancelled` event (see `enlarger.events`). Exceptions are for calls that cannot return what
they promise: bad arguments (raised at once, before anything is sent), key files that cannot
be used, a `status()` or `cancel()` answer that cannot come, a closed client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .codes import ErrorCode

if TYPE_CHECKING:
    from .events import Event

__all__ = [
    "EnlargerError",
    "InvalidArgumentError",
    "InvalidRequestIdError",
    "InputTooLargeError",
    "DuplicateRequestIdError",
    "KeyFileError",
    "InsecureEndpointError",
    "InFlightLimitError",
    "CallFailedError",
    "BrokerUnreachableError",
    "BrokerLostError",
    "ClientClosedError",
    "RequestError",
]


class EnlargerError(Exception):
    """Base class of every exception this package raises."""


class InvalidArgumentError(EnlargerError, ValueError):
    """An argument is out of the range the wire protocol allows. Nothing was sent."""


class InvalidRequestIdError(InvalidArgumentError):
    """A request id is not 1 to 64 bytes of UTF-8."""


class InputTooLargeError(InvalidArgumentError):
    """The image is over the broker's input limit (or the client's, before the broker's is
    known). Sent anyway, it would make libzmq drop the whole connection."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"input of {size} bytes exceeds the broker's limit of {limit} bytes")
        self.size = size
        self.limit = limit


class DuplicateRequestIdError(EnlargerError, ValueError):
    """Another request with this id is live in this client (submitted and not ended or
    cancelled). A duplicate through another connection is the broker's business: that
    request ends with `Failed(code=DUPLICATE_ID)`."""


class KeyFileError(EnlargerError):
    """A CURVE key file is missing, unreadable, malformed, or (a secret key) readable by
    others."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class InsecureEndpointError(InvalidArgumentError):
    """A `tcp://` endpoint without CURVE keys: the client fails closed. Give
    `server_public_key` and `key`, or `insecure=True` (``ENLARGER_INSECURE_TCP=1``) on a
    network where nobody else can listen or connect."""


class InFlightLimitError(EnlargerError):
    """`submit(wait=False)` (or a wait that ran out) found `max_in_flight` requests in flight.
    Nothing was sent."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class CallFailedError(EnlargerError):
    """A `status()` or `cancel()` call got no answer from the broker. `code` says why, as in
    `ErrorCode` (for instance `BROKER_UNREACHABLE`, `BROKER_LOST`, `REQUEST_LOST`)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class BrokerUnreachableError(CallFailedError, ConnectionError):
    """No broker answered at the endpoint within the client's silence limit."""


class BrokerLostError(CallFailedError, ConnectionError):
    """The broker fell silent (or restarted) before it answered."""


class ClientClosedError(CallFailedError):
    """The client was closed (or its socket failed) before the call could be answered."""


class RequestError(EnlargerError):
    """Raised by `Request.result()` when the request ended without the result asked for;
    `event` is its terminal event (`Failed`, `Rejected` or `Cancelled`)."""

    def __init__(self, event: Event) -> None:
        code = getattr(event, "code", ErrorCode.UNSPECIFIED)
        message = getattr(event, "message", "") or type(event).__name__.lower()
        super().__init__(f"request {event.request_id}: {code.name}: {message}")
        self.event = event
        self.code = code


def call_error(code: ErrorCode, message: str) -> CallFailedError:
    """The exception for a call that failed with `code`."""
    if code is ErrorCode.BROKER_UNREACHABLE:
        return BrokerUnreachableError(code, message)
    if code is ErrorCode.BROKER_LOST:
        return BrokerLostError(code, message)
    if code in (ErrorCode.CLIENT_CLOSED, ErrorCode.TRANSPORT):
        return ClientClosedError(code, message)
    return CallFailedError(code, message)
