"""The Python blocks of README.md run, as a reader would run them, against a real service.

Each block is preceded by a comment saying how it is tested:

- ``<!-- readme-test: run -->``: run in a fresh directory holding ``photo.jpg``, with
  ``ENLARGER_BROKER`` naming an ipc broker with one worker;
- ``<!-- readme-test: run-curve ... -->``: the same against a tcp broker that requires CURVE,
  with ``keys/broker.pub`` and ``keys/client.key`` in that directory.

A Python block without such a comment fails the test: none may go unchecked. The API summary
is checked against the code too: its signatures' parameters and literal defaults, and every
class it names.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import enlarger

from .support import WITH_DEGRADED, Service, corpus

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"(?:<!-- readme-test: (?P<mode>[\w-]+)[^>]*-->\n)?```python\n(?P<code>.*?)```", re.S)


def blocks() -> list[tuple[int, str | None, str]]:
    """(line, mode, code) of every Python block."""
    text = README.read_text()
    return [(text.count("\n", 0, match.start("code")), match["mode"], match["code"])
            for match in BLOCK.finditer(text)]


class ReadmeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.services: dict[str, Service] = {}

    @classmethod
    def tearDownClass(cls):
        for service in cls.services.values():
            service.stop()

    def service(self, mode: str) -> Service:
        if mode not in self.services:
            curve = mode == "run-curve"
            self.services[mode] = Service(workers=1, concurrency=2, tcp=curve, curve=curve).start()
        return self.services[mode]

    def run_block(self, line: int, mode: str, code: str) -> None:
        service = self.service(mode)
        directory = tempfile.mkdtemp(prefix="enl-py-readme-")
        self.addCleanup(shutil.rmtree, directory, ignore_errors=True)
        (Path(directory) / "photo.jpg").write_bytes(corpus(WITH_DEGRADED))
        if service.curve_files:
            os.mkdir(os.path.join(directory, "keys"), 0o700)
            for name in ("broker.pub", "client.key"):
                shutil.copy2(service.curve_files[name], os.path.join(directory, "keys", name))
        environment = {name: value for name, value in os.environ.items()
                       if not name.startswith("ENLARGER_") or name in ("ENLARGER_BIN", "ENLARGER_CORPUS")}
        environment["ENLARGER_BROKER"] = service.endpoint
        script = os.path.join(directory, f"readme_line_{line}.py")
        Path(script).write_text(code)
        done = subprocess.run([sys.executable, script], cwd=directory, env=environment, capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(done.returncode, 0, f"README.md line {line} ({mode}) failed:\n{done.stderr[-3000:]}")
        self.assertTrue(done.stdout.strip(), f"README.md line {line} printed nothing")

    def test_every_python_block_runs(self):
        found = blocks()
        self.assertGreaterEqual(len(found), 5, "the README's examples were not found")
        for line, mode, code in found:
            with self.subTest(line=line, mode=mode):
                compile(code, f"README.md:{line}", "exec")
                self.assertIn(mode, ("run", "run-curve"), f"README.md line {line}: say how this block is tested")
                self.run_block(line, mode, code)



def api_summary() -> str:
    text = README.read_text()
    return text[text.index("## The API in short"):text.index("## Threads and liveness")]


def summary_parameters(call: str) -> dict[str, str | None]:
    """The parameters of the first `call(...)` signature in the summary: name -> default as
    written (None when none is given)."""
    summary = " ".join(api_summary().split())
    start = summary.index(f"`{call}(") + len(call) + 2
    depth, end = 1, start
    while depth:
        depth += {"(": 1, ")": -1}.get(summary[end], 0)
        end += 1
    parameters: dict[str, str | None] = {}
    for part in re.split(r",\s*", summary[start:end - 1]):
        if part.strip() in ("*", ""):
            continue
        name, _, default = part.partition("=")
        parameters[name.strip()] = default.strip() or None
    return parameters


class ApiSummaryTest(unittest.TestCase):
    def check(self, call: str, function, deprecated: tuple[str, ...] = ()) -> None:
        written = summary_parameters(call)
        actual = {name: parameter for name, parameter in inspect.signature(function).parameters.items()
                  if name != "self" and name not in deprecated}
        self.assertEqual(set(written), set(actual), f"README's {call}(...) against the code")
        for name, default in written.items():
            try:
                value = ast.literal_eval(default) if default is not None else None
            except (ValueError, SyntaxError):
                continue  # "inside"|"cover"|..., 64 MiB: prose, not a literal
            if default is not None:
                self.assertEqual(actual[name].default, value, f"README's {call}(... {name}={default})")

    def test_signatures(self):
        self.check("Client", enlarger.Client.__init__)
        self.check("client.submit", enlarger.Client.submit, deprecated=("file",))
        self.check("client.info", enlarger.Client.info, deprecated=("file",))
        self.check("generate_key_pair", enlarger.generate_key_pair)
        # AsyncClient takes what Client takes, and its methods what Client's do.
        for name in ("__init__", "submit", "info"):
            self.assertEqual(list(inspect.signature(getattr(enlarger.AsyncClient, name)).parameters),
                             list(inspect.signature(getattr(enlarger.Client, name)).parameters), name)

    def test_every_named_class_exists(self):
        names = set(re.findall(r"`([A-Z][A-Za-z_]+)[`(]", api_summary()))
        codes = {name for name in names if name.isupper()}
        classes = names - codes - set(dir(builtins))
        self.assertGreater(len(classes), 20)
        self.assertGreaterEqual(len(codes), 4)
        missing = sorted(name for name in classes if not hasattr(enlarger, name))
        missing += sorted(name for name in codes if name not in enlarger.ErrorCode.__members__)
        self.assertEqual(missing, [], "named in the README's API summary, missing from the package")


if __name__ == "__main__":
    unittest.main()
