"""The protocol's enumerations as Python enums.

Each member maps one to one to a value of common.proto or client.proto; the tests check that
none is missing. `ErrorCode` also has a few codes this library decides on its own (numbered
from 1000, never sent by a broker).
"""

from __future__ import annotations

import enum

from ._proto import client_pb2, common_pb2

__all__ = ["ErrorCode", "Fit", "Chroma", "ImageFormat", "Delivery", "CancelOutcome"]


class ErrorCode(enum.IntEnum):
    """Why a request or call failed: common.proto's `ErrorCode`, same names and numbers, plus
    codes decided by this client (>= 1000)."""

    UNSPECIFIED = 0
    DUPLICATE_ID = 1
    WORKER_LOST = 2
    OVERLOADED = 3
    MALFORMED = 4
    INVALID_ARGUMENT = 5
    UNKNOWN_FORMAT = 6
    NOT_JPEG = 6  # UNKNOWN_FORMAT's first name, from when JPEG was the only format read
    EMPTY = 7
    TRUNCATED = 8
    CORRUPT = 9
    UNSUPPORTED = 10
    TOO_LARGE = 11
    TOO_MANY_SCANS = 12
    ENCODE_FAILED = 13
    INTERNAL = 14
    BROKER_SHUTDOWN = 15
    #: From the broker at the request's deadline, or from this client when nothing final
    #: was heard one heartbeat interval after it.
    DEADLINE_EXCEEDED = 16
    CLIENT_SILENT = 17
    #: From this client: a Sync showed the broker no longer holds the request (its end was
    #: lost with a connection), or the answer to a cancel was lost.
    REQUEST_LOST = 18
    UNAUTHORIZED = 19
    DIGEST_MISMATCH = 20
    BATCH_ENDED = 21
    SOURCE_REFUSED = 22
    SOURCE_UNAVAILABLE = 23
    #: From the broker: the client stopped reading while its results waited there; they
    #: were dropped (see FLOW TO THE CLIENT in client.proto).
    CLIENT_NOT_READING = 24

    #: No broker answered at the endpoint within the silence limit (none listening, or the
    #: CURVE handshake failed).
    BROKER_UNREACHABLE = 1001
    #: The broker fell silent for the silence limit while the request was live, or restarted
    #: and the request could not be submitted again.
    BROKER_LOST = 1002
    #: The client was closed before the request ended.
    CLIENT_CLOSED = 1003
    #: The client's socket failed; the client is closed.
    TRANSPORT = 1004

    @property
    def is_local(self) -> bool:
        """Whether only this library uses the code (the broker never sends it)."""
        return self >= 1000

    @classmethod
    def from_wire(cls, value: int) -> ErrorCode:
        try:
            code = cls(value)
        except ValueError:
            return cls.UNSPECIFIED
        return cls.UNSPECIFIED if code.is_local else code


class Fit(str, enum.Enum):
    """How the output box is applied (common.proto's `Fit`)."""

    #: Keep the aspect ratio, both sides within the box. Default.
    INSIDE = "inside"
    #: Keep the aspect ratio, cover the box, crop centred to exactly the box.
    COVER = "cover"
    #: Ignore the aspect ratio; stretch to exactly the box.
    FILL = "fill"

    @property
    def wire(self) -> common_pb2.Fit:
        return {Fit.INSIDE: common_pb2.FIT_INSIDE, Fit.COVER: common_pb2.FIT_COVER,
                Fit.FILL: common_pb2.FIT_FILL}[self]


class Chroma(str, enum.Enum):
    """Chroma subsampling of JPEG output."""

    YUV420 = "420"
    YUV444 = "444"

    @property
    def wire(self) -> common_pb2.Chroma:
        return common_pb2.CHROMA_YUV444 if self is Chroma.YUV444 else common_pb2.CHROMA_YUV420


class FailOn(str, enum.Enum):
    """Which damage in the input fails the request, least sensitive first; each level fails
    on what the ones before it fail on, and more. Fatal errors always fail."""

    #: No warning fails: damaged parts decode as the decoder repairs them.
    NONE = "none"
    #: Data that ends early fails (TRUNCATED).
    TRUNCATED = "truncated"
    #: Also damaged image data (CORRUPT); stray bytes that lose no pixels are accepted. Default.
    ERROR = "error"
    #: Every decoder warning fails.
    WARNING = "warning"

    @property
    def wire(self) -> common_pb2.FailOn:
        return {FailOn.NONE: common_pb2.FAIL_ON_NONE, FailOn.TRUNCATED: common_pb2.FAIL_ON_TRUNCATED,
                FailOn.ERROR: common_pb2.FAIL_ON_DEFAULT, FailOn.WARNING: common_pb2.FAIL_ON_WARNING}[self]


