"""Python client for Enlarger, the ZeroMQ image-resize job service.

    import enlarger

    with enlarger.Client() as client:        # $ENLARGER_BROKER, else `enlarger serve`'s socket
        with client.submit(jpeg_bytes, width=320, height=240) as request:
            for event in request:
                ...

    async with enlarger.AsyncClient() as client:
        async with client.submit(jpeg_bytes, width=320) as request:
            async for event in request:
                ...

See `Client` for the threading, strict-cancel and liveness rules, `enlarger.events` for what
a request yields, `enlarger.keys.generate_key_pair` (``python -m enlarger keygen``) for CURVE
keys.
"""

from .aio import AsyncClient, AsyncRequest, PendingRequest
from .client import DEFAULT_MAX_IN_FLIGHT, Client, default_endpoint
from .codes import CancelOutcome, Chroma, Delivery, ErrorCode, FailOn, Fit, GainMap, ImageFormat, Priority
from .errors import (BrokerLostError, BrokerUnreachableError, CallFailedError, ClientClosedError,
                     DuplicateRequestIdError, EnlargerError, InFlightLimitError, InputTooLargeError,
                     InsecureEndpointError, InvalidArgumentError, InvalidRequestIdError, KeyFileError, RequestError)
from .events import (Accepted, BrokerStatus, Cancelled, Degraded, Download, Event, Failed, Final, ImageInfo, Info,
                     Placeholder, Rejected, Result, Started, Totals, WorkerStatus, CacheStatus)
from .keys import KeyFilePaths, generate_key_pair
from .request import Request

__version__ = "0.1.0"

__all__ = [
    "Client", "Request", "AsyncClient", "AsyncRequest", "PendingRequest", "default_endpoint",
    "DEFAULT_MAX_IN_FLIGHT", "generate_key_pair", "KeyFilePaths",
    "Event", "Accepted", "Started", "Download", "Placeholder", "Result", "Degraded", "Final", "Info", "ImageInfo",
    "Failed", "Rejected",
    "Cancelled",
    "BrokerStatus", "WorkerStatus", "Totals", "CacheStatus",
    "ErrorCode", "Fit", "Chroma", "ImageFormat", "FailOn", "Delivery", "Priority", "GainMap", "CancelOutcome",
    "EnlargerError", "InvalidArgumentError", "InvalidRequestIdError", "InputTooLargeError",
    "DuplicateRequestIdError", "KeyFileError", "InsecureEndpointError", "InFlightLimitError", "CallFailedError", "BrokerUnreachableError",
    "BrokerLostError", "ClientClosedError", "RequestError",
]
