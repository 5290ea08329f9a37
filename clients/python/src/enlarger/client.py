"""`Client`: a producer's connection to the Enlarger broker."""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError

import zmq

from . import wire
from ._loop import _Loop, _Shared, new_future
from ._proto import client_pb2, common_pb2
from .codes import CancelOutcome, Chroma, Delivery, FailOn, Fit, ImageFormat
from .core import ClientCore, Configuration
from .errors import InputTooLargeError, InvalidArgumentError, RequestError
from .events import BrokerStatus, ImageInfo, Info
from .keys import CurveCredentials
from .request import Request, _Channel

__all__ = ["Client"]

_MAX_DEADLINE_MS = 2**32 - 1


class Client:
    """A connection to the broker's client endpoint (``ipc://PATH`` or ``tcp://HOST:PORT``):
    submit JPEG resize requests, iterate their degraded and final results, cancel them.

    **Threads.** One background I/O thread, started here, owns the ZeroMQ socket (ZeroMQ
    sockets are not thread-safe); every method may be called from any thread and only posts
    work to it. Events reach each request's iterator through a locked queue; `cancel()` and
    `status()` are answered through `concurrent.futures.Future` (their callbacks run on the
    I/O thread: keep them short and never block in them).

    **Strict cancel.** Once `cancel(id)` has returned, the iterators of this client's
    requests with that id yield nothing more about them, not even events already received:
    at most one local `Cancelled` (if the consumer had not taken a terminal event yet), then
    they stop.

    **Nothing hangs.** While anything is outstanding the client pings the broker every
    `heartbeat_interval` seconds (or the broker's own interval from its Accepted or Pong, if
    shorter); after `missed_heartbeats` intervals without a word from it, every outstanding
    request ends with `Failed(BROKER_LOST)`, or `Failed(BROKER_UNREACHABLE)` when no broker
    ever answered on the connection, calls raise the matching `CallFailedError`, and the client
    connects afresh. Every `sync_interval` seconds it asks the broker which of its requests
    it still holds and fails the forgotten ones with `REQUEST_LOST` (their end was lost with
    a reset connection). A request with a `timeout` ends by then even if the broker cannot say
    so (one heartbeat interval later).

    **Identity.** The socket has a random, stable routing id: after a connection reset,
    libzmq reconnects under the same id and the broker delivers what waited for it.

    **Broker restarts.** A restarted broker has forgotten every request; by default the
    client submits its unfinished ones again with the same ids (a request whose degraded
    result was delivered asks for the final only); with `resubmit_after_broker_restart` off
    they fail `BROKER_LOST`.

    Use it as a context manager, or call `close()`: outstanding requests then end with
    `Failed(CLIENT_CLOSED)` and the I/O thread stops.
    """

    def __init__(self, endpoint: str, *, server_public_key: str | os.PathLike | None = None,
                 key: str | os.PathLike | None = None, heartbeat_interval: float = 1.0,
                 missed_heartbeats: int = 3, sync_interval: float = 2.0,
                 max_input_bytes: int = 64 << 20, resubmit_after_broker_restart: bool = True) -> None:
        """Connects in the background: a broker that is not there yet is not an error here;
        requests and calls made meanwhile end with `BROKER_UNREACHABLE` if none answers.

        `server_public_key` (the broker's ``NAME.pub``) and `key` (this client's ``NAME.key``,
        mode 0600), both written by ``enlarger keygen``, turn on CURVE; a tcp broker requires
        them unless it runs with ``--insecure-tcp``.

        Raises `InvalidArgumentError` for an endpoint or setting that cannot work and
        `KeyFileError` for a key file that cannot be used.
        """
        if not isinstance(endpoint, str) or not (
                (endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"))
                or (endpoint.startswith("tcp://") and len(endpoint) > len("tcp://"))):
            raise InvalidArgumentError(f"endpoint must be ipc://PATH or tcp://HOST:PORT, got {endpoint!r}")
        if (server_public_key is None) != (key is None):
            raise InvalidArgumentError("CURVE needs both server_public_key (the broker's .pub file) "
                                       "and key (this client's .key file)")
        for name, value in (("heartbeat_interval", heartbeat_interval), ("sync_interval", sync_interval)):
            if not _is_number(value) or not 0 < value < math.inf:
                raise InvalidArgumentError(f"{name} must be a positive number of seconds, got {value!r}")
        if not _is_int(missed_heartbeats) or missed_heartbeats < 1:
            raise InvalidArgumentError(f"missed_heartbeats must be an int >= 1, got {missed_heartbeats!r}")
        if not _is_int(max_input_bytes) or max_input_bytes < 1:
            raise InvalidArgumentError(f"max_input_bytes must be a positive int, got {max_input_bytes!r}")
        curve = None
        if server_public_key is not None and key is not None:
            if not zmq.has("curve"):
                raise InvalidArgumentError("this libzmq has no CURVE support")
            curve = CurveCredentials.from_files(server_public_key, key)

        self._endpoint = endpoint
        self._heartbeat_interval = float(heartbeat_interval)
        configuration = Configuration(
            heartbeat_interval=float(heartbeat_interval), missed_heartbeats=missed_heartbeats,
            sync_interval=float(sync_interval), resubmit_after_broker_restart=resubmit_after_broker_restart,
            max_input_bytes=max_input_bytes, endpoint=endpoint)
        self._shared = _Shared()
        core = ClientCore(configuration, time.monotonic())
        try:
            self._loop = _Loop(endpoint, core, curve, self._shared)
        except zmq.ZMQError as error:
            self._shared.mark_closed()
            raise InvalidArgumentError(f"cannot connect to {endpoint}: {error}") from error
        self._thread = threading.Thread(target=self._loop.run, name="enlarger-client-io", daemon=True)
        self._thread.start()

    # -- Properties -----------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return self._endpoint

    @property
    def max_input_bytes(self) -> int:
        """The largest image `submit` sends: the broker's limit once its Pong has told it
        (one goes out on every new connection), else the configured one."""
        return self._loop.core.max_input_bytes

    # -- Requests -------------------------------------------------------------------------

    def submit(self, image: bytes | bytearray | memoryview | None = None, *, file: str | None = None,
               url: str | None = None, width: int | None = None,
               height: int | None = None, fit: Fit | str = Fit.INSIDE, enlarge: bool = False,
               quality: int | None = None, progressive: bool = False, chroma: Chroma | str = Chroma.YUV420,
               format: ImageFormat | str = ImageFormat.JPEG, fail_on: FailOn | str = FailOn.ERROR,
               keep_profile: bool = False, accept: Sequence[ImageFormat | str] | None = None, flatten: bool = False,
               background: str | int | None = None, lossless: bool = False,
               degraded: bool = True, delivery: Delivery | str | None = None, request_id: str | None = None,
               timeout: float | None = None, share: bool = True) -> Request:
        """Submits one image (JPEG, PNG, WebP, HEIC or AVIF, recognised by the worker from its
        content) and returns its `Request`, an iterator of events.

        - The image: `image` (its bytes, sent with the request), or `file` (a path relative
          to the worker's files root, `enlarger worker --files-root`), or `url` (an http or
          https URL the worker downloads; the request then yields `Download` events before
          its results). Exactly one.

        - `width`, `height`: the output box, 1 to 16384 px; at least one. With only one, the
          other side follows the aspect ratio.
        - `fit`: inside (default), cover or fill. `enlarge`: allow scaling up.
        - `quality` 1 to 100 (None: the worker's default, 80) for JPEG, lossy WebP and AVIF;
          `progressive`, `chroma` ("420" or "444"): JPEG output settings. `lossless`: WebP
          output without loss.
        - `format`: jpeg (default), png, webp, avif or pnm; transparency is flattened onto
          `background` when the format cannot carry it. Or `accept`: formats (or content
          types such as "image/avif") in order of preference; the worker writes the first
          that can carry the image, skipping those without alpha for an image with
          transparency unless `flatten` is True. Each result's `format` says which it chose.
        - `background`: what transparency is flattened onto, "#rrggbb" or 0xRRGGBB (white).
        - `fail_on`: which damage in the input fails the request: none, truncated, error
          (default: damaged data fails, stray bytes that lose no pixels do not) or warning.
        - `keep_profile`: keep an RGB or grey source's ICC profile (embedded in the output)
          instead of converting the pixels to sRGB (the default).
        - `degraded`: True for a quick degraded result before the final one (when the worker
          has one cheaper than the final), False for the final only. `delivery`, when given,
          wins: `Delivery.DEGRADED` asks for one degraded result, which is terminal.
        - `request_id`: 1 to 64 bytes of UTF-8, unique among the broker's live requests of
          this principal; a random UUID by default.
        - `timeout`: seconds the request may live after acceptance; None leaves it to the
          broker's default. The broker ends a request still live then with
          `Failed(DEADLINE_EXCEEDED)`.
        - `share`: send the image's SHA-256 with it (default), so that the broker may answer
          from its result cache (the `Final` then has `cached` set) or let the request share
          one job with identical ones in flight; the worker checks the digest. For a file or
          URL the worker names the version it reads instead (file identity, URL validator);
          False opts out the same.

        Never blocks. Raises `InvalidArgumentError` (a `ValueError`) for arguments the
        protocol does not allow, `InputTooLargeError` for an image over the broker's limit
        (`max_input_bytes`), `DuplicateRequestIdError` for an id live in this client, and
        `ClientClosedError` once the client is closed; nothing is sent then.
        """
        data = _source_bytes(image, file, url)
        submit = self._build_submit(width=width, height=height, fit=fit, enlarge=enlarge, quality=quality,
                                    progressive=progressive, chroma=chroma, format=format, fail_on=fail_on,
                                    keep_profile=keep_profile, accept=accept, flatten=flatten,
                                    background=background, lossless=lossless, degraded=degraded,
                                    delivery=delivery, request_id=request_id, timeout=timeout)
        shares = _flag(share, "share")
        _set_source(submit, file, url, shares)
        if image is not None and shares:
            submit.source.inline.sha256 = hashlib.sha256(data).digest()
        limit = self.max_input_bytes
        if len(data) > limit:
            raise InputTooLargeError(len(data), limit)
        channel = _Channel(submit.request_id)
        self._shared.submit(channel, submit, data)
        return Request(self, channel)

    def cancel(self, request_id: str) -> Future[CancelOutcome]:
        """Cancels the request with this id, whichever of this principal's connections
        submitted it.

        **Strict cancel holds from the moment of the call:** before it returns, this client's
        requests with the id are marked cancelled, so their iterators yield nothing more than
        a local `Cancelled`. The returned future gets the broker's answer (`CancelOutcome`),
        or a `CallFailedError` when none can come; waiting for it is optional.
        """
        wire.check_request_id(request_id)
        future = new_future()
        self._shared.cancel(request_id, future)
        return future

    def info(self, image: bytes | bytearray | memoryview | None = None, *, file: str | None = None,
             url: str | None = None, fail_on: FailOn | str = FailOn.ERROR,
             request_id: str | None = None, timeout: float | None = None) -> ImageInfo:
        """What the image's header says (size after orientation, colour space, profile
        description, thumbnail, ...), read by a worker without decoding pixels; of a `file` or
        `url` it reads no more than the header needs. Blocks until the answer; raises
        `RequestError` when the request fails (not an image, damaged as `fail_on` says, over
        the limits, a refused source), and the argument errors of `submit`."""
        data = _source_bytes(image, file, url)
        submit = client_pb2.Submit()
        submit.request_id = wire.check_request_id(str(uuid.uuid4()) if request_id is None else request_id)
        submit.spec.fail_on = _member(FailOn, fail_on, "fail_on").wire
        submit.delivery = common_pb2.DELIVERY_INFO
        _set_source(submit, file, url, True)
        if timeout is not None:
            if not _is_number(timeout) or not 0 < timeout * 1000 <= _MAX_DEADLINE_MS:
                raise InvalidArgumentError(
                    f"timeout must be a positive number of seconds up to {_MAX_DEADLINE_MS / 1000:g}, got {timeout!r}")
            submit.deadline_ms = max(1, math.ceil(timeout * 1000))
        limit = self.max_input_bytes
        if len(data) > limit:
            raise InputTooLargeError(len(data), limit)
        channel = _Channel(submit.request_id)
        self._shared.submit(channel, submit, data)
        for event in Request(self, channel):
            if isinstance(event, Info):
                return event.info
            if event.terminal:
                raise RequestError(event)
        raise RequestError(Info(submit.request_id))

    def status(self, timeout: float | None = None) -> BrokerStatus:
        """The broker's workers, queue and counters. Blocks until the broker answers: raises
        `BrokerUnreachableError` / `BrokerLostError` when it cannot (after the silence limit),
        TimeoutError after `timeout` seconds."""
        future = new_future()
        self._shared.status(future)
        try:
            return future.result(timeout)
        except FutureTimeoutError:
            raise TimeoutError(f"no status from {self._endpoint} within {timeout:g} s") from None

    # -- Lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Ends every outstanding request with `Failed(CLIENT_CLOSED)`, fails waiting calls,
        stops the I/O thread and closes the socket. Idempotent."""
        self._shared.request_close()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self._endpoint!r})"

    # -- Validation -----------------------------------------------------------------------

    @staticmethod
    def _build_submit(*, width, height, fit, enlarge, quality, progressive, chroma, format, fail_on=FailOn.ERROR,
                      keep_profile=False, accept=None, flatten=False, background=None, lossless=False,
                      degraded, delivery, request_id, timeout) -> client_pb2.Submit:
        submit = client_pb2.Submit()
        submit.request_id = wire.check_request_id(str(uuid.uuid4()) if request_id is None else request_id)
        spec = submit.spec
        for name, value in (("width", width), ("height", height)):
            if value is None:
                continue
            if not _is_int(value) or not 1 <= value <= wire.MAX_DIMENSION:
                raise InvalidArgumentError(f"{name} must be an int from 1 to {wire.MAX_DIMENSION}, got {value!r}")
            setattr(spec, name, value)
        if width is None and height is None:
            raise InvalidArgumentError("at least one of width and height must be given")
        spec.fit = _member(Fit, fit, "fit").wire
        spec.enlarge = _flag(enlarge, "enlarge")
        if quality is not None:
            if not _is_int(quality) or not 1 <= quality <= 100:
                raise InvalidArgumentError(f"quality must be an int from 1 to 100, got {quality!r}")
            spec.quality = quality
        spec.progressive = _flag(progressive, "progressive")
        spec.chroma = _member(Chroma, chroma, "chroma").wire
        spec.format = _member(ImageFormat, format, "format").wire
        spec.fail_on = _member(FailOn, fail_on, "fail_on").wire
        spec.keep_profile = _flag(keep_profile, "keep_profile")
        if accept is not None:
            if isinstance(accept, (str, bytes)) or not accept:
                raise InvalidArgumentError(f"accept must be a non-empty list of formats, got {accept!r}")
            for entry in accept:
                member = entry if isinstance(entry, ImageFormat) else (
                    ImageFormat.from_content_type(entry) if isinstance(entry, str) and "/" in entry
                    else _member(ImageFormat, entry, "accept"))
                if member is None:
                    raise InvalidArgumentError(f"accept: unknown content type {entry!r}")
                spec.accept.append(member.content_type)
        elif _flag(flatten, "flatten"):
            raise InvalidArgumentError("flatten goes with accept (a single format flattens as needed)")
        spec.flatten = _flag(flatten, "flatten")
        if background is not None:
            if isinstance(background, str):
                digits = background[1:] if background.startswith("#") else background
                if len(digits) == 3:
                    digits = "".join(c * 2 for c in digits)
                if len(digits) != 6 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                    raise InvalidArgumentError(f"background must be '#rrggbb' or 0xRRGGBB, got {background!r}")
                background = int(digits, 16)
            if not _is_int(background) or not 0 <= background <= 0xFFFFFF:
                raise InvalidArgumentError(f"background must be '#rrggbb' or 0xRRGGBB, got {background!r}")
            spec.background = background
        spec.lossless = _flag(lossless, "lossless")
        if delivery is None:
            delivery = Delivery.PROGRESSIVE if _flag(degraded, "degraded") else Delivery.FINAL
        submit.delivery = _member(Delivery, delivery, "delivery").wire
        if timeout is not None:
            if not _is_number(timeout) or not 0 < timeout * 1000 <= _MAX_DEADLINE_MS:
                raise InvalidArgumentError(
                    f"timeout must be a positive number of seconds up to {_MAX_DEADLINE_MS / 1000:g}, got {timeout!r}")
            submit.deadline_ms = max(1, math.ceil(timeout * 1000))
        return submit


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return value


def _member(enum_type, value, name: str):
    if isinstance(value, enum_type):
        return value
    try:
        if isinstance(value, str):
            return enum_type(value.lower())
        if _is_int(value):  # chroma 420 or 444
            return enum_type(str(value))
        raise ValueError
    except ValueError:
        choices = ", ".join(repr(m.value) for m in enum_type)
        raise InvalidArgumentError(f"{name} must be one of {choices}, got {value!r}") from None


_MAX_SOURCE_PATH_BYTES = 1024
_MAX_SOURCE_URL_BYTES = 2048


def _source_bytes(image: object, file: object, url: object) -> bytes:
    """The payload for exactly one of `image`, `file`, `url`: the image's bytes (a copy of a
    mutable buffer, which the caller may reuse while the I/O thread sends), or nothing."""
    given = [name for name, value in (("image", image), ("file", file), ("url", url)) if value is not None]
    if len(given) != 1:
        raise InvalidArgumentError(f"give exactly one of image, file and url, got {', '.join(given) or 'none'}")
    if image is not None:
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"image must be bytes, got {type(image).__name__}")
        return image if isinstance(image, bytes) else bytes(image)
    for name, value, limit in (("file", file, _MAX_SOURCE_PATH_BYTES), ("url", url, _MAX_SOURCE_URL_BYTES)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
        size = len(value.encode("utf-8", "surrogatepass"))
        if not 1 <= size <= limit or "\0" in value:
            raise InvalidArgumentError(f"{name} must be 1 to {limit} bytes of UTF-8 without NUL, got {size} bytes")
    return b""


def _set_source(submit: client_pb2.Submit, file: str | None, url: str | None, shares: bool) -> None:
    if file is not None:
        submit.source.file.path = file
        submit.source.no_share = not shares
    elif url is not None:
        submit.source.url.url = url
        submit.source.no_share = not shares
