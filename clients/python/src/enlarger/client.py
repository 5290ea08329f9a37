"""`Client`: a producer's connection to the Enlarger broker."""

from __future__ import annotations

import hashlib
import math
import os
import threading
import time
import uuid
import warnings
from collections.abc import Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeoutError
from types import TracebackType
import enum
from typing import Any, TypeGuard, TypeVar

import zmq

from . import wire
from ._loop import _Loop, _Shared, new_future
from ._proto import client_pb2, common_pb2
from .codes import CancelOutcome, Chroma, Delivery, FailOn, Fit, GainMap, ImageFormat, Priority
from .core import ClientCore, Configuration
from .errors import InFlightLimitError, InputTooLargeError, InsecureEndpointError, InvalidArgumentError, RequestError
from .events import BrokerStatus, ImageInfo, Info
from .keys import CurveCredentials
from .request import Request, _Channel

__all__ = ["Client", "default_endpoint", "DEFAULT_MAX_IN_FLIGHT"]

_MAX_DEADLINE_MS = 2**32 - 1

#: Requests a client keeps in flight unless told otherwise: far more than a worker fleet runs at
#: once, far fewer than the broker's default queue limit (1024) shared by every client.
DEFAULT_MAX_IN_FLIGHT = 256


def default_endpoint() -> str:
    """Where the broker is when no endpoint is given, by the Swift CLI's rule:
    ``$ENLARGER_BROKER``, else the socket of `enlarger serve`'s runtime directory
    (``$ENLARGER_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/enlarger``, else
    ``/tmp/enlarger-UID``)."""
    environment = os.environ
    if environment.get("ENLARGER_BROKER"):
        return environment["ENLARGER_BROKER"]
    directory = environment.get("ENLARGER_RUNTIME_DIR") or (
        environment["XDG_RUNTIME_DIR"] + "/enlarger" if environment.get("XDG_RUNTIME_DIR")
        else f"/tmp/enlarger-{os.getuid()}")
    return f"ipc://{directory}/clients.sock"


def _endpoint_problem(endpoint: object) -> str | None:
    if isinstance(endpoint, str) and (
            (endpoint.startswith("ipc://") and len(endpoint) > len("ipc://"))
            or (endpoint.startswith("tcp://") and len(endpoint) > len("tcp://"))):
        return None
    problem = f"endpoint must be ipc://PATH or tcp://HOST:PORT, got {endpoint!r}"
    if isinstance(endpoint, str) and "://" not in endpoint and ":" in endpoint and not endpoint.startswith("/"):
        problem += f" (did you mean tcp://{endpoint}?)"
    return problem


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


