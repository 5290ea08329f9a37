"""Framing of client <-> broker messages (common.proto, FRAMING).

Every message is one ZeroMQ multipart message ``[tag][header][payload?]``: the ASCII tag
``ENL-C1``, one protobuf envelope (`ClientToBroker` or `BrokerToClient`), and for the kinds
that carry an image (Submit, Result) one payload frame. A DEALER sends these frames as they
are: no empty delimiter frame, no routing id (the broker's ROUTER adds and strips it).
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from ._proto import client_pb2
from .errors import InvalidRequestIdError

TAG = b"ENL-C1"
MAX_HEADER_BYTES = 65_536
MAX_REQUEST_ID_BYTES = 64
MAX_DIMENSION = 16_384
#: Outputs one Submit may name (client.proto's VARIANTS).
MAX_VARIANTS = 8
#: Ids per Sync; a client waiting for more sends several.
MAX_SYNC_REQUEST_IDS = 512

# The broker -> client kinds that carry a payload frame.
_WITH_PAYLOAD = frozenset({"result"})


class MalformedMessage(ValueError):
    """A message from the broker that breaks the framing rules."""


def encode(message: client_pb2.ClientToBroker, payload: bytes | None = None) -> list[bytes]:
    """The frames of one client -> broker message."""
    frames = [TAG, message.SerializeToString()]
    if payload is not None:
        frames.append(payload)
    return frames


def decode(frames: list[bytes]) -> tuple[client_pb2.BrokerToClient, str, bytes | None]:
    """The envelope, its kind and its payload (None for kinds without one).

    Raises `MalformedMessage` for a wrong tag, a header that does not decode or is too
    large, no known kind, or a wrong number of frames.
    """
    if len(frames) < 2:
        raise MalformedMessage(f"expected a tag and a header frame, got {len(frames)} frame(s)")
    if bytes(frames[0]) != TAG:
        raise MalformedMessage(f"expected protocol tag {TAG.decode()}, got {bytes(frames[0])[:16]!r}")
    header = bytes(frames[1])
    if len(header) > MAX_HEADER_BYTES:
        raise MalformedMessage(f"header frame of {len(header)} bytes exceeds {MAX_HEADER_BYTES}")
    message = client_pb2.BrokerToClient()
    try:
        message.ParseFromString(header)
    except DecodeError as error:
        raise MalformedMessage(f"header is not a valid BrokerToClient: {error}") from None
    kind = message.WhichOneof("kind")
    if kind is None:
        raise MalformedMessage("BrokerToClient has no known kind set")
    expected = 3 if kind in _WITH_PAYLOAD else 2
    if len(frames) != expected:
        raise MalformedMessage(f"{kind} carries {expected} frames, got {len(frames)}")
    return message, kind, (bytes(frames[2]) if expected == 3 else None)


def check_request_id(request_id: object) -> str:
    """`request_id` if it is 1 to 64 bytes of UTF-8; raises InvalidRequestIdError otherwise."""
    if not isinstance(request_id, str):
        raise InvalidRequestIdError(f"request id must be a str, got {type(request_id).__name__}")
    try:
        length = len(request_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequestIdError("request id is not valid UTF-8 (lone surrogate)") from None
    if not 1 <= length <= MAX_REQUEST_ID_BYTES:
        raise InvalidRequestIdError(
            f"request id must be 1 to {MAX_REQUEST_ID_BYTES} bytes of UTF-8, got {length} bytes")
    return request_id
