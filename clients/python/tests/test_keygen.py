"""Key pairs made in Python: the files `enlarger keygen` writes, used by the Swift broker and
workers; `python -m enlarger keygen`; messages for key files given in the wrong place."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

import zmq

import enlarger
from enlarger.keys import read_key_file, read_public_key_file

from .support import SMALL_IMAGES, Service, collect, corpus, jpeg_size


class PythonKeysWithTheSwiftServiceTest(unittest.TestCase):
    def test_broker_worker_and_client_keys_made_in_python(self):
        with Service(workers=1, concurrency=1, tcp=True, curve=True, python_keys=True) as service:
            with service.client() as client:
                final = client.submit(corpus(SMALL_IMAGES[1]), width=48).result(timeout=30)
                self.assertEqual(jpeg_size(final.data), (final.width, final.height))
            # A Python-made key not on the broker's allow-list is refused.
            rogue = enlarger.generate_key_pair("rogue", os.path.join(service.directory, "other"))
            with service.client(key=rogue.key_file, server_public_key=service.curve_files["broker.pub"],
                                heartbeat_interval=0.3) as client:
                events = collect(client.submit(corpus(SMALL_IMAGES[1]), width=48), timeout=5)
                self.assertEqual(events[-1].code, enlarger.ErrorCode.BROKER_UNREACHABLE)
                self.assertIn("refused this client's CURVE key", events[-1].message)


class KeygenTest(unittest.TestCase):
    def setUp(self):
        self.directory = tempfile.mkdtemp(prefix="enl-py-keys-")
        self.addCleanup(shutil.rmtree, self.directory, ignore_errors=True)

    def keygen(self, *arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "enlarger", "keygen", *arguments], capture_output=True,
                              text=True, timeout=30)

    def test_command_writes_a_pair_and_refuses_to_overwrite(self):
        target = os.path.join(self.directory, "new", "keys")
        done = self.keygen("client-1", "--directory", target)
        self.assertEqual(done.returncode, 0, done.stderr)
        key_file, pub_file = os.path.join(target, "client-1.key"), os.path.join(target, "client-1.pub")
        pair, public = read_key_file(key_file), read_public_key_file(pub_file)
        self.assertEqual(pair.public_key, public)
        self.assertEqual(zmq.curve_public(pair.secret_key), public)
        self.assertIn(f"wrote {key_file}", done.stdout)
        self.assertIn(public.decode(), done.stdout)
        self.assertNotIn(pair.secret_key.decode(), done.stdout)
        self.assertEqual(stat.S_IMODE(os.stat(key_file).st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o700)
        self.assertEqual(sorted(os.listdir(target)), ["client-1.key", "client-1.pub"], "no temporary files left")

        again = self.keygen("client-1", "--directory", target)
        self.assertEqual(again.returncode, 1)
        self.assertIn("already exists", again.stderr)
        self.assertEqual(read_public_key_file(pub_file), public, "nothing replaced")
        forced = self.keygen("client-1", "--directory", target, "--force")
        self.assertEqual(forced.returncode, 0, forced.stderr)
        self.assertNotEqual(read_public_key_file(pub_file), public)
        self.assertEqual(read_key_file(key_file).public_key, read_public_key_file(pub_file))

    def test_files_match_the_swift_keygen_format(self):
        from .support import enlarger_bin
        subprocess.run([enlarger_bin(), "keygen", "swift", "--directory", self.directory], check=True,
                       capture_output=True)
        enlarger.generate_key_pair("python", self.directory)

        def shape(path: str) -> list[str]:
            # Each line, with its key (40 Z85 characters, '=' among them) made a placeholder.
            with open(path) as file:
                return [re.sub(r"^((?:public|secret)-key = )?.{40}$", r"\1<key>", line.rstrip("\n"))
                        for line in file]
        for suffix in (".key", ".pub"):
            self.assertEqual(shape(os.path.join(self.directory, "python" + suffix)),
                             shape(os.path.join(self.directory, "swift" + suffix)), suffix)

    def test_names_are_checked(self):
        for name in ("", ".hidden", "a/b", "x" * 101, "sp ace"):
            with self.subTest(name=name), self.assertRaises(ValueError):
                enlarger.generate_key_pair(name, self.directory)
        self.assertEqual(os.listdir(self.directory), [])
        done = self.keygen("../escape", "--directory", self.directory)
        self.assertEqual(done.returncode, 1)
        self.assertIn("key name", done.stderr)

    def test_key_files_in_the_wrong_place_are_named_as_such(self):
        pair = enlarger.generate_key_pair("client", self.directory)
        broker = enlarger.generate_key_pair("broker", self.directory)
        # The .pub given as this client's key: not "chmod 600 it" but what the file is, whatever
        # the key's characters (Z85 has '=' among them).
        for index in range(20):
            pub = enlarger.generate_key_pair(f"client-{index}", self.directory).public_key_file
            with self.assertRaises(enlarger.KeyFileError) as caught:
                enlarger.Client("tcp://127.0.0.1:1", server_public_key=broker.public_key_file, key=pub)
            self.assertIn(f"client-{index}.pub", str(caught.exception))
            self.assertIn("like a .pub file", str(caught.exception))
            self.assertNotIn("chmod", str(caught.exception))
        # The broker's .key given as its public key.
        with self.assertRaises(enlarger.KeyFileError) as caught:
            enlarger.Client("tcp://127.0.0.1:1", server_public_key=broker.key_file, key=pair.key_file)
        self.assertIn("like a .key file", str(caught.exception))
        # A real key file others can read is still told to chmod.
        os.chmod(pair.key_file, 0o644)
        with self.assertRaises(enlarger.KeyFileError) as caught:
            read_key_file(pair.key_file)
        self.assertIn("chmod 600", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
