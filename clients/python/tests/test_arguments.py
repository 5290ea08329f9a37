"""Bad arguments are refused at once, with exceptions that say what is wrong; and the
package's enums cover the protocol's."""

from __future__ import annotations

import os
import tempfile
import unittest

import enlarger
from enlarger import wire
from enlarger._proto import client_pb2, common_pb2


class ArgumentsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.mkdtemp(prefix="enl-py-")
        # No broker: nothing here may need one.
        cls.client = enlarger.Client(f"ipc://{cls.directory}/clients.sock")

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        os.rmdir(cls.directory)

    def refused(self, error_type=enlarger.InvalidArgumentError, image=b"\xff\xd8", **arguments):
        with self.assertRaises(error_type) as caught:
            self.client.submit(image, **arguments)
        self.assertIsInstance(caught.exception, ValueError)
        return str(caught.exception)

    def test_submit_arguments(self):
        self.assertIn("at least one of width and height", self.refused())
        for bad in (0, -1, 16385, 1.5, True, "100"):
            with self.subTest(width=bad):
                self.assertIn("width", self.refused(width=bad))
        self.assertIn("height", self.refused(width=10, height=20000))
        for bad in (0, 101, 50.0):
            with self.subTest(quality=bad):
                self.assertIn("quality", self.refused(width=10, quality=bad))
        self.assertIn("fit", self.refused(width=10, fit="diagonal"))
        self.assertIn("format", self.refused(width=10, format="gif"))
        self.assertIn("chroma", self.refused(width=10, chroma=422))
        self.assertIn("delivery", self.refused(width=10, delivery="eventually"))
        self.assertIn("priority", self.refused(width=10, priority="urgent"))
        self.assertIn("degraded", self.refused(width=10, degraded="yes"))
        self.assertIn("enlarge", self.refused(width=10, enlarge=1))
        for bad in (0, -1, float("nan"), float("inf"), 2**32, "5"):
            with self.subTest(timeout=bad):
                self.assertIn("timeout", self.refused(width=10, timeout=bad))
        self.assertIn("image must be bytes", self.refused(image="a str", width=10))
        self.assertIn("give exactly one of image, local_file, worker_file and url", self.refused(image=None, width=10))

    def test_request_ids(self):
        for bad in ("", "x" * 65, "é" * 33, 42, "\ud800"):
            with self.subTest(request_id=bad):
                self.refused(enlarger.InvalidRequestIdError, width=10, request_id=bad)
        with self.assertRaises(enlarger.InvalidRequestIdError):
            self.client.cancel("")
        # 64 bytes of UTF-8 is the most.
        request = self.client.submit(b"\xff\xd8", width=10, request_id="é" * 32)
        self.assertEqual(request.id, "é" * 32)
        self.client.cancel(request.id)
        self.assertEqual(list(request), [enlarger.Cancelled(request.id, by_this_client=True)])

    def test_output_negotiation_arguments(self):
        for accept in ([], "image/png", ["image/gif"], ["tiff"], [3]):
            with self.subTest(accept=accept):
                self.refused(width=10, accept=accept)
        for background in ("#12345", "red", -1, 0x1000000, 1.5):
            with self.subTest(background=background):
                self.refused(width=10, background=background)
        self.assertIn("accept", self.refused(width=10, flatten=True))
        request = self.client.submit(b"\xff\xd8", width=10, accept=["image/avif", enlarger.ImageFormat.WEBP, "jpeg",
                                                                    "image/jpg; q=0.5"],
                                     flatten=True, background="#0a0", lossless=True)
        self.client.cancel(request.id)

    def test_gain_map_mode_goes_on_the_wire(self):
        from enlarger._proto import common_pb2
        for mode, wire in (("keep", common_pb2.GAIN_MAP_KEEP), ("DROP", common_pb2.GAIN_MAP_DROP),
                           (enlarger.GainMap.APPLY, common_pb2.GAIN_MAP_APPLY)):
            with self.subTest(mode=mode):
                submit = enlarger.Client._build_submit(width=10, height=None, fit="inside", enlarge=False, quality=None,
                                                       progressive=False, chroma="420", format="jpeg", gain_map=mode,
                                                       degraded=False, delivery=None, request_id="r", timeout=None)
                self.assertEqual(submit.spec.gain_map, wire)
        for mode in ("boost", 1, None):
            with self.subTest(mode=mode):
                self.assertIn("gain_map", self.refused(width=10, gain_map=mode))

    def test_accepts_every_spelling_of_the_options(self):
        for fit in ("inside", "COVER", enlarger.Fit.FILL):
            for image_format in ("jpeg", enlarger.ImageFormat.PNM):
                for chroma in (420, "444", enlarger.Chroma.YUV420):
                    request = self.client.submit(bytearray(b"\xff\xd8"), width=1, height=16384, fit=fit,
                                                 format=image_format, chroma=chroma, quality=100, timeout=0.001)
                    self.client.cancel(request.id)

    def test_client_arguments(self):
        for endpoint in ("", "http://host", "ipc://", "tcp://", "/tmp/clients.sock", 5570):
            with self.subTest(endpoint=endpoint), self.assertRaises(enlarger.InvalidArgumentError):
                enlarger.Client(endpoint)
        with self.assertRaises(enlarger.InvalidArgumentError) as caught:
            enlarger.Client("tcp://nohost-without-port")
        self.assertIn("tcp://nohost-without-port", str(caught.exception))
        with self.assertRaises(enlarger.InvalidArgumentError):
            enlarger.Client("tcp://127.0.0.1:5570", key="client.key")
        with self.assertRaises(enlarger.InvalidArgumentError):
            enlarger.Client("tcp://127.0.0.1:5570", server_public_key="broker.pub")
        for options in ({"heartbeat_interval": 0}, {"sync_interval": -1}, {"missed_heartbeats": 0},
                        {"max_input_bytes": 0}, {"heartbeat_interval": float("nan")}, {"max_in_flight": 0},
                        {"max_in_flight": 2.5}, {"insecure": "yes"}):
            with self.subTest(**options), self.assertRaises(enlarger.InvalidArgumentError) as caught:
                enlarger.Client("tcp://127.0.0.1:5570", **{"insecure": True, **options})
            self.assertIn(next(iter(options)), str(caught.exception))