def _insecure_from(insecure: object) -> bool:
    """`insecure`, else ``ENLARGER_INSECURE_TCP`` (1 or true, 0 or false; any case), as the
    Swift tools read it."""
    if insecure is not None:
        return _flag(insecure, "insecure")
    value = os.environ.get("ENLARGER_INSECURE_TCP", "")
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise InvalidArgumentError(f"ENLARGER_INSECURE_TCP={value}: expected 1 or true (0 or false for off)")


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

    **Abandoning a request.** ``with client.submit(...) as request:`` cancels the request
    when the block is left before it ended (a ``break``, an exception).

    **In flight.** At most `max_in_flight` requests (default 256) are in flight at once, from
    `submit` until the client knows their end; `submit` waits for a slot (or fails fast with
    `InFlightLimitError` for ``wait=False``). Results not yet read hold no slot.

    **asyncio.** `enlarger.AsyncClient` is this client for event loops: the same I/O thread
    and protocol core, with awaitable calls.

    Use it as a context manager, or call `close()`: outstanding requests then end with
    `Failed(CLIENT_CLOSED)` and the I/O thread stops.
    """

    def __init__(self, endpoint: str | None = None, *, server_public_key: str | os.PathLike[str] | None = None,
                 key: str | os.PathLike[str] | None = None, insecure: bool | None = None,
                 max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT, heartbeat_interval: float = 1.0,
                 missed_heartbeats: int = 3, sync_interval: float = 2.0,
                 max_input_bytes: int = 64 << 20, resubmit_after_broker_restart: bool = True) -> None:
        """Connects in the background: a broker that is not there yet is not an error here;
        requests and calls made meanwhile end with `BROKER_UNREACHABLE` if none answers.

        `endpoint`: ``ipc://PATH`` or ``tcp://HOST:PORT``; None reads it as the ``enlarger``
        commands do (`default_endpoint()`: ``$ENLARGER_BROKER``, else the socket of
        ``enlarger serve`` on this host).

        `server_public_key` (the broker's ``NAME.pub``) and `key` (this client's ``NAME.key``,
        mode 0600), both written by `enlarger.keys.generate_key_pair` (``python -m enlarger
        keygen``) or ``enlarger keygen``, turn on CURVE. For a ``tcp://`` endpoint they default
        to the files named by ``$ENLARGER_SERVER_PUBLIC_KEY`` and ``$ENLARGER_KEY``.

        **Fails closed:** a ``tcp://`` endpoint without keys raises `InsecureEndpointError`
        unless `insecure` is True (None reads ``ENLARGER_INSECURE_TCP``: ``1`` or ``true``),
        for closed test networks only: anyone who can reach the port could then pose as
        the broker or read the images.

        `max_in_flight`: how many of this client's requests may be in flight at once
        (default `DEFAULT_MAX_IN_FLIGHT`, 256; None for no limit); `submit` waits for a slot
        beyond it, or raises `InFlightLimitError` when asked not to wait.

        Raises `InvalidArgumentError` for an endpoint or setting that cannot work and
        `KeyFileError` for a key file that cannot be used.
        """
        from_environment = endpoint is None
        if endpoint is None:
            endpoint = default_endpoint()
        problem = _endpoint_problem(endpoint)
        if problem is not None:
            raise InvalidArgumentError(f"ENLARGER_BROKER={endpoint}: {problem}" if from_environment else problem)
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
        if max_in_flight is not None and (not _is_int(max_in_flight) or max_in_flight < 1):
            raise InvalidArgumentError(f"max_in_flight must be a positive int or None, got {max_in_flight!r}")
        is_tcp = endpoint.startswith("tcp://")
        if server_public_key is None and is_tcp:
            server_public_key = os.environ.get("ENLARGER_SERVER_PUBLIC_KEY") or None
            key = os.environ.get("ENLARGER_KEY") or None
            if (server_public_key is None) != (key is None):
                raise InvalidArgumentError("ENLARGER_SERVER_PUBLIC_KEY and ENLARGER_KEY go together: set both, "
                                           "or neither")
        insecure = _insecure_from(insecure)
        if is_tcp and server_public_key is None and not insecure:
            raise InsecureEndpointError(
                f"refusing to connect to {endpoint} without authentication: give server_public_key= (the broker's "
                ".pub file) and key= (this client's .key file; make one with `python -m enlarger keygen NAME` or "
                "`enlarger keygen NAME`), or set ENLARGER_SERVER_PUBLIC_KEY and ENLARGER_KEY; or pass insecure=True "
                "(ENLARGER_INSECURE_TCP=1) on a closed network")
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
        self._shared = _Shared(max_in_flight)
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

    def submit(self, image: bytes | bytearray | memoryview | None = None, *,
               local_file: str | os.PathLike[str] | None = None, worker_file: str | None = None,
               url: str | None = None, file: str | None = None, width: int | None = None,
               height: int | None = None, fit: Fit | str = Fit.INSIDE, enlarge: bool = False,
               quality: int | None = None, progressive: bool = False, chroma: Chroma | str = Chroma.YUV420,
               format: ImageFormat | str = ImageFormat.JPEG, fail_on: FailOn | str = FailOn.ERROR,
               keep_profile: bool = False, accept: Sequence[ImageFormat | str] | None = None, flatten: bool = False,
               background: str | int | None = None, lossless: bool = False,
               gain_map: GainMap | str = GainMap.KEEP, variants: Sequence[dict[str, Any]] | None = None,
               degraded: bool = True, delivery: Delivery | str | None = None, request_id: str | None = None,
               timeout: float | None = None, share: bool = True, wait: bool | float = True,
               priority: Priority | str = Priority.INTERACTIVE, placeholder: bool = True) -> Request:
        """Submits one image (JPEG, PNG, WebP, HEIC, AVIF, GIF or JPEG XL, recognised by the worker from its
        content) and returns its `Request`, an iterator of events.

        - The image, exactly one of:

          - `image`: its bytes, sent with the request;
          - `local_file`: a file on **this** machine, read here and sent as `image` is;
          - `worker_file`: a path on the **worker's** machine, relative to the directory the
            worker was started with (``enlarger worker --files-root DIR``); the worker reads
            it, nothing is read here (a worker without a files root refuses it with
            `SOURCE_REFUSED`). `file` is its old name, deprecated;
          - `url`: an http or https URL the worker downloads; the request then yields
            `Download` events before its results.

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
        - `gain_map`: a JPEG source's HDR gain map: `GainMap.KEEP` (default: resized with the
          image and kept in JPEG output), `DROP`, or `APPLY` (the SDR rendition, no map).
        - `variants`: several outputs from one decode, instead of `width`/`height`: a list of 1
          to 8 dicts of the arguments above (``[{"width": 320, "format": "webp"}, {"width":
          1280}]``), each taking the call's arguments for what it leaves out. The request then
          yields one `Final` per variant (its `variant` is its index in the list), largest
          first, the last terminal; no `Degraded` and no `Placeholder`.
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
          one job with identical ones in flight; the worker checks the digest before a result is
          shared or cached. Not computed while the broker says (in its `Accepted`) that it
          neither caches nor shares. For a file or URL the worker names the version it reads
          instead (file identity, URL validator); False opts out the same.
        - `priority`: the broker lane it waits in, `Priority.INTERACTIVE` (default) or
          `Priority.BULK` (behind every interactive request, never on the capacity kept for
          them: for backfills).
        - `placeholder`: a `Placeholder` event (the final's size and a ThumbHash of its
          picture) before any image (default); False asks for none.
        - `wait`: what to do when `max_in_flight` requests are in flight already: True
          (default) waits until one ends, False raises `InFlightLimitError` at once, a number
          waits that many seconds first.

        Blocks only for `wait` (and to read a `local_file`). Raises `InvalidArgumentError` (a
        `ValueError`) for arguments the protocol does not allow, `InputTooLargeError` for an
        image over the broker's limit (`max_input_bytes`), `DuplicateRequestIdError` for an id
        live in this client, `InFlightLimitError` as `wait` says, `OSError` for a `local_file`
        that cannot be read, and `ClientClosedError` once the client is closed; nothing is
        sent then.

        Use the request as a context manager (``with client.submit(...) as request:``) to
        cancel it when the block is left before it ended.
        """
        worker_file = _worker_file(worker_file, file)
        _check_wait(wait)
        _one_source(image, local_file, worker_file, url)
        if local_file is not None:
            image = read_local_file(local_file, self.max_input_bytes)
        submit, data = self._prepare(image, worker_file, url, dict(
            width=width, height=height, fit=fit, enlarge=enlarge, quality=quality, progressive=progressive,
            chroma=chroma, format=format, fail_on=fail_on, keep_profile=keep_profile, accept=accept,
            flatten=flatten, background=background, lossless=lossless, gain_map=gain_map, variants=variants,
            degraded=degraded,
            delivery=delivery,
            request_id=request_id, timeout=timeout, priority=priority, placeholder=placeholder), share)
        return Request(self, self._submit_waiting(submit, data, wait))

    def _prepare(self, image: bytes | bytearray | memoryview | None, worker_file: str | None, url: str | None,
                 spec: dict[str, Any], share: bool) -> tuple[client_pb2.Submit, bytes]:
        """The Submit and its payload, checked; shared with `AsyncClient`."""
        data = _source_bytes(image, worker_file, url)
        submit = self._build_submit(**spec)
        shares = _flag(share, "share")
        _set_source(submit, worker_file, url, shares)
        # Not hashed for nothing: the broker says in each Accepted whether it uses digests.
        if image is not None and shares and not self._loop.core.digests_unused:
            submit.source.inline.sha256 = hashlib.sha256(data).digest()
        limit = self.max_input_bytes
        if len(data) > limit:
            raise InputTooLargeError(len(data), limit)
        return submit, data

    def _prepare_info(self, image: bytes | bytearray | memoryview | None, worker_file: str | None, url: str | None,
                      fail_on: FailOn | str, request_id: str | None,
                      timeout: float | None) -> tuple[client_pb2.Submit, bytes]:
        data = _source_bytes(image, worker_file, url)
        submit = client_pb2.Submit()
        submit.request_id = wire.check_request_id(str(uuid.uuid4()) if request_id is None else request_id)
        submit.spec.fail_on = _member(FailOn, fail_on, "fail_on").wire
        submit.delivery = common_pb2.DELIVERY_INFO
        _set_source(submit, worker_file, url, True)
        if timeout is not None:
            submit.deadline_ms = _deadline_ms(timeout)
        limit = self.max_input_bytes
        if len(data) > limit:
            raise InputTooLargeError(len(data), limit)
        return submit, data

    def _acquire_slot(self, wait: bool | float, channel: _Channel) -> bool:
        """True once the request holds a slot; False when it was cancelled first."""
        if threading.current_thread() is self._thread:
            # In a future's callback: only this thread gives slots back, so waiting here
            # would wait forever.
            try:
                self._shared.limit.acquire(False)
            except InFlightLimitError as error:
                raise InFlightLimitError(f"{error} (a submit in a callback on the client's I/O thread cannot "
                                         "wait)", error.limit) from None
            return True
        return self._shared.limit.acquire(wait, lambda: not channel.is_live)

    def _submit_waiting(self, submit: client_pb2.Submit, data: bytes, wait: bool | float) -> _Channel:
        """Registers a checked request (cancellable from here on), waits for a slot of the
        in-flight limit, and hands it to the I/O thread."""
        channel = self._register(submit.request_id)
        try:
            holds_slot = self._acquire_slot(wait, channel)
        except BaseException:
            self._shared.unregister(channel)
            raise
        if holds_slot:
            self._shared.post(channel, submit, data)
        # Else it was cancelled while it waited: it never goes out.
        return channel

    def _register(self, request_id: str) -> _Channel:
        channel = _Channel(request_id)
        self._shared.register(channel)
        return channel

    def _abandon(self, channel: _Channel) -> None:
        self._shared.abandon(channel)

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

    def info(self, image: bytes | bytearray | memoryview | None = None, *,
             local_file: str | os.PathLike[str] | None = None, worker_file: str | None = None,
             url: str | None = None, file: str | None = None, fail_on: FailOn | str = FailOn.ERROR,
             request_id: str | None = None, timeout: float | None = None, wait: bool | float = True) -> ImageInfo:
        """What the image's header says (size after orientation, colour space, profile
        description, thumbnail, ...), read by a worker without decoding pixels; of a
        `worker_file` or `url` it reads no more than the header needs. The image and `wait` as
        for `submit`. Blocks until the answer; raises `RequestError` when the request fails
        (not an image, damaged as `fail_on` says, over the limits, a refused source), and the
        argument errors of `submit`."""
        worker_file = _worker_file(worker_file, file)
        _check_wait(wait)
        _one_source(image, local_file, worker_file, url)
        if local_file is not None:
            image = read_local_file(local_file, self.max_input_bytes)
        submit, data = self._prepare_info(image, worker_file, url, fail_on, request_id, timeout)
        # Interrupted (KeyboardInterrupt, say), it is cancelled rather than left running.
        with Request(self, self._submit_waiting(submit, data, wait)) as request:
            for event in request:
                if isinstance(event, Info) and event.info is not None:
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
            status: BrokerStatus = future.result(timeout)
        except FutureTimeoutError:
            raise TimeoutError(f"no status from {self._endpoint} within {timeout:g} s") from None
        return status

    # -- Lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        """Ends every outstanding request with `Failed(CLIENT_CLOSED)`, fails waiting calls,
        stops the I/O thread and closes the socket. Idempotent."""
        self._shared.request_close()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self._endpoint!r})"

    # -- Validation -----------------------------------------------------------------------

    @staticmethod
    def _build_submit(*, width: int | None, height: int | None, fit: Fit | str, enlarge: bool, quality: int | None,
                      progressive: bool, chroma: Chroma | str, format: ImageFormat | str,
                      fail_on: FailOn | str = FailOn.ERROR, keep_profile: bool = False,
                      accept: Sequence[ImageFormat | str] | None = None, flatten: bool = False,
                      background: str | int | None = None, lossless: bool = False,
                      gain_map: GainMap | str = GainMap.KEEP, variants: Sequence[dict[str, Any]] | None = None,
                      degraded: bool,
                      delivery: Delivery | str | None, request_id: str | None,
                      timeout: float | None, priority: Priority | str = Priority.INTERACTIVE,
                      placeholder: bool = True) -> client_pb2.Submit:
        submit = client_pb2.Submit()
        submit.request_id = wire.check_request_id(str(uuid.uuid4()) if request_id is None else request_id)
        spec_args: dict[str, Any] = dict(width=width, height=height, fit=fit, enlarge=enlarge, quality=quality,
                                         progressive=progressive,
                         chroma=chroma, format=format, fail_on=fail_on, keep_profile=keep_profile, accept=accept,
                         flatten=flatten, background=background, lossless=lossless, gain_map=gain_map)
        if variants is None:
            Client._fill_spec(submit.spec, **spec_args)
        else:
            if width is not None or height is not None:
                raise InvalidArgumentError("give width and height, or variants, not both")
            if isinstance(variants, (str, bytes, dict)) or not 1 <= len(variants) <= wire.MAX_VARIANTS:
                raise InvalidArgumentError(f"variants must be a list of 1 to {wire.MAX_VARIANTS} dicts of spec "
                                           f"arguments, got {variants!r}")
            for variant in variants:
                if not isinstance(variant, dict) or set(variant) - set(spec_args):
                    raise InvalidArgumentError(f"a variant is a dict of {', '.join(spec_args)}, got {variant!r}")
                Client._fill_spec(submit.variants.add(), **{**spec_args, **variant})
            if len({spec.fail_on for spec in submit.variants}) > 1:
                raise InvalidArgumentError("the variants name different fail_on levels; one decode serves them all")
        if delivery is None:
            delivery = Delivery.PROGRESSIVE if _flag(degraded, "degraded") else Delivery.FINAL
        submit.delivery = _member(Delivery, delivery, "delivery").wire
        if variants is not None and submit.delivery not in (common_pb2.DELIVERY_PROGRESSIVE, common_pb2.DELIVERY_FINAL):
            raise InvalidArgumentError("variants come as finals: not with delivery DEGRADED or INFO")
        submit.priority = _member(Priority, priority, "priority").wire
        submit.no_placeholder = not _flag(placeholder, "placeholder")
        if timeout is not None:
            submit.deadline_ms = _deadline_ms(timeout)
        return submit

    @staticmethod
    def _fill_spec(spec: common_pb2.ResizeSpec, *, width: int | None, height: int | None, fit: Fit | str,
                   enlarge: bool, quality: int | None, progressive: bool, chroma: Chroma | str,
                   format: ImageFormat | str, fail_on: FailOn | str, keep_profile: bool,
                   accept: Sequence[ImageFormat | str] | None, flatten: bool, background: str | int | None,
                   lossless: bool, gain_map: GainMap | str) -> None:
        """Checks one output's arguments and writes them into `spec`."""
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
                # As the worker reads it: a content type it does not produce is skipped.
                if member is not None:
                    spec.accept.append(member.content_type)
            if not spec.accept:
                raise InvalidArgumentError(f"accept names no known content type: {list(accept)!r}")
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
        spec.gain_map = _member(GainMap, gain_map, "gain_map").wire


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {value!r}")
    return value


