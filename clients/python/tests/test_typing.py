"""The package and the README's examples pass ``mypy --strict`` (the settings in
pyproject.toml): a producer that type-checks its code gets no errors from this package's API."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

from .support import REPO_ROOT
from .test_readme import blocks

PACKAGE = Path(__file__).resolve().parents[1]


class TypingTest(unittest.TestCase):
    def test_package_and_readme_examples_pass_mypy_strict(self):
        with tempfile.TemporaryDirectory(prefix="enl-py-mypy-") as directory:
            examples = []
            for line, _, code in blocks():
                path = Path(directory) / f"readme_line_{line}.py"
                path.write_text(code)
                examples.append(str(path))
            self.assertTrue(examples)
            done = subprocess.run(
                [sys.executable, "-m", "mypy", "--config-file", str(PACKAGE / "pyproject.toml"),
                 "--cache-dir", str(REPO_ROOT / ".build-python" / "mypy-cache"),
                 str(PACKAGE / "src" / "enlarger"), *examples],
                capture_output=True, text=True, timeout=300)
        self.assertEqual(done.returncode, 0, f"mypy --strict:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
        self.assertIn("Success", done.stdout)


if __name__ == "__main__":
    unittest.main()
