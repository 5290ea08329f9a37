from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

CHROMA_YUV420: Chroma
CHROMA_YUV444: Chroma
DELIVERY_DEGRADED: Delivery
DELIVERY_FINAL: Delivery
DELIVERY_INFO: Delivery
DELIVERY_PROGRESSIVE: Delivery
DESCRIPTOR: _descriptor.FileDescriptor
DOWNLOAD_PHASE_FINISHED: DownloadPhase
DOWNLOAD_PHASE_PROGRESS: DownloadPhase
DOWNLOAD_PHASE_STARTED: DownloadPhase
DOWNLOAD_PHASE_UNSPECIFIED: DownloadPhase
ERROR_CODE_BATCH_ENDED: ErrorCode
ERROR_CODE_BROKER_SHUTDOWN: ErrorCode
ERROR_CODE_CLIENT_NOT_READING: ErrorCode
ERROR_CODE_CLIENT_SILENT: ErrorCode
ERROR_CODE_CORRUPT: ErrorCode
ERROR_CODE_DEADLINE_EXCEEDED: ErrorCode
ERROR_CODE_DIGEST_MISMATCH: ErrorCode
ERROR_CODE_DUPLICATE_ID: ErrorCode
ERROR_CODE_EMPTY: ErrorCode
ERROR_CODE_ENCODE_FAILED: ErrorCode
ERROR_CODE_INTERNAL: ErrorCode
ERROR_CODE_INVALID_ARGUMENT: ErrorCode
ERROR_CODE_MALFORMED: ErrorCode
ERROR_CODE_NOT_JPEG: ErrorCode
ERROR_CODE_OVERLOADED: ErrorCode
ERROR_CODE_REQUEST_LOST: ErrorCode
ERROR_CODE_SOURCE_REFUSED: ErrorCode
ERROR_CODE_SOURCE_UNAVAILABLE: ErrorCode
ERROR_CODE_TOO_LARGE: ErrorCode
ERROR_CODE_TOO_MANY_SCANS: ErrorCode
ERROR_CODE_TRUNCATED: ErrorCode
ERROR_CODE_UNAUTHORIZED: ErrorCode
ERROR_CODE_UNKNOWN_FORMAT: ErrorCode
ERROR_CODE_UNSPECIFIED: ErrorCode
ERROR_CODE_UNSUPPORTED: ErrorCode
ERROR_CODE_WORKER_LOST: ErrorCode
FAIL_ON_DEFAULT: FailOn
FAIL_ON_ERROR: FailOn
FAIL_ON_NONE: FailOn
FAIL_ON_TRUNCATED: FailOn
FAIL_ON_WARNING: FailOn
FIT_COVER: Fit
FIT_FILL: Fit
FIT_INSIDE: Fit
GAIN_MAP_APPLY: GainMap
GAIN_MAP_DROP: GainMap
GAIN_MAP_KEEP: GainMap
IMAGE_FORMAT_AVIF: ImageFormat
IMAGE_FORMAT_JPEG: ImageFormat
IMAGE_FORMAT_PNG: ImageFormat
IMAGE_FORMAT_PNM: ImageFormat
IMAGE_FORMAT_WEBP: ImageFormat
STAGE_DEGRADED: Stage
STAGE_FINAL: Stage
STAGE_INFO: Stage
STAGE_PLACEHOLDER: Stage
STAGE_UNSPECIFIED: Stage

class Error(_message.Message):
    __slots__ = ["code", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ...) -> None: ...

