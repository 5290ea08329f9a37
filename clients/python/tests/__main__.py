"""Runs the suite (or the named tests) and closes with one line `N passed, M failed`.

    cd clients/python && python -m tests [tests.test_core ...]

unittest's own summary counts each failing subtest, and no test of a class whose setUpClass
failed; here a test counts once, failed if it or any of its subtests failed, and a class
that could not be set up counts as one failed test.
"""

from __future__ import annotations

import sys
import unittest
from pathlib import Path


class _CountingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.ran_ids: set[str] = set()
        self.failed_ids: set[str] = set()

    def startTest(self, test) -> None:
        super().startTest(test)
        self.ran_ids.add(test.id())

    def addFailure(self, test, err) -> None:
        super().addFailure(test, err)
        self.failed_ids.add(test.id())

    def addError(self, test, err) -> None:  # also setUpClass and module errors
        super().addError(test, err)
        self.failed_ids.add(test.id())

    def addSubTest(self, test, subtest, err) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.failed_ids.add(test.id())

    def addUnexpectedSuccess(self, test) -> None:
        super().addUnexpectedSuccess(test)
        self.failed_ids.add(test.id())


def main() -> int:
    here = Path(__file__).resolve().parent
    loader = unittest.TestLoader()
    names = sys.argv[1:]
    suite = loader.loadTestsFromNames(names) if names else loader.discover(str(here), top_level_dir=str(here.parent))
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_CountingResult)
    result = runner.run(suite)
    skipped = {test.id() for test, _ in result.skipped}
    failed = len(result.failed_ids)
    passed = len(result.ran_ids - result.failed_ids - skipped)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
