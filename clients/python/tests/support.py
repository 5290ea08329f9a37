"""Shared test helpers: the enlarger binary, the corpus, real brokers and workers.

The binary is ENLARGER_BIN, else the release build of the repository
(`swift build -c release --show-bin-path`). The corpus is ENLARGER_CORPUS, else
../shared/corpus beside the repository.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

import enlarger

REPO_ROOT = Path(__file__).resolve().parents[3]


@functools.lru_cache(maxsize=None)
def enlarger_bin() -> str:
    path = os.environ.get("ENLARGER_BIN")
    if not path:
        try:
            bin_dir = subprocess.run(["swift", "build", "-c", "release", "--show-bin-path"], cwd=REPO_ROOT,
                                     check=True, capture_output=True, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as error:
            raise RuntimeError(f"set ENLARGER_BIN: cannot ask swift for the release bin path ({error})") from None
        path = os.path.join(bin_dir, "enlarger")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no enlarger binary at {path} (build it with `swift build -c release`, "
                           "or set ENLARGER_BIN)")
    return path


def corpus_dir() -> Path:
    return Path(os.environ.get("ENLARGER_CORPUS") or REPO_ROOT.parent / "shared" / "corpus")


@functools.lru_cache(maxsize=None)
def corpus(name: str, bad: bool = False) -> bytes:
    path = corpus_dir() / ("bad" if bad else "good") / name
    if not path.is_file():
        raise RuntimeError(f"corpus file missing: {path} (set ENLARGER_CORPUS)")
    return path.read_bytes()


@functools.lru_cache(maxsize=None)
def sample_image(name: str) -> bytes:
    """One of the repository's PNG, WebP, HEIC and AVIF test images."""
    return (REPO_ROOT / "Tests" / "ImagingTests" / "Images" / name).read_bytes()


#: Good JPEGs of a few sizes; the first has an EXIF thumbnail, so it gets a degraded result.
WITH_DEGRADED = "exifsamples_30-type_error.jpg"  # 3872x2403
SMALL_IMAGES = ["sharp_Landscape_1.jpg", "libvips_cd1.1.jpg", "exifsamples_kodak-dc240.jpg",
                "sharp_concert.jpg", "jpegdecoder_tower_progressive.jpg"]


# ---------------------------------------------------------------------------------------
# Image checks


def jpeg_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the frame header of a complete JPEG; AssertionError otherwise."""
    if data[:2] != b"\xff\xd8":
        raise AssertionError(f"no SOI marker: starts with {data[:4]!r}")
    if data[-2:] != b"\xff\xd9":
        raise AssertionError("no EOI marker at the end")
    offset = 2
    while offset + 4 <= len(data):
        if data[offset] != 0xFF:
            raise AssertionError(f"no marker at offset {offset}")
        marker = data[offset + 1]
        if marker == 0xFF:  # fill byte
            offset += 1
            continue
        length = struct.unpack(">H", data[offset + 2:offset + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[offset + 5:offset + 9])
            return width, height
        offset += 2 + length
    raise AssertionError("no frame header (SOF) before the data ends")


def pnm_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a binary P5/P6 image with maxval 255."""
    fields = data.split(maxsplit=4)
    if fields[0] not in (b"P5", b"P6") or fields[3] != b"255":
        raise AssertionError(f"not a binary PNM with maxval 255: {data[:20]!r}")
    return int(fields[1]), int(fields[2])


# ---------------------------------------------------------------------------------------
# Requests


