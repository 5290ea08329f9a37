"""What a request's iterator yields, and the broker's status.

A request yields, in order: `Accepted`, any number of `Started` (and, for a URL source,
`Download` steps), at most one `Degraded`,
then exactly one terminal event — `Final`, a terminal `Degraded` (delivery `DEGRADED`),
`Failed`, `Rejected` or `Cancelled` — and nothing after it. Every event has `terminal`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .codes import ErrorCode, ImageFormat

if TYPE_CHECKING:
    from ._proto import client_pb2

__all__ = [
    "Event",
    "Accepted",
    "Started",
    "Download",
    "Placeholder",
    "Result",
    "Degraded",
    "Final",
    "Failed",
    "Rejected",
    "Cancelled",
    "BrokerStatus",
    "WorkerStatus",
    "Totals",
]


@dataclass(frozen=True)
class Event:
    """One step in the life of a request."""

    request_id: str
    #: Whether this is the request's last event. (A class attribute, not a field, except on
    #: `Degraded`, whose finality depends on the delivery.)
    terminal = False


@dataclass(frozen=True)
class Accepted(Event):
    """The broker accepted the request and queued it."""

    #: The deadline that applies, in milliseconds from acceptance.
    deadline_ms: int = 0
    #: The broker process that accepted it.
    broker_instance: int = 0


@dataclass(frozen=True)
class Started(Event):
    """A worker began the request; `attempt` grows when it is retried on another worker."""

    attempt: int = 1


@dataclass(frozen=True)
class Download(Event):
    """A step of a URL source's download: `phase` is "started", "progress" (at most a few a
    second) or "finished"; `bytes` received so far; `expected_bytes` from the response's
    Content-Length, or None. Never terminal; comes before the results."""

    phase: str = "started"
    bytes: int = 0
    expected_bytes: int | None = None


@dataclass(frozen=True)
class Placeholder(Event):
    """Before any image: the final's exact size (`width` x `height`) and `thumbhash`, a
    ThumbHash of its picture (about 25 bytes, https://evanw.github.io/thumbhash/), to paint
    at once. At most one, never terminal; none when `submit(placeholder=False)`, when the
    request joined a job already past it, or when the worker could not make one."""

    width: int = 0
    height: int = 0
    thumbhash: bytes = b""


@dataclass(frozen=True)
class Result(Event):
    """An encoded image of `width` x `height` pixels (`Degraded` or `Final`)."""

    data: bytes = field(default=b"", repr=False)
    width: int = 0
    height: int = 0
    format: ImageFormat = ImageFormat.JPEG
    #: What to know about how it was made: a colour profile ignored, transparency flattened.
    notes: tuple[str, ...] = ()
    #: The broker answered from its result cache: no worker ran for this request.
    cached: bool = False
    #: For a request with variants: which one this is (its index in `submit(variants=...)`).
    variant: int = 0

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(request_id={self.request_id!r}, {self.width}x{self.height} "
                f"{self.format.value}, {len(self.data)} bytes{', terminal' if self.terminal else ''})")


@dataclass(frozen=True, repr=False)
class Degraded(Result):
    """A fast approximation. Terminal only for delivery `DEGRADED`; otherwise a `Final`
    follows (or a failure)."""

    terminal: bool = False


@dataclass(frozen=True, repr=False)
class Final(Result):
    """The high-quality result. Terminal, except for a request with variants: one `Final` per
    variant, the last terminal."""

    terminal: bool = True


@dataclass(frozen=True)
class ImageInfo:
    """What an image's header says, read without decoding pixels (`Client.info`)."""

    format: str
    width: int  # displayed, after EXIF orientation
    height: int
    orientation: int  # EXIF, 1 to 8
    channels: int
    has_alpha: bool
    bit_depth: int
    color_space: str  # gray, ycbcr, rgb, cmyk, ycck
    profile_description: str | None
    profile_bytes: int
    progressive: bool
    has_embedded_thumbnail: bool
    byte_size: int
    #: A JPEG with an HDR gain map (UltraHDR, ISO 21496-1).
    has_gain_map: bool = False


@dataclass(frozen=True)
class Info(Event):
    """The one result of an info request. Terminal."""

    info: ImageInfo | None = None
    terminal = True


@dataclass(frozen=True)
class Failed(Event):
    """The request ended without a result. Terminal. Codes >= 1000 come from this client
    (`ErrorCode.is_local`)."""

    code: ErrorCode = ErrorCode.UNSPECIFIED
    message: str = ""
    terminal = True


@dataclass(frozen=True)
class Rejected(Event):
    """The Submit was refused before it was accepted (overloaded, invalid argument, too large,
    shutting down). Terminal: the request never existed at the broker. With OVERLOADED,
    `retry_after` is the broker's estimate, in seconds, of when trying again may succeed
    (None: no estimate)."""

    code: ErrorCode = ErrorCode.UNSPECIFIED
    message: str = ""
    retry_after: float | None = None
    terminal = True


@dataclass(frozen=True)
class Cancelled(Event):
    """The request was cancelled. Terminal. `by_this_client` is true when this client's
    `cancel()` did it (the event is then made locally, the moment the iterator next steps),
    false when the broker says another connection cancelled it."""

    by_this_client: bool = True
    terminal = True


# ---------------------------------------------------------------------------------------
# Status


@dataclass(frozen=True)
class WorkerStatus:
    """One registered worker. Name and pid are shown to admin principals only."""

    id: str
    name: str
    pid: int
    capacity: int
    in_flight: int
    last_seen_ms_ago: int


@dataclass(frozen=True)
class Totals:
    """Counters since the broker started (client.proto's `Totals`; same names).
    Between events: submitted = accepted + rejected + duplicate_ids, and
    accepted = finished + failed + cancelled + live requests."""

    submitted: int = 0
    accepted: int = 0
    finished: int = 0
    failed: int = 0
    cancelled: int = 0
    rejected: int = 0
    duplicate_ids: int = 0
    late_results_dropped: int = 0
    malformed_dropped: int = 0
    workers_lost: int = 0
    workers_disconnected: int = 0
    jobs_requeued: int = 0
    clients_vanished: int = 0
    unroutable: int = 0
    cancel_acks_timed_out: int = 0
    deadlines_exceeded: int = 0
    client_sends_deferred: int = 0
    jobs_quarantined: int = 0
    protocol_breaches: int = 0
    #: Requests answered from the result cache; requests with a digest it could not
    #: answer; requests that joined an identical request's live job.
    cache_hits: int = 0
    cache_misses: int = 0
    jobs_shared: int = 0
    #: Batches that ended, by outcome.
    batches_completed: int = 0
    batches_failed: int = 0
    batches_cancelled: int = 0


@dataclass(frozen=True)
class CacheStatus:
    """The broker's result cache: results held and their bytes against the limit (0: the
    cache is off), and results dropped to make room."""

    entries: int = 0
    bytes: int = 0
    limit_bytes: int = 0
    evictions: int = 0


@dataclass(frozen=True)
class BrokerStatus:
    """A snapshot of the broker (client.proto's `StatusReply`)."""

    workers: tuple[WorkerStatus, ...]
    #: Accepted requests waiting for a worker, and the most that may wait.
    queue_depth: int
    queue_limit: int
    #: Jobs held by a worker (identical requests share one).
    in_flight: int
    #: Client connections with live requests.
    clients: int
    uptime_ms: int
    totals: Totals
    #: Bytes waiting at the broker for clients that are not reading or not connected.
    client_bytes_waiting: int
    cache: CacheStatus = CacheStatus()

    @classmethod
    def from_wire(cls, reply: client_pb2.StatusReply) -> BrokerStatus:
        totals = Totals(**{f.name: getattr(reply.totals, f.name) for f in dataclasses.fields(Totals)})
        workers = tuple(
            WorkerStatus(id=w.id, name=w.name, pid=w.pid, capacity=w.capacity, in_flight=w.in_flight,
                         last_seen_ms_ago=w.last_seen_ms_ago)
            for w in reply.workers)
        return cls(workers=workers, queue_depth=reply.queue_depth, queue_limit=reply.queue_limit,
                   in_flight=reply.in_flight, clients=reply.clients, uptime_ms=reply.uptime_ms,
                   totals=totals, client_bytes_waiting=reply.client_bytes_waiting,
                   cache=CacheStatus(**{f.name: getattr(reply.cache, f.name) for f in dataclasses.fields(CacheStatus)}))
