"""The client fails closed on tcp:// without keys, and reads its endpoint, keys and the
insecure opt-in from the environment as the enlarger commands do."""

from __future__ import annotations

import os
import tempfile
import unittest
from unittest import mock

import enlarger

from .support import SMALL_IMAGES, Service, corpus

TCP = "tcp://127.0.0.1:5570"
#: What the environment may hold; each test starts without any of it.
VARIABLES = ("ENLARGER_BROKER", "ENLARGER_SERVER_PUBLIC_KEY", "ENLARGER_KEY", "ENLARGER_INSECURE_TCP",
             "ENLARGER_RUNTIME_DIR", "XDG_RUNTIME_DIR")


class _Environment(unittest.TestCase):
    def setUp(self):
        patcher = mock.patch.dict(os.environ)
        patcher.start()
        self.addCleanup(patcher.stop)
        for name in VARIABLES:
            os.environ.pop(name, None)


class FailClosedTest(_Environment):
    def test_tcp_without_keys_is_refused(self):
        with self.assertRaises(enlarger.InsecureEndpointError) as caught:
            enlarger.Client(TCP)
        message = str(caught.exception)
        for needed in (TCP, "server_public_key", "key=", "keygen", "insecure=True", "ENLARGER_INSECURE_TCP=1"):
            self.assertIn(needed, message)
        self.assertIsInstance(caught.exception, ValueError)
        with self.assertRaises(enlarger.InsecureEndpointError):
            enlarger.AsyncClient(TCP)

    def test_insecure_opt_in(self):
        enlarger.Client(TCP, insecure=True).close()
        for value in ("1", "true", "TRUE", "True", "yes", "on"):
            with self.subTest(ENLARGER_INSECURE_TCP=value):
                os.environ["ENLARGER_INSECURE_TCP"] = value
                enlarger.Client(TCP).close()
                # The argument wins over the environment.
                with self.assertRaises(enlarger.InsecureEndpointError):
                    enlarger.Client(TCP, insecure=False)
        for value in ("0", "false", "no", "off", ""):
            with self.subTest(ENLARGER_INSECURE_TCP=value):
                os.environ["ENLARGER_INSECURE_TCP"] = value
                with self.assertRaises(enlarger.InsecureEndpointError):
                    enlarger.Client(TCP)
        os.environ["ENLARGER_INSECURE_TCP"] = "maybe"
        with self.assertRaises(enlarger.InvalidArgumentError) as caught:
            enlarger.Client(TCP)
        self.assertIn("ENLARGER_INSECURE_TCP=maybe", str(caught.exception))

    def test_ipc_needs_no_keys(self):
        directory = tempfile.mkdtemp(prefix="enl-py-")
        self.addCleanup(os.rmdir, directory)
        enlarger.Client(f"ipc://{directory}/clients.sock").close()

    def test_keys_from_the_environment_must_come_in_pairs(self):
        os.environ["ENLARGER_KEY"] = "client.key"
        with self.assertRaises(enlarger.InvalidArgumentError) as caught:
            enlarger.Client(TCP)
        self.assertIn("ENLARGER_SERVER_PUBLIC_KEY", str(caught.exception))


class EndpointTest(_Environment):
    def test_default_endpoint_follows_the_cli(self):
        self.assertEqual(enlarger.default_endpoint(), f"ipc:///tmp/enlarger-{os.getuid()}/clients.sock")
        os.environ["XDG_RUNTIME_DIR"] = "/run/user/7"
        self.assertEqual(enlarger.default_endpoint(), "ipc:///run/user/7/enlarger/clients.sock")
        os.environ["ENLARGER_RUNTIME_DIR"] = "/srv/enl"
        self.assertEqual(enlarger.default_endpoint(), "ipc:///srv/enl/clients.sock")
        os.environ["ENLARGER_BROKER"] = TCP
        self.assertEqual(enlarger.default_endpoint(), TCP)

    def test_a_bad_endpoint_in_the_environment_is_named(self):
        os.environ["ENLARGER_BROKER"] = "localhost:5570"
        with self.assertRaises(enlarger.InvalidArgumentError) as caught:
            enlarger.Client()
        self.assertIn("ENLARGER_BROKER=localhost:5570", str(caught.exception))
        self.assertIn("did you mean tcp://localhost:5570?", str(caught.exception))

    def test_endpoint_from_the_environment_reaches_the_broker(self):
        with Service(workers=0) as service:
            os.environ["ENLARGER_BROKER"] = service.endpoint
            with enlarger.Client() as client:
                self.assertEqual(client.endpoint, service.endpoint)
                self.assertEqual(client.status(timeout=10).workers, ())


class CurveFromEnvironmentTest(_Environment):
    def test_keys_from_the_environment_get_results(self):
        with Service(workers=1, concurrency=1, tcp=True, curve=True) as service:
            os.environ.update(ENLARGER_BROKER=service.endpoint,
                              ENLARGER_SERVER_PUBLIC_KEY=service.curve_files["broker.pub"],
                              ENLARGER_KEY=service.curve_files["client.key"])
            with enlarger.Client() as client:
                final = client.submit(corpus(SMALL_IMAGES[1]), width=40).result(timeout=30)
                self.assertEqual(final.width, 40)


if __name__ == "__main__":
    unittest.main()