def collect(request: enlarger.Request, timeout: float = 30.0) -> list[enlarger.Event]:
    """All of a request's events; fails the test instead of hanging."""
    events = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            event = request.next_event(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise AssertionError(f"request {request.id} did not end within {timeout} s; got {events}") from None
        if event is None:
            return events
        events.append(event)


def check_life(test: unittest.TestCase, events: list[enlarger.Event]) -> None:
    """The sequence rules: exactly one terminal event, last; degraded at most once and before
    the final; a placeholder at most once and before any image; Accepted first unless the
    request never got that far."""
    test.assertTrue(events, "no events at all")
    terminals = [e for e in events if e.terminal]
    test.assertEqual(len(terminals), 1, f"exactly one terminal event expected: {events}")
    test.assertIs(events[-1], terminals[0], f"the terminal event must be last: {events}")
    test.assertLessEqual(sum(isinstance(e, enlarger.Degraded) for e in events), 1, events)
    placeholders = [i for i, e in enumerate(events) if isinstance(e, enlarger.Placeholder)]
    test.assertLessEqual(len(placeholders), 1, events)
    results = [i for i, e in enumerate(events) if isinstance(e, enlarger.Result)]
    if placeholders and results:
        test.assertLess(placeholders[0], results[0], f"the placeholder comes before any image: {events}")
    test.assertLessEqual(sum(isinstance(e, enlarger.Accepted) for e in events), 1, events)
    if any(isinstance(e, (enlarger.Started, enlarger.Result)) for e in events):
        test.assertIsInstance(events[0], enlarger.Accepted, events)


# ---------------------------------------------------------------------------------------
# Processes


def free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class Service:
    """A real broker and `workers` worker processes in a private temporary directory, over
    ipc:// by default. `stop()` ends every process it started (and only those)."""

    def __init__(self, workers: int = 1, concurrency: int = 2, heartbeat_ms: int = 1000,
                 broker_args: tuple = (), tcp: bool = False, curve: bool = False, worker_args: tuple = (),
                 python_keys: bool = False) -> None:
        self.directory = tempfile.mkdtemp(prefix="enl-py-")
        self.processes: list[subprocess.Popen] = []
        self.workers = workers
        self.concurrency = concurrency
        self.heartbeat_ms = heartbeat_ms
        self.broker_args = list(broker_args)
        self.worker_args = list(worker_args)
        self.broker: subprocess.Popen | None = None
        self.curve_files: dict[str, str] = {}
        #: Keys made by this package's generate_key_pair instead of `enlarger keygen`.
        self.python_keys = python_keys
        if tcp:
            self.endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
            self.worker_endpoint = f"tcp://127.0.0.1:{free_tcp_port()}"
        else:
            self.endpoint = f"ipc://{self.directory}/clients.sock"
            self.worker_endpoint = f"ipc://{self.directory}/workers.sock"
        if curve:
            self._make_keys()

    # -- Keys -------------------------------------------------------------------------------

    def keygen(self, name: str, directory: str | None = None) -> tuple[str, str]:
        directory = directory or os.path.join(self.directory, "keys")
        if self.python_keys:
            paths = enlarger.generate_key_pair(name, directory)
            return paths.key_file, paths.public_key_file
        subprocess.run([enlarger_bin(), "keygen", name, "--directory", directory], check=True,
                       capture_output=True)
        return os.path.join(directory, f"{name}.key"), os.path.join(directory, f"{name}.pub")

    def _make_keys(self) -> None:
        keys = os.path.join(self.directory, "keys")
        for allowed in ("clients", "workers", "admins"):
            os.makedirs(os.path.join(keys, allowed))
        for name in ("broker", "client", "worker", "admin"):
            key, pub = self.keygen(name)
            self.curve_files[f"{name}.key"] = key
            self.curve_files[f"{name}.pub"] = pub
        shutil.copy(self.curve_files["client.pub"], os.path.join(keys, "clients"))
        shutil.copy(self.curve_files["worker.pub"], os.path.join(keys, "workers"))
        # An operator's key: only an admin's status lists the workers of other principals.
        shutil.copy(self.curve_files["admin.pub"], os.path.join(keys, "admins"))

    # -- Processes --------------------------------------------------------------------------

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(os.path.join(self.directory, f"{name}.log"), "ab")
        try:
            process = subprocess.Popen([enlarger_bin(), *args], stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT)
        finally:
            log.close()
        self.processes.append(process)
        return process

    def start_broker(self) -> None:
        args = ["broker", "--clients", self.endpoint, "--workers", self.worker_endpoint,
                "--heartbeat-ms", str(self.heartbeat_ms), "--log-level", "warning", *self.broker_args]
        if self.curve_files:
            keys = os.path.join(self.directory, "keys")
            args += ["--server-key", self.curve_files["broker.key"], "--client-keys", os.path.join(keys, "clients"),
                     "--worker-keys", os.path.join(keys, "workers"), "--admin-keys", os.path.join(keys, "admins")]
        elif self.endpoint.startswith("tcp://"):
            args.append("--insecure-tcp")
        self.broker = self._spawn("broker", args)
        if self.endpoint.startswith("ipc://"):
            wait_for(lambda: os.path.exists(self.endpoint[len("ipc://"):]) or self.broker.poll() is not None,
                     10, "the broker's socket")
        if self.broker.poll() is not None:
            raise RuntimeError(f"the broker exited: {self.log('broker')}")

    def start_workers(self) -> None:
        for index in range(self.workers):
            args = ["worker", "--broker", self.worker_endpoint, "--concurrency", str(self.concurrency),
                    "--name", f"test-{index}", "--heartbeat-ms", str(self.heartbeat_ms), "--log-level", "warning",
                    *self.worker_args]
            if self.curve_files:
                args += ["--server-public-key", self.curve_files["broker.pub"], "--key", self.curve_files["worker.key"]]
            elif self.worker_endpoint.startswith("tcp://"):
                args.append("--insecure-tcp")
            self._spawn(f"worker-{index}", args)

    def start(self) -> Service:
        try:
            self.start_broker()
            self.start_workers()
            if self.workers:
                admin = {"key": self.curve_files["admin.key"]} if self.curve_files else {}
                with self.client(**admin) as client:
                    wait_for(lambda: len(client.status(timeout=10).workers) >= self.workers, 15,
                             f"{self.workers} worker(s) to register")
        except BaseException:
            self.stop()
            raise
        return self

    def client(self, **options) -> enlarger.Client:
        if self.curve_files and "key" not in options:
            options.update(server_public_key=self.curve_files["broker.pub"], key=self.curve_files["client.key"])
        elif self.curve_files and "server_public_key" not in options:
            options["server_public_key"] = self.curve_files["broker.pub"]
        elif self.endpoint.startswith("tcp://") and "key" not in options:
            options.setdefault("insecure", True)  # a tcp service without CURVE runs --insecure-tcp
        return enlarger.Client(self.endpoint, **options)

    def kill_broker(self) -> None:
        self.broker.send_signal(signal.SIGKILL)
        self.broker.wait(10)

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.directory, f"{name}.log"), errors="replace") as file:
                return file.read()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        # Workers first, so the broker does not log them as lost.
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
        self.processes.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Service:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
