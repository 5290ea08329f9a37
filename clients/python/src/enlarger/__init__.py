"""Python client for Enlarger, the ZeroMQ image-resize job service.

    import enlarger

    with enlarger.Client("ipc:///tmp/enlarger-0/clients.sock") as client:
        for event in client.submit(jpeg_bytes, width=320, height=240):
            ...

See `Client` for the threading, strict-cancel and liveness rules, `enlarger.events` for what
a request yields.
"""

from .client import Client
from .codes import CancelOutcome, Chroma, Delivery, ErrorCode, FailOn, Fit, ImageFormat
from .errors import (BrokerLostError, BrokerUnreachableError, CallFailedError, ClientClosedError,
                     DuplicateRequestIdError, EnlargerError, InputTooLargeError, InvalidArgumentError,
                     InvalidRequestIdError, KeyFileError, RequestError)
from .events import (Accepted, BrokerStatus, Cancelled, Degraded, Download, Event, Failed, Final, ImageInfo, Info, Rejected,
                     Result, Started, Totals, WorkerStatus, CacheStatus)
from .request import Request

__version__ = "0.1.0"

__all__ = [
    "Client", "Request",
    "Event", "Accepted", "Started", "Download", "Result", "Degraded", "Final", "Info", "ImageInfo", "Failed", "Rejected",
    "Cancelled",
    "BrokerStatus", "WorkerStatus", "Totals", "CacheStatus",
    "ErrorCode", "Fit", "Chroma", "ImageFormat", "FailOn", "Delivery", "CancelOutcome",
    "EnlargerError", "InvalidArgumentError", "InvalidRequestIdError", "InputTooLargeError",
    "DuplicateRequestIdError", "KeyFileError", "CallFailedError", "BrokerUnreachableError",
    "BrokerLostError", "ClientClosedError", "RequestError",
]