_Member = TypeVar("_Member", bound=enum.Enum)


def _member(enum_type: type[_Member], value: object, name: str) -> _Member:
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


def _deadline_ms(timeout: object) -> int:
    if not _is_number(timeout) or not 0 < timeout * 1000 <= _MAX_DEADLINE_MS:
        raise InvalidArgumentError(
            f"timeout must be a positive number of seconds up to {_MAX_DEADLINE_MS / 1000:g}, got {timeout!r}")
    return max(1, math.ceil(timeout * 1000))


def _check_wait(wait: object) -> None:
    if isinstance(wait, bool):
        return
    if not _is_number(wait) or not 0 <= wait < math.inf:
        raise InvalidArgumentError(f"wait must be True, False or a number of seconds >= 0, got {wait!r}")


def _worker_file(worker_file: str | None, file: str | None) -> str | None:
    """`worker_file`, or the deprecated `file` that meant the same."""
    if file is None:
        return worker_file
    if worker_file is not None:
        raise InvalidArgumentError("give worker_file (file is its deprecated name), not both")
    warnings.warn("file= names a path on the worker (under its --files-root), not on this machine: call it "
                  "worker_file=, or use local_file= to send a file from here", DeprecationWarning, stacklevel=3)
    return file


def _one_source(image: object, local_file: object, worker_file: object, url: object) -> None:
    given = [name for name, value in (("image", image), ("local_file", local_file), ("worker_file", worker_file),
                                      ("url", url)) if value is not None]
    if len(given) != 1:
        raise InvalidArgumentError("give exactly one of image, local_file, worker_file and url, got "
                                   f"{', '.join(given) or 'none'}")


