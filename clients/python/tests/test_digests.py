"""An inline image's digest is computed only where the broker uses it: a broker with neither a
result cache nor shared jobs says so in each Accepted, and later Submits go without one."""

from __future__ import annotations

import hashlib
import unittest
from unittest import mock

import enlarger

from .support import SMALL_IMAGES, Service, check_life, collect, corpus


class DigestsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=2,
                              broker_args=("--cache-mib", "0", "--no-share-jobs")).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def test_no_hashing_once_the_broker_says_digests_are_unused(self):
        image = corpus(SMALL_IMAGES[0])
        with self.service.client() as client, \
                mock.patch("enlarger.client.hashlib.sha256", wraps=hashlib.sha256) as sha256:
            # Nothing heard yet: the first request is hashed, as any broker might use it.
            first = collect(client.submit(image, width=64, degraded=False))
            check_life(self, first)
            self.assertIsInstance(first[-1], enlarger.Final, first)
            self.assertEqual(sha256.call_count, 1)
            for _ in range(3):
                events = collect(client.submit(image, width=64, degraded=False))
                check_life(self, events)
                self.assertIsInstance(events[-1], enlarger.Final, events)
            self.assertEqual(sha256.call_count, 1, "hashed after the broker said digests are unused")


if __name__ == "__main__":
    unittest.main()
