"""CURVE over tcp with keys made by `enlarger keygen`, and the key files themselves."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest

import zmq

import enlarger
from enlarger.keys import read_key_file, read_public_key_file

from .support import SMALL_IMAGES, Service, collect, corpus, enlarger_bin, jpeg_size


class CurveTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=1, tcp=True, curve=True).start()
        cls.rogue_key, cls.rogue_pub = cls.service.keygen("rogue", os.path.join(cls.service.directory, "other"))

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def test_allowed_key_gets_results(self):
        files = self.service.curve_files
        with enlarger.Client(self.service.endpoint, server_public_key=files["broker.pub"],
                             key=files["client.key"]) as client:
            final = client.submit(corpus(SMALL_IMAGES[1]), width=64).result(timeout=30)
            self.assertEqual(jpeg_size(final.data), (final.width, final.height))
            self.assertGreaterEqual(client.status().totals.finished, 1)

    def unreachable(self, **options) -> str:
        """The message a request gets from a client that cannot get in."""
        with enlarger.Client(self.service.endpoint, heartbeat_interval=0.3, **options) as client:
            events = collect(client.submit(corpus(SMALL_IMAGES[1]), width=64), timeout=5)
            self.assertEqual(len(events), 1, events)
            self.assertEqual(events[0].code, enlarger.ErrorCode.BROKER_UNREACHABLE)
            self.assertIn(self.service.endpoint, events[0].message)
            return events[0].message

    def test_key_not_on_the_allow_list_is_refused(self):
        message = self.unreachable(server_public_key=self.service.curve_files["broker.pub"], key=self.rogue_key)
        self.assertIn("refused this client's CURVE key", message)
        with enlarger.Client(self.service.endpoint, heartbeat_interval=0.3, server_public_key=self.rogue_pub,
                             key=self.rogue_key) as client:
            with self.assertRaises(enlarger.BrokerUnreachableError) as caught:
                client.status()
            self.assertIn(self.service.endpoint, str(caught.exception))

    def test_wrong_broker_key_never_connects(self):
        message = self.unreachable(server_public_key=self.rogue_pub, key=self.service.curve_files["client.key"])
        self.assertIn("handshake failed", message)

    def test_no_keys_never_connects(self):
        # Only when told to go without keys does the client try at all.
        self.assertIn("handshake failed", self.unreachable(insecure=True))


class KeyFileTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="enl-py-keys-")
        self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)

    def write(self, name: str, text: str, mode: int = 0o600) -> str:
        path = os.path.join(self.directory, name)
        with open(path, "w") as file:
            file.write(text)
        os.chmod(path, mode)
        return path

    def test_reads_what_keygen_writes(self):
        subprocess.run([enlarger_bin(), "keygen", "me", "--directory", self.directory], check=True, capture_output=True)
        pair = read_key_file(os.path.join(self.directory, "me.key"))
        public = read_public_key_file(os.path.join(self.directory, "me.pub"))
        self.assertEqual(pair.public_key, public)
        self.assertEqual(zmq.curve_public(pair.secret_key), public)
        self.assertNotIn(pair.secret_key.decode(), repr(pair))

    def test_refuses_bad_files(self):
        public, secret = (k.decode() for k in zmq.curve_keypair())
        other_public, _ = (k.decode() for k in zmq.curve_keypair())
        good = f"# comment\n\npublic-key = {public}\nsecret-key = {secret}\n"
        cases = {
            "open.key": (good, 0o644, "chmod 600"),
            "empty.key": ("# nothing\n", 0o600, "no key"),
            "short.key": (f"public-key = {public[:-1]}\nsecret-key = {secret}\n", 0o600, "40 Z85"),
            "unknown.key": (f"{good}colour = blue\n", 0o600, "unknown field"),
            "twice.key": (f"{good}public-key = {public}\n", 0o600, "twice"),
            "nosecret.key": (f"public-key = {public}\n", 0o600, "secret-key is missing"),
            "mismatch.key": (f"public-key = {other_public}\nsecret-key = {secret}\n", 0o600, "does not belong"),
        }
        for name, (text, mode, reason) in cases.items():
            with self.subTest(name):
                with self.assertRaises(enlarger.KeyFileError) as caught:
                    read_key_file(self.write(name, text, mode))
                self.assertIn(reason, str(caught.exception))
                self.assertIn(name, str(caught.exception))
        self.assertEqual(read_key_file(self.write("good.key", good)).public_key, public.encode())
        with self.assertRaises(enlarger.KeyFileError):
            read_public_key_file(self.write("two.pub", f"{public}\n{public}\n", 0o644))
        with self.assertRaises(enlarger.KeyFileError):
            read_public_key_file(self.write("bad.pub", "~" * 40 + "\n", 0o644))
        with self.assertRaises(enlarger.KeyFileError) as caught:
            read_public_key_file(os.path.join(self.directory, "missing.pub"))
        self.assertIn("no such file", str(caught.exception))
        # The client reads its key files when it is made, and refuses bad ones there.
        with self.assertRaises(enlarger.KeyFileError):
            enlarger.Client("tcp://127.0.0.1:1", server_public_key=os.path.join(self.directory, "missing.pub"),
                            key=os.path.join(self.directory, "good.key"))


if __name__ == "__main__":
    unittest.main()