class FileSource(_message.Message):
    __slots__ = ["path"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class ImageInfo(_message.Message):
    __slots__ = ["bit_depth", "byte_size", "channels", "color_space", "format", "has_alpha", "has_embedded_thumbnail", "has_gain_map", "height", "orientation", "profile_bytes", "profile_description", "progressive", "width"]
    BIT_DEPTH_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    COLOR_SPACE_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    HAS_ALPHA_FIELD_NUMBER: _ClassVar[int]
    HAS_EMBEDDED_THUMBNAIL_FIELD_NUMBER: _ClassVar[int]
    HAS_GAIN_MAP_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    ORIENTATION_FIELD_NUMBER: _ClassVar[int]
    PROFILE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROFILE_DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PROGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    bit_depth: int
    byte_size: int
    channels: int
    color_space: str
    format: str
    has_alpha: bool
    has_embedded_thumbnail: bool
    has_gain_map: bool
    height: int
    orientation: int
    profile_bytes: int
    profile_description: str
    progressive: bool
    width: int
    def __init__(self, format: _Optional[str] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., orientation: _Optional[int] = ..., channels: _Optional[int] = ..., has_alpha: bool = ..., bit_depth: _Optional[int] = ..., color_space: _Optional[str] = ..., profile_description: _Optional[str] = ..., profile_bytes: _Optional[int] = ..., progressive: bool = ..., has_embedded_thumbnail: bool = ..., byte_size: _Optional[int] = ..., has_gain_map: bool = ...) -> None: ...

class ImageSource(_message.Message):
    __slots__ = ["file", "inline", "no_share", "url"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    INLINE_FIELD_NUMBER: _ClassVar[int]
    NO_SHARE_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    file: FileSource
    inline: InlineSource
    no_share: bool
    url: URLSource
    def __init__(self, inline: _Optional[_Union[InlineSource, _Mapping]] = ..., file: _Optional[_Union[FileSource, _Mapping]] = ..., url: _Optional[_Union[URLSource, _Mapping]] = ..., no_share: bool = ...) -> None: ...

class InlineSource(_message.Message):
    __slots__ = ["sha256"]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: bytes
    def __init__(self, sha256: _Optional[bytes] = ...) -> None: ...

class ResizeSpec(_message.Message):
    __slots__ = ["accept", "background", "chroma", "enlarge", "fail_on", "fit", "flatten", "format", "gain_map", "height", "keep_profile", "lossless", "progressive", "quality", "width"]
    ACCEPT_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    CHROMA_FIELD_NUMBER: _ClassVar[int]
    ENLARGE_FIELD_NUMBER: _ClassVar[int]
    FAIL_ON_FIELD_NUMBER: _ClassVar[int]
    FIT_FIELD_NUMBER: _ClassVar[int]
    FLATTEN_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    GAIN_MAP_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    KEEP_PROFILE_FIELD_NUMBER: _ClassVar[int]
    LOSSLESS_FIELD_NUMBER: _ClassVar[int]
    PROGRESSIVE_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    accept: _containers.RepeatedScalarFieldContainer[str]
    background: int
    chroma: Chroma
    enlarge: bool
    fail_on: FailOn
    fit: Fit
    flatten: bool
    format: ImageFormat
    gain_map: GainMap
    height: int
    keep_profile: bool
    lossless: bool
    progressive: bool
    quality: int
    width: int
    def __init__(self, width: _Optional[int] = ..., height: _Optional[int] = ..., fit: _Optional[_Union[Fit, str]] = ..., enlarge: bool = ..., quality: _Optional[int] = ..., progressive: bool = ..., chroma: _Optional[_Union[Chroma, str]] = ..., format: _Optional[_Union[ImageFormat, str]] = ..., fail_on: _Optional[_Union[FailOn, str]] = ..., keep_profile: bool = ..., accept: _Optional[_Iterable[str]] = ..., flatten: bool = ..., background: _Optional[int] = ..., lossless: bool = ..., gain_map: _Optional[_Union[GainMap, str]] = ...) -> None: ...

class URLSource(_message.Message):
    __slots__ = ["url"]
    URL_FIELD_NUMBER: _ClassVar[int]
    url: str
    def __init__(self, url: _Optional[str] = ...) -> None: ...

class Fit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Chroma(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ImageFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Delivery(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Stage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class GainMap(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FailOn(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DownloadPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
