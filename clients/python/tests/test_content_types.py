"""`accept` entries are read exactly as the worker and the broker read them: one table of
cases (Tests/Shared/content-types.json) is checked here and by the Swift tests."""

from __future__ import annotations

import json
import os
import tempfile
import unittest

import enlarger

TABLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "Tests", "Shared", "content-types.json")


class ContentTypesTest(unittest.TestCase):
    def test_the_shared_table(self):
        with open(TABLE, encoding="utf-8") as file:
            cases = json.load(file)["cases"]
        self.assertGreater(len(cases), 10)
        for case in cases:
            with self.subTest(entry=case["entry"]):
                member = enlarger.ImageFormat.from_content_type(case["entry"])
                self.assertEqual(member.content_type if member else None, case["format"])

    def test_unknown_entries_are_skipped_as_the_worker_skips_them(self):
        directory = tempfile.mkdtemp(prefix="enl-py-")
        client = enlarger.Client(f"ipc://{directory}/clients.sock")
        try:
            # Accepted: "image/ webp" is unknown (a blank inside), so this asks for JPEG only.
            request = client.submit(b"\xff\xd8", width=10, accept=["image/ webp", "image/jpeg"])
            client.cancel(request.id)
            with self.assertRaises(enlarger.InvalidArgumentError):
                client.submit(b"\xff\xd8", width=10, accept=["image/ webp", "text/plain"])
        finally:
            client.close()
            os.rmdir(directory)


if __name__ == "__main__":
    unittest.main()
