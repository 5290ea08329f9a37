"""CURVE key files, as written by `enlarger keygen NAME`.

`NAME.pub` holds one public key: 40 Z85 characters on one line. `NAME.key` holds a key pair::

    # comment lines and blank lines are ignored
    public-key = <40 Z85 characters>
    secret-key = <40 Z85 characters>

A `.key` file is secret: like the Swift tools, this client refuses one that its group or
others may access (`chmod 600` it).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from .errors import KeyFileError

__all__ = ["CurveKeyPair", "CurveCredentials", "read_public_key_file", "read_key_file"]

# Far above any key file; a larger file is a mistake, not something to read into memory.
_KEY_FILE_BYTE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class CurveKeyPair:
    """A key pair, each key as 40 Z85 characters (ASCII bytes)."""

    public_key: bytes
    secret_key: bytes = b""

    def __repr__(self) -> str:  # never show the secret key
        return f"CurveKeyPair(public_key={self.public_key!r})"


@dataclass(frozen=True)
class CurveCredentials:
    """What a client needs to reach a broker that requires CURVE: the broker's public key and
    the client's own key pair."""

    server_public_key: bytes
    key_pair: CurveKeyPair

    @classmethod
    def from_files(cls, server_public_key: str | os.PathLike, key: str | os.PathLike) -> CurveCredentials:
        return cls(read_public_key_file(server_public_key), read_key_file(key))

    def apply(self, socket: zmq.Socket) -> None:
        socket.curve_serverkey = self.server_public_key
        socket.curve_publickey = self.key_pair.public_key
        socket.curve_secretkey = self.key_pair.secret_key


def read_public_key_file(path: str | os.PathLike) -> bytes:
    """The key in a `.pub` file, as 40 Z85 characters."""
    path = os.fspath(path)
    key = None
    for number, line in _lines(_read(path, secret=False), path):
        if key is not None:
            raise KeyFileError(path, f"line {number}: more than one key (a .pub file holds one)")
        key = _z85_key(line, path, number)
    if key is None:
        raise KeyFileError(path, "no key in the file")
    return key


def read_key_file(path: str | os.PathLike) -> CurveKeyPair:
    """The key pair in a `.key` file; checks that the secret key belongs to the public one."""
    path = os.fspath(path)
    keys: dict[str, bytes] = {}
    for number, line in _lines(_read(path, secret=True), path):
        name, equals, value = line.partition("=")
        name, value = name.strip(), value.strip()
        if not equals or name not in ("public-key", "secret-key"):
            raise KeyFileError(path, f"line {number}: unknown field {line!r}")
        if name in keys:
            raise KeyFileError(path, f"line {number}: {name} given twice")
        keys[name] = _z85_key(value, path, number)
    if not keys:
        raise KeyFileError(path, "no key in the file")
    for name in ("public-key", "secret-key"):
        if name not in keys:
            raise KeyFileError(path, f"{name} is missing")
    if zmq.curve_public(keys["secret-key"]) != keys["public-key"]:
        raise KeyFileError(path, "the public key does not belong to the secret key")
    return CurveKeyPair(public_key=keys["public-key"], secret_key=keys["secret-key"])


def _read(path: str, secret: bool) -> str:
    # Checked through the open descriptor, so a file swapped in between check and read is
    # still the one checked.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise KeyFileError(path, "no such file") from None
    except OSError as error:
        raise KeyFileError(path, f"cannot open: {error.strerror}") from error
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise KeyFileError(path, "not a regular file")
        if secret and info.st_mode & 0o077:
            raise KeyFileError(
                path, f"secret key file is accessible by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                      "chmod 600 it")
        data = file.read(_KEY_FILE_BYTE_LIMIT + 1)
    if len(data) > _KEY_FILE_BYTE_LIMIT:
        raise KeyFileError(path, f"larger than {_KEY_FILE_BYTE_LIMIT} bytes: not a key file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeyFileError(path, "not UTF-8 text") from None


def _lines(text: str, path: str):
    """(number, content) of the lines that matter: stripped, no blanks, no # comments."""
    for number, line in enumerate(text.split("\n"), start=1):
        content = line.strip(" \t\r")
        if content and not content.startswith("#"):
            yield number, content


def _z85_key(text: str, path: str, number: int) -> bytes:
    if len(text) != 40:
        raise KeyFileError(path, f"line {number}: a key is 40 Z85 characters, got {len(text)}")
    try:
        raw = text.encode("ascii")
        z85.decode(raw)
    except (UnicodeEncodeError, ValueError, KeyError, IndexError, OverflowError):
        raise KeyFileError(path, f"line {number}: not a Z85 key") from None
    return raw