class ProtocolCoverageTest(unittest.TestCase):
    def test_enums_match_the_protocol(self):
        for value in common_pb2.ErrorCode.DESCRIPTOR.values:
            name = value.name.removeprefix("ERROR_CODE_")
            self.assertEqual(enlarger.ErrorCode[name].value, value.number, name)
            self.assertFalse(enlarger.ErrorCode[name].is_local)
        local = [code for code in enlarger.ErrorCode if code.is_local]
        # Counted by number: NOT_JPEG is another name of UNKNOWN_FORMAT on the wire and here.
        numbers = {value.number for value in common_pb2.ErrorCode.DESCRIPTOR.values}
        self.assertEqual(len(enlarger.ErrorCode), len(numbers) + len(local))
        self.assertEqual(enlarger.ErrorCode.from_wire(9999), enlarger.ErrorCode.UNSPECIFIED)
        self.assertEqual(enlarger.ErrorCode.from_wire(1001), enlarger.ErrorCode.UNSPECIFIED)
        for enum_type, proto_enum in ((enlarger.Fit, common_pb2.Fit), (enlarger.Chroma, common_pb2.Chroma),
                                      (enlarger.ImageFormat, common_pb2.ImageFormat),
                                      (enlarger.Delivery, common_pb2.Delivery), (enlarger.FailOn, common_pb2.FailOn)):
            # DELIVERY_INFO is what Client.info sends; FAIL_ON_ERROR is the default's other name.
            wire_values = {v.number for v in proto_enum.DESCRIPTOR.values}
            if enum_type is enlarger.Delivery:
                wire_values -= {common_pb2.DELIVERY_INFO}
            if enum_type is enlarger.FailOn:
                wire_values -= {common_pb2.FAIL_ON_ERROR}
            self.assertEqual(sorted(member.wire for member in enum_type), sorted(wire_values), enum_type)
        # PRIORITY_UNSPECIFIED means interactive, which is always sent by name.
        priorities = {v.number for v in client_pb2.Priority.DESCRIPTOR.values} - {client_pb2.PRIORITY_UNSPECIFIED}
        self.assertEqual(sorted(member.wire for member in enlarger.Priority), sorted(priorities))
        outcomes = client_pb2.CancelAck.Outcome.DESCRIPTOR.values
        self.assertEqual({enlarger.CancelOutcome.from_wire(v.number) for v in outcomes}, set(enlarger.CancelOutcome))

    def test_framing(self):
        message = client_pb2.ClientToBroker()
        message.submit.request_id = "r"
        frames = wire.encode(message, b"\xff\xd8")
        self.assertEqual(frames[0], b"ENL-C1")
        self.assertEqual(len(frames), 3)

        reply = client_pb2.BrokerToClient()
        reply.result.request_id = "r"
        header = reply.SerializeToString()
        decoded, kind, payload = wire.decode([b"ENL-C1", header, b"img"])
        self.assertEqual((kind, payload, decoded.result.request_id), ("result", b"img", "r"))
        pong = client_pb2.BrokerToClient()
        pong.pong.SetInParent()
        self.assertEqual(wire.decode([b"ENL-C1", pong.SerializeToString()])[1:], ("pong", None))
        for frames in ([b"ENL-C1"], [b"ENL-W1", header, b"img"], [b"ENL-C1", b"\xff\xff\xff", b"x"],
                       [b"ENL-C1", b"", b"x"], [b"ENL-C1", header], [b"ENL-C1", header, b"img", b"more"],
                       [b"ENL-C1", pong.SerializeToString(), b"payload"],
                       [b"ENL-C1", bytes(wire.MAX_HEADER_BYTES + 1)]):
            with self.subTest(frames=[f[:8] for f in frames]), self.assertRaises(wire.MalformedMessage):
                wire.decode(frames)


if __name__ == "__main__":
    unittest.main()
