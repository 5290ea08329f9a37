"""CURVE key files, as written by `enlarger keygen NAME` and by `generate_key_pair` here
(``python -m enlarger keygen NAME``): the same format, either reads the other's.

`NAME.pub` holds one public key: 40 Z85 characters on one line. `NAME.key` holds a key pair::

    # comment lines and blank lines are ignored
    public-key = <40 Z85 characters>
    secret-key = <40 Z85 characters>

A `.key` file is secret: like the Swift tools, this client refuses one that its group or
others may access (`chmod 600` it). Both are written atomically: a reader sees the whole file
or none, and a `.key` file is never readable by others, not even while it is written.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass

import zmq
from zmq.utils import z85

from .errors import InvalidArgumentError, KeyFileError

__all__ = ["CurveKeyPair", "CurveCredentials", "KeyFilePaths", "generate_key_pair", "read_public_key_file",
           "read_key_file"]

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
    def from_files(cls, server_public_key: str | os.PathLike[str], key: str | os.PathLike[str]) -> CurveCredentials:
        return cls(read_public_key_file(server_public_key), read_key_file(key))

    def apply(self, socket: zmq.Socket[bytes]) -> None:
        socket.curve_serverkey = self.server_public_key
        socket.curve_publickey = self.key_pair.public_key
        socket.curve_secretkey = self.key_pair.secret_key


@dataclass(frozen=True)
class KeyFilePaths:
    """The two files `generate_key_pair` wrote."""

    #: ``NAME.key``: the key pair, mode 0600. Stays with the process that uses it.
    key_file: str
    #: ``NAME.pub``: the public key. Safe to copy anywhere.
    public_key_file: str
    #: The public key, 40 Z85 characters.
    public_key: str


_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def generate_key_pair(name: str, directory: str | os.PathLike[str] = ".", *, force: bool = False) -> KeyFilePaths:
    """Makes a CURVE key pair and writes ``directory/NAME.key`` (the pair, mode 0600) and
    ``directory/NAME.pub`` (the public key), as ``enlarger keygen NAME --directory DIR``
    does. The directory is created with mode 0700 if missing.

    For a client: keep its ``.key`` and give it to `Client(key=...)`; put its ``.pub`` in
    the broker's client allow-list directory (``--client-keys``). Existing files are
    refused (`KeyFileError`) unless `force`, which replaces both; a name that is not one
    raises `InvalidArgumentError`.
    """
    if (not isinstance(name, str) or not 1 <= len(name) <= 100 or not set(name) <= _NAME_CHARACTERS
            or name.startswith(".")):
        raise InvalidArgumentError(f"a key name is 1 to 100 letters, digits, '.', '_' or '-', not starting with '.'; "
                         f"got {name!r}")
    directory = os.fspath(directory)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError as error:
        raise KeyFileError(directory, f"cannot create the directory: {error.strerror}") from error
    paths_key = os.path.join(directory, f"{name}.key")
    paths_pub = os.path.join(directory, f"{name}.pub")
    if not force:
        for path in (paths_key, paths_pub):
            if os.path.lexists(path):
                raise KeyFileError(path, "already exists; use force=True (--force) to replace the key pair")
    public, secret = (key.decode("ascii") for key in zmq.curve_keypair())
    key_text = ("# CURVE key pair. Secret: keep this file mode 0600, readable only by the process using it.\n"
                "# Hand out the public key (the .pub file of the same name), never this file.\n"
                f"public-key = {public}\nsecret-key = {secret}\n")
    _write_atomically(paths_key, key_text.encode("ascii"), 0o600, secret=True, replacing=force)
    try:
        _write_atomically(paths_pub, f"{public}\n".encode("ascii"), 0o644, secret=False, replacing=force)
    except BaseException:
        # Someone made the .pub meanwhile: leave no half-made pair behind.
        os.unlink(paths_key)
        raise
    return KeyFilePaths(key_file=paths_key, public_key_file=paths_pub, public_key=public)


def _write_atomically(path: str, data: bytes, mode: int, *, secret: bool, replacing: bool) -> None:
    """A fresh temporary file beside `path` with exactly `mode` (secret) or `mode` less the
    umask, flushed to disk, then moved into place: `rename` when replacing, else `link`,
    which fails if `path` exists, so nothing is overwritten by accident."""
    directory, name = os.path.split(path)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(temporary, flags, mode)
    except OSError as error:
        raise KeyFileError(path, f"cannot create: {error.strerror}") from error
    moved = False
    try:
        try:
            if secret:
                os.fchmod(fd, mode)  # exactly, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replacing:
            os.rename(temporary, path)
            moved = True
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                raise KeyFileError(path, "already exists; use force=True (--force) to replace the key pair") from None
    except OSError as error:
        raise KeyFileError(path, f"cannot write: {error.strerror}") from error
    finally:
        if not moved:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass


def read_public_key_file(path: str | os.PathLike[str]) -> bytes:
    """The key in a `.pub` file, as 40 Z85 characters."""
    path = os.fspath(path)
    text, _ = _read(path)
    key = None
    for number, line in _lines(text, path):
        if key is not None:
            raise KeyFileError(path, f"line {number}: more than one key (a .pub file holds one)")
        if line.partition("=")[0].strip() in ("public-key", "secret-key"):
            raise KeyFileError(path, "holds a key pair, like a .key file: the server public key is the broker's "
                                     ".pub file (and a .key file is secret: never hand it out)")
        key = _z85_key(line, path, number)
    if key is None:
        raise KeyFileError(path, "no key in the file")
    return key


def read_key_file(path: str | os.PathLike[str]) -> CurveKeyPair:
    """The key pair in a `.key` file; checks that the secret key belongs to the public one."""
    path = os.fspath(path)
    text, mode = _read(path)
    lines = list(_lines(text, path))
    if len(lines) == 1 and _is_z85_key(lines[0][1]):
        raise KeyFileError(path, "holds a single public key, like a .pub file: this client's key is its .key "
                                 "file (made with it by `python -m enlarger keygen` or `enlarger keygen`)")
    if mode & 0o077:
        raise KeyFileError(path, f"secret key file is accessible by group or others (mode {mode:04o}); "
                                 "chmod 600 it")
    keys: dict[str, bytes] = {}
    for number, line in lines:
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


def _read(path: str) -> tuple[str, int]:
    """The file's text and its permission bits, checked through the open descriptor (a file
    swapped in between check and read is still the one checked)."""
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
        data = file.read(_KEY_FILE_BYTE_LIMIT + 1)
    if len(data) > _KEY_FILE_BYTE_LIMIT:
        raise KeyFileError(path, f"larger than {_KEY_FILE_BYTE_LIMIT} bytes: not a key file")
    try:
        return data.decode("utf-8"), stat.S_IMODE(info.st_mode)
    except UnicodeDecodeError:
        raise KeyFileError(path, "not UTF-8 text") from None


def _lines(text: str, path: str) -> Iterator[tuple[int, str]]:
    """(number, content) of the lines that matter: stripped, no blanks, no # comments."""
    for number, line in enumerate(text.split("\n"), start=1):
        content = line.strip(" \t\r")
        if content and not content.startswith("#"):
            yield number, content


def _is_z85_key(text: str) -> bool:
    try:
        return len(text) == 40 and len(z85.decode(text.encode("ascii"))) == 32
    except (UnicodeEncodeError, ValueError, KeyError, IndexError, OverflowError):
        return False


def _z85_key(text: str, path: str, number: int) -> bytes:
    if len(text) != 40:
        raise KeyFileError(path, f"line {number}: a key is 40 Z85 characters, got {len(text)}")
    try:
        raw = text.encode("ascii")
        z85.decode(raw)
    except (UnicodeEncodeError, ValueError, KeyError, IndexError, OverflowError):
        raise KeyFileError(path, f"line {number}: not a Z85 key") from None
    return raw