class ImageFormat(str, enum.Enum):
    """Encoding of an output image."""

    JPEG = "jpeg"
    #: Binary PGM (greyscale) or PPM (colour), maxval 255.
    PNM = "pnm"
    #: 8-bit grey, RGB or RGBA.
    PNG = "png"
    #: Lossy at the quality asked for, or lossless; with alpha when the image has transparency.
    WEBP = "webp"
    #: AV1 in HEIF at a fast encoder speed; with alpha when the image has transparency.
    AVIF = "avif"

    @property
    def wire(self) -> common_pb2.ImageFormat:
        return _FORMAT_WIRE[self]

    @property
    def content_type(self) -> str:
        """The media type naming the format in `accept` and in results."""
        return _CONTENT_TYPES[self]

    @classmethod
    def from_wire(cls, value: int) -> ImageFormat | None:
        return {int(wire): member for member, wire in _FORMAT_WIRE.items()}.get(value)

    @classmethod
    def from_content_type(cls, content_type: str) -> ImageFormat | None:
        """The format an `accept` entry names, read as the worker reads it (spaces and tabs
        around it trimmed, parameters dropped, case ignored, aliases known); None for a
        type the service does not produce. The rules are shared with the Swift side through
        Tests/Shared/content-types.json."""
        bare = content_type.split(";", 1)[0].strip(" \t").lower()
        for member, name in _CONTENT_TYPES.items():
            if name == bare:
                return member
        return _CONTENT_TYPE_ALIASES.get(bare)


_FORMAT_WIRE: dict[ImageFormat, common_pb2.ImageFormat] = {
    ImageFormat.JPEG: common_pb2.IMAGE_FORMAT_JPEG, ImageFormat.PNM: common_pb2.IMAGE_FORMAT_PNM,
    ImageFormat.PNG: common_pb2.IMAGE_FORMAT_PNG, ImageFormat.WEBP: common_pb2.IMAGE_FORMAT_WEBP,
    ImageFormat.AVIF: common_pb2.IMAGE_FORMAT_AVIF,
}
_CONTENT_TYPE_ALIASES = {
    "image/jpg": ImageFormat.JPEG, "image/pjpeg": ImageFormat.JPEG,
    "image/x-portable-pixmap": ImageFormat.PNM, "image/x-portable-graymap": ImageFormat.PNM,
}
_CONTENT_TYPES = {
    ImageFormat.JPEG: "image/jpeg", ImageFormat.PNM: "image/x-portable-anymap", ImageFormat.PNG: "image/png",
    ImageFormat.WEBP: "image/webp", ImageFormat.AVIF: "image/avif",
}


class Delivery(str, enum.Enum):
    """Which results a request wants."""

    #: Zero or one degraded result, then the final one. Default (`degraded=True`).
    PROGRESSIVE = "progressive"
    #: The final result only (`degraded=False`).
    FINAL = "final"
    #: One degraded result, which is terminal.
    DEGRADED = "degraded"

    @property
    def wire(self) -> common_pb2.Delivery:
        return {Delivery.PROGRESSIVE: common_pb2.DELIVERY_PROGRESSIVE, Delivery.FINAL: common_pb2.DELIVERY_FINAL,
                Delivery.DEGRADED: common_pb2.DELIVERY_DEGRADED}[self]


class Priority(str, enum.Enum):
    """Which lane a request waits in at the broker (client.proto's PRIORITIES AND FAIR SHARE)."""

    #: Someone waits for it (default): dispatched before any bulk request, with a share of
    #: the workers kept for this lane.
    INTERACTIVE = "interactive"
    #: Nobody watches it (a backfill): dispatched when no interactive request waits, never
    #: on the share kept for interactive ones.
    BULK = "bulk"

    @property
    def wire(self) -> client_pb2.Priority:
        return client_pb2.PRIORITY_BULK if self is Priority.BULK else client_pb2.PRIORITY_INTERACTIVE


class GainMap(str, enum.Enum):
    """What becomes of a JPEG source's HDR gain map (UltraHDR, ISO 21496-1): common.proto's
    `GainMap`."""

    #: Resized with the image and written into JPEG output, so it still shows as HDR (default);
    #: other output formats leave it out, with a note.
    KEEP = "keep"
    #: Left out: a plain SDR JPEG.
    DROP = "drop"
    #: The SDR rendition without a map: the base itself when it is SDR (as phones write it),
    #: an HDR base tone-mapped through the map.
    APPLY = "apply"

    @property
    def wire(self) -> common_pb2.GainMap:
        return {GainMap.KEEP: common_pb2.GAIN_MAP_KEEP, GainMap.DROP: common_pb2.GAIN_MAP_DROP,
                GainMap.APPLY: common_pb2.GAIN_MAP_APPLY}[self]


class CancelOutcome(str, enum.Enum):
    """The broker's answer to a cancel (client.proto's `CancelAck.Outcome`)."""

    #: This cancel ended the request.
    CANCELLED = "cancelled"
    #: The request had already ended (result, failure or an earlier cancel).
    FINISHED = "finished"
    #: No live or recently ended request has this id.
    UNKNOWN = "unknown"

    @classmethod
    def from_wire(cls, value: int) -> CancelOutcome:
        ack = client_pb2.CancelAck
        outcomes: dict[int, CancelOutcome] = {ack.OUTCOME_CANCELLED: cls.CANCELLED, ack.OUTCOME_FINISHED: cls.FINISHED}
        return outcomes.get(value, cls.UNKNOWN)
