from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
PRIORITY_BULK: Priority
PRIORITY_INTERACTIVE: Priority
PRIORITY_UNSPECIFIED: Priority

class Accepted(_message.Message):
    __slots__ = ["broker_instance", "deadline_ms", "digests_unused", "heartbeat_interval_ms", "request_id"]
    BROKER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DIGESTS_UNUSED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    broker_instance: int
    deadline_ms: int
    digests_unused: bool
    heartbeat_interval_ms: int
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., broker_instance: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., deadline_ms: _Optional[int] = ..., digests_unused: bool = ...) -> None: ...

class BatchEnded(_message.Message):
    __slots__ = ["batch_id", "code", "index", "message", "outcome", "request_id"]
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_CANCELLED: BatchEnded.Outcome
    OUTCOME_COMPLETED: BatchEnded.Outcome
    OUTCOME_FAILED: BatchEnded.Outcome
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_UNSPECIFIED: BatchEnded.Outcome
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    code: _common_pb2.ErrorCode
    index: int
    message: str
    outcome: BatchEnded.Outcome
    request_id: str
    def __init__(self, batch_id: _Optional[str] = ..., outcome: _Optional[_Union[BatchEnded.Outcome, str]] = ..., index: _Optional[int] = ..., request_id: _Optional[str] = ..., code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class BatchItem(_message.Message):
    __slots__ = ["batch_id", "index", "size"]
    BATCH_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    batch_id: str
    index: int
    size: int
    def __init__(self, batch_id: _Optional[str] = ..., index: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class BrokerToClient(_message.Message):
    __slots__ = ["accepted", "batch_ended", "cancel_ack", "cancelled", "download", "error", "failed", "pong", "rejected", "result", "started", "status_reply", "sync_reply"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    BATCH_ENDED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ACK_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    PONG_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STATUS_REPLY_FIELD_NUMBER: _ClassVar[int]
    SYNC_REPLY_FIELD_NUMBER: _ClassVar[int]
    accepted: Accepted
    batch_ended: BatchEnded
    cancel_ack: CancelAck
    cancelled: Cancelled
    download: Download
    error: _common_pb2.Error
    failed: Failed
    pong: Pong
    rejected: Rejected
    result: Result
    started: Started
    status_reply: StatusReply
    sync_reply: SyncReply
    def __init__(self, accepted: _Optional[_Union[Accepted, _Mapping]] = ..., started: _Optional[_Union[Started, _Mapping]] = ..., result: _Optional[_Union[Result, _Mapping]] = ..., failed: _Optional[_Union[Failed, _Mapping]] = ..., cancelled: _Optional[_Union[Cancelled, _Mapping]] = ..., rejected: _Optional[_Union[Rejected, _Mapping]] = ..., cancel_ack: _Optional[_Union[CancelAck, _Mapping]] = ..., status_reply: _Optional[_Union[StatusReply, _Mapping]] = ..., pong: _Optional[_Union[Pong, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., sync_reply: _Optional[_Union[SyncReply, _Mapping]] = ..., batch_ended: _Optional[_Union[BatchEnded, _Mapping]] = ..., download: _Optional[_Union[Download, _Mapping]] = ...) -> None: ...

class CacheStatus(_message.Message):
    __slots__ = ["bytes", "entries", "evictions", "limit_bytes"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    entries: int
    evictions: int
    limit_bytes: int
    def __init__(self, entries: _Optional[int] = ..., bytes: _Optional[int] = ..., limit_bytes: _Optional[int] = ..., evictions: _Optional[int] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ["request_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class CancelAck(_message.Message):
    __slots__ = ["outcome", "request_id"]
    class Outcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    OUTCOME_CANCELLED: CancelAck.Outcome
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FINISHED: CancelAck.Outcome
    OUTCOME_UNKNOWN: CancelAck.Outcome
    OUTCOME_UNSPECIFIED: CancelAck.Outcome
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    outcome: CancelAck.Outcome
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., outcome: _Optional[_Union[CancelAck.Outcome, str]] = ...) -> None: ...

class Cancelled(_message.Message):
    __slots__ = ["request_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class ClientToBroker(_message.Message):
    __slots__ = ["cancel", "ping", "status_request", "submit", "sync"]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    PING_FIELD_NUMBER: _ClassVar[int]
    STATUS_REQUEST_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    cancel: Cancel
    ping: Ping
    status_request: StatusRequest
    submit: Submit
    sync: Sync
    def __init__(self, submit: _Optional[_Union[Submit, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., status_request: _Optional[_Union[StatusRequest, _Mapping]] = ..., ping: _Optional[_Union[Ping, _Mapping]] = ..., sync: _Optional[_Union[Sync, _Mapping]] = ...) -> None: ...

class Download(_message.Message):
    __slots__ = ["bytes", "expected_bytes", "phase", "request_id"]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    bytes: int
    expected_bytes: int
    phase: _common_pb2.DownloadPhase
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., phase: _Optional[_Union[_common_pb2.DownloadPhase, str]] = ..., bytes: _Optional[int] = ..., expected_bytes: _Optional[int] = ...) -> None: ...

class Failed(_message.Message):
    __slots__ = ["code", "message", "request_id"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.ErrorCode
    message: str
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Ping(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Pong(_message.Message):
    __slots__ = ["broker_instance", "heartbeat_interval_ms", "max_input_bytes"]
    BROKER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    broker_instance: int
    heartbeat_interval_ms: int
    max_input_bytes: int
    def __init__(self, heartbeat_interval_ms: _Optional[int] = ..., broker_instance: _Optional[int] = ..., max_input_bytes: _Optional[int] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ["code", "message", "request_id", "retry_after_ms"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    code: _common_pb2.ErrorCode
    message: str
    request_id: str
    retry_after_ms: int
    def __init__(self, request_id: _Optional[str] = ..., code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class Result(_message.Message):
    __slots__ = ["cached", "content_type", "format", "height", "info", "notes", "placeholder", "request_id", "stage", "terminal", "variant", "width"]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    cached: bool
    content_type: str
    format: _common_pb2.ImageFormat
    height: int
    info: _common_pb2.ImageInfo
    notes: _containers.RepeatedScalarFieldContainer[str]
    placeholder: bytes
    request_id: str
    stage: _common_pb2.Stage
    terminal: bool
    variant: int
    width: int
    def __init__(self, request_id: _Optional[str] = ..., stage: _Optional[_Union[_common_pb2.Stage, str]] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., format: _Optional[_Union[_common_pb2.ImageFormat, str]] = ..., terminal: bool = ..., info: _Optional[_Union[_common_pb2.ImageInfo, _Mapping]] = ..., content_type: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., cached: bool = ..., placeholder: _Optional[bytes] = ..., variant: _Optional[int] = ...) -> None: ...

class Started(_message.Message):
    __slots__ = ["attempt", "request_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ["cache", "client_bytes_waiting", "clients", "in_flight", "queue_depth", "queue_limit", "totals", "uptime_ms", "workers"]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_FIELD_NUMBER: _ClassVar[int]
    CLIENT_BYTES_WAITING_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    QUEUE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    UPTIME_MS_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    cache: CacheStatus
    client_bytes_waiting: int
    clients: int
    in_flight: int
    queue_depth: int
    queue_limit: int
    totals: Totals
    uptime_ms: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerStatus]
    def __init__(self, workers: _Optional[_Iterable[_Union[WorkerStatus, _Mapping]]] = ..., queue_depth: _Optional[int] = ..., queue_limit: _Optional[int] = ..., in_flight: _Optional[int] = ..., clients: _Optional[int] = ..., uptime_ms: _Optional[int] = ..., totals: _Optional[_Union[Totals, _Mapping]] = ..., client_bytes_waiting: _Optional[int] = ..., cache: _Optional[_Union[CacheStatus, _Mapping]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Submit(_message.Message):
    __slots__ = ["batch", "deadline_ms", "delivery", "no_placeholder", "priority", "request_id", "source", "spec", "variants"]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    NO_PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    batch: BatchItem
    deadline_ms: int
    delivery: _common_pb2.Delivery
    no_placeholder: bool
    priority: Priority
    request_id: str
    source: _common_pb2.ImageSource
    spec: _common_pb2.ResizeSpec
    variants: _containers.RepeatedCompositeFieldContainer[_common_pb2.ResizeSpec]
    def __init__(self, request_id: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.ResizeSpec, _Mapping]] = ..., delivery: _Optional[_Union[_common_pb2.Delivery, str]] = ..., deadline_ms: _Optional[int] = ..., source: _Optional[_Union[_common_pb2.ImageSource, _Mapping]] = ..., batch: _Optional[_Union[BatchItem, _Mapping]] = ..., priority: _Optional[_Union[Priority, str]] = ..., no_placeholder: bool = ..., variants: _Optional[_Iterable[_Union[_common_pb2.ResizeSpec, _Mapping]]] = ...) -> None: ...

class Sync(_message.Message):
    __slots__ = ["nonce", "request_ids"]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, request_ids: _Optional[_Iterable[str]] = ..., nonce: _Optional[int] = ...) -> None: ...

class SyncReply(_message.Message):
    __slots__ = ["broker_instance", "nonce", "unknown_request_ids"]
    BROKER_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    broker_instance: int
    nonce: int
    unknown_request_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, unknown_request_ids: _Optional[_Iterable[str]] = ..., nonce: _Optional[int] = ..., broker_instance: _Optional[int] = ...) -> None: ...

class Totals(_message.Message):
    __slots__ = ["accepted", "batches_cancelled", "batches_completed", "batches_failed", "cache_hits", "cache_misses", "cancel_acks_timed_out", "cancelled", "client_sends_deferred", "clients_vanished", "deadlines_exceeded", "duplicate_ids", "failed", "finished", "jobs_quarantined", "jobs_requeued", "jobs_shared", "late_results_dropped", "malformed_dropped", "protocol_breaches", "rejected", "submitted", "unroutable", "workers_disconnected", "workers_lost"]
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FAILED_FIELD_NUMBER: _ClassVar[int]
    CACHE_HITS_FIELD_NUMBER: _ClassVar[int]
    CACHE_MISSES_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_ACKS_TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    CLIENTS_VANISHED_FIELD_NUMBER: _ClassVar[int]
    CLIENT_SENDS_DEFERRED_FIELD_NUMBER: _ClassVar[int]
    DEADLINES_EXCEEDED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_IDS_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    JOBS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    JOBS_REQUEUED_FIELD_NUMBER: _ClassVar[int]
    JOBS_SHARED_FIELD_NUMBER: _ClassVar[int]
    LATE_RESULTS_DROPPED_FIELD_NUMBER: _ClassVar[int]
    MALFORMED_DROPPED_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_BREACHES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    UNROUTABLE_FIELD_NUMBER: _ClassVar[int]
    WORKERS_DISCONNECTED_FIELD_NUMBER: _ClassVar[int]
    WORKERS_LOST_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    batches_cancelled: int
    batches_completed: int
    batches_failed: int
    cache_hits: int
    cache_misses: int
    cancel_acks_timed_out: int
    cancelled: int
    client_sends_deferred: int
    clients_vanished: int
    deadlines_exceeded: int
    duplicate_ids: int
    failed: int
    finished: int
    jobs_quarantined: int
    jobs_requeued: int
    jobs_shared: int
    late_results_dropped: int
    malformed_dropped: int
    protocol_breaches: int
    rejected: int
    submitted: int
    unroutable: int
    workers_disconnected: int
    workers_lost: int
    def __init__(self, submitted: _Optional[int] = ..., accepted: _Optional[int] = ..., finished: _Optional[int] = ..., failed: _Optional[int] = ..., cancelled: _Optional[int] = ..., rejected: _Optional[int] = ..., duplicate_ids: _Optional[int] = ..., late_results_dropped: _Optional[int] = ..., malformed_dropped: _Optional[int] = ..., workers_lost: _Optional[int] = ..., workers_disconnected: _Optional[int] = ..., jobs_requeued: _Optional[int] = ..., clients_vanished: _Optional[int] = ..., unroutable: _Optional[int] = ..., cancel_acks_timed_out: _Optional[int] = ..., deadlines_exceeded: _Optional[int] = ..., client_sends_deferred: _Optional[int] = ..., jobs_quarantined: _Optional[int] = ..., protocol_breaches: _Optional[int] = ..., cache_hits: _Optional[int] = ..., cache_misses: _Optional[int] = ..., jobs_shared: _Optional[int] = ..., batches_completed: _Optional[int] = ..., batches_failed: _Optional[int] = ..., batches_cancelled: _Optional[int] = ...) -> None: ...

class WorkerStatus(_message.Message):
    __slots__ = ["capacity", "id", "in_flight", "last_seen_ms_ago", "name", "pid"]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_AGO_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    capacity: int
    id: str
    in_flight: int
    last_seen_ms_ago: int
    name: str
    pid: int
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., pid: _Optional[int] = ..., capacity: _Optional[int] = ..., in_flight: _Optional[int] = ..., last_seen_ms_ago: _Optional[int] = ...) -> None: ...

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
