from . import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BrokerToWorker(_message.Message):
    __slots__ = ["cancel_job", "disconnect", "error", "heartbeat", "job"]
    CANCEL_JOB_FIELD_NUMBER: _ClassVar[int]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    cancel_job: CancelJob
    disconnect: Disconnect
    error: _common_pb2.Error
    heartbeat: Heartbeat
    job: Job
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., cancel_job: _Optional[_Union[CancelJob, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., disconnect: _Optional[_Union[Disconnect, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class CancelJob(_message.Message):
    __slots__ = ["attempt", "job_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    job_id: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class Disconnect(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Job(_message.Message):
    __slots__ = ["attempt", "delivery", "files_scope", "job_id", "placeholder", "principal", "request_id", "source", "spec", "variants"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_FIELD_NUMBER: _ClassVar[int]
    FILES_SCOPE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    delivery: _common_pb2.Delivery
    files_scope: str
    job_id: int
    placeholder: bool
    principal: str
    request_id: str
    source: _common_pb2.ImageSource
    spec: _common_pb2.ResizeSpec
    variants: _containers.RepeatedCompositeFieldContainer[JobVariant]
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., request_id: _Optional[str] = ..., spec: _Optional[_Union[_common_pb2.ResizeSpec, _Mapping]] = ..., delivery: _Optional[_Union[_common_pb2.Delivery, str]] = ..., source: _Optional[_Union[_common_pb2.ImageSource, _Mapping]] = ..., placeholder: bool = ..., variants: _Optional[_Iterable[_Union[JobVariant, _Mapping]]] = ..., files_scope: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class JobAttempt(_message.Message):
    __slots__ = ["attempt", "job_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    job_id: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class JobCancelled(_message.Message):
    __slots__ = ["attempt", "job_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    job_id: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class JobDownload(_message.Message):
    __slots__ = ["attempt", "bytes", "expected_bytes", "job_id", "phase"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    bytes: int
    expected_bytes: int
    job_id: int
    phase: _common_pb2.DownloadPhase
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., phase: _Optional[_Union[_common_pb2.DownloadPhase, str]] = ..., bytes: _Optional[int] = ..., expected_bytes: _Optional[int] = ...) -> None: ...

class JobFailed(_message.Message):
    __slots__ = ["attempt", "code", "job_id", "message"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    code: _common_pb2.ErrorCode
    job_id: int
    message: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., code: _Optional[_Union[_common_pb2.ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ["attempt", "content_type", "digest_verified", "format", "height", "info", "job_id", "notes", "placeholder", "stage", "terminal", "variant", "width"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_VERIFIED_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    content_type: str
    digest_verified: bool
    format: _common_pb2.ImageFormat
    height: int
    info: _common_pb2.ImageInfo
    job_id: int
    notes: _containers.RepeatedScalarFieldContainer[str]
    placeholder: bytes
    stage: _common_pb2.Stage
    terminal: bool
    variant: int
    width: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., stage: _Optional[_Union[_common_pb2.Stage, str]] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., format: _Optional[_Union[_common_pb2.ImageFormat, str]] = ..., terminal: bool = ..., info: _Optional[_Union[_common_pb2.ImageInfo, _Mapping]] = ..., content_type: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., digest_verified: bool = ..., placeholder: _Optional[bytes] = ..., variant: _Optional[int] = ...) -> None: ...

class JobSourceOpened(_message.Message):
    __slots__ = ["attempt", "identity", "job_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    identity: bytes
    job_id: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., identity: _Optional[bytes] = ...) -> None: ...

class JobStarted(_message.Message):
    __slots__ = ["attempt", "job_id"]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    job_id: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class JobVariant(_message.Message):
    __slots__ = ["index", "spec"]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    index: int
    spec: _common_pb2.ResizeSpec
    def __init__(self, index: _Optional[int] = ..., spec: _Optional[_Union[_common_pb2.ResizeSpec, _Mapping]] = ...) -> None: ...

class Occupancy(_message.Message):
    __slots__ = ["busy_threads", "stopping"]
    BUSY_THREADS_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    busy_threads: int
    stopping: _containers.RepeatedCompositeFieldContainer[JobAttempt]
    def __init__(self, busy_threads: _Optional[int] = ..., stopping: _Optional[_Iterable[_Union[JobAttempt, _Mapping]]] = ...) -> None: ...

class Ready(_message.Message):
    __slots__ = ["busy_threads", "capacity", "pid", "worker_name"]
    BUSY_THREADS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    WORKER_NAME_FIELD_NUMBER: _ClassVar[int]
    busy_threads: int
    capacity: int
    pid: int
    worker_name: str
    def __init__(self, capacity: _Optional[int] = ..., worker_name: _Optional[str] = ..., pid: _Optional[int] = ..., busy_threads: _Optional[int] = ...) -> None: ...

class WorkerToBroker(_message.Message):
    __slots__ = ["disconnect", "download", "heartbeat", "job_cancelled", "job_failed", "job_result", "job_started", "occupancy", "ready", "source_opened"]
    DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOB_CANCELLED_FIELD_NUMBER: _ClassVar[int]
    JOB_FAILED_FIELD_NUMBER: _ClassVar[int]
    JOB_RESULT_FIELD_NUMBER: _ClassVar[int]
    JOB_STARTED_FIELD_NUMBER: _ClassVar[int]
    OCCUPANCY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    SOURCE_OPENED_FIELD_NUMBER: _ClassVar[int]
    disconnect: Disconnect
    download: JobDownload
    heartbeat: Heartbeat
    job_cancelled: JobCancelled
    job_failed: JobFailed
    job_result: JobResult
    job_started: JobStarted
    occupancy: Occupancy
    ready: Ready
    source_opened: JobSourceOpened
    def __init__(self, ready: _Optional[_Union[Ready, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., job_started: _Optional[_Union[JobStarted, _Mapping]] = ..., job_result: _Optional[_Union[JobResult, _Mapping]] = ..., job_failed: _Optional[_Union[JobFailed, _Mapping]] = ..., job_cancelled: _Optional[_Union[JobCancelled, _Mapping]] = ..., disconnect: _Optional[_Union[Disconnect, _Mapping]] = ..., source_opened: _Optional[_Union[JobSourceOpened, _Mapping]] = ..., download: _Optional[_Union[JobDownload, _Mapping]] = ..., occupancy: _Optional[_Union[Occupancy, _Mapping]] = ...) -> None: ...