def read_local_file(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of a file on this machine, refused without reading it whole when it is over
    `limit` (`InputTooLargeError`); `OSError` when it cannot be read."""
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"local_file must be a path (str or os.PathLike), got {type(path).__name__}")
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size > limit:
            raise InputTooLargeError(size, limit)
        data = file.read(limit + 1)
    if len(data) > limit:  # it grew meanwhile
        raise InputTooLargeError(len(data), limit)
    return data


def _source_bytes(image: object, worker_file: object, url: object) -> bytes:
    """The payload for exactly one of `image`, `worker_file`, `url`: the image's bytes (a copy
    of a mutable buffer, which the caller may reuse while the I/O thread sends), or nothing."""
    given = [name for name, value in (("image", image), ("worker_file", worker_file), ("url", url))
             if value is not None]
    if len(given) != 1:
        raise InvalidArgumentError("give exactly one of image, local_file, worker_file and url, got "
                                   f"{', '.join(given) or 'none'}")
    if image is not None:
        if not isinstance(image, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"image must be bytes, got {type(image).__name__}")
        return image if isinstance(image, bytes) else bytes(image)
    for name, value, limit in (("worker_file", worker_file, _MAX_SOURCE_PATH_BYTES),
                               ("url", url, _MAX_SOURCE_URL_BYTES)):
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
        size = len(value.encode("utf-8", "surrogatepass"))
        if not 1 <= size <= limit or "\0" in value:
            raise InvalidArgumentError(f"{name} must be 1 to {limit} bytes of UTF-8 without NUL, got {size} bytes")
    return b""


def _set_source(submit: client_pb2.Submit, worker_file: str | None, url: str | None, shares: bool) -> None:
    if worker_file is not None:
        submit.source.file.path = worker_file
        submit.source.no_share = not shares
    elif url is not None:
        submit.source.url.url = url
        submit.source.no_share = not shares
