"""The asyncio API end to end: results, info, status, cancel, timeouts, closing."""

from __future__ import annotations

import asyncio
import os
import tempfile
import unittest

import enlarger

from .support import SMALL_IMAGES, WITH_DEGRADED, Service, check_life, corpus, jpeg_size


class AsyncClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=2).start()

    @classmethod
    def tearDownClass(cls):
        cls.service.stop()

    def run_with_client(self, body, **options):
        async def main():
            async with enlarger.AsyncClient(self.service.endpoint, **options) as client:
                return await body(client)
        return asyncio.run(main())

    def test_degraded_then_final(self):
        async def body(client):
            request = await client.submit(corpus(WITH_DEGRADED), width=300, height=300)
            self.assertIsInstance(request, enlarger.AsyncRequest)
            return [event async for event in request]
        events = self.run_with_client(body)
        check_life(self, events)
        self.assertIsInstance(events[0], enlarger.Accepted)
        self.assertEqual([type(e) for e in events if isinstance(e, enlarger.Result)],
                         [enlarger.Degraded, enlarger.Final], events)
        self.assertEqual(jpeg_size(events[-1].data), (events[-1].width, events[-1].height))

    def test_many_requests_at_once(self):
        async def body(client):
            requests = [await client.submit(corpus(name), width=64, degraded=False) for name in SMALL_IMAGES]
            return await asyncio.gather(*(request.result(timeout=30) for request in requests))
        finals = self.run_with_client(body)
        self.assertEqual(len(finals), len(SMALL_IMAGES))
        for final in finals:
            self.assertIsInstance(final, enlarger.Final)
            self.assertLessEqual(max(final.width, final.height), 64)

    def test_info_status_and_errors(self):
        async def body(client):
            info = await client.info(corpus(WITH_DEGRADED))
            self.assertEqual((info.width, info.height), (3872, 2403))
            with self.assertRaises(enlarger.RequestError) as caught:
                await client.info(b"II*\x00 a TIFF, not read")
            self.assertIsInstance(caught.exception.event, enlarger.Failed)
            status = await client.status(timeout=10)
            self.assertEqual(len(status.workers), 1)
            return await (await client.submit(b"\xff\xd8 truncated", width=10)).next_event(timeout=10)
        self.assertIsInstance(self.run_with_client(body), enlarger.Accepted)

    def test_local_file(self):
        directory = tempfile.mkdtemp(prefix="enl-py-")
        path = os.path.join(directory, "photo.jpg")
        with open(path, "wb") as file:
            file.write(corpus(SMALL_IMAGES[1]))
        self.addCleanup(os.rmdir, directory)
        self.addCleanup(os.remove, path)

        async def body(client):
            final = await (await client.submit(local_file=path, width=50, degraded=False)).result(timeout=30)
            info = await client.info(local_file=path)
            return final, info
        final, info = self.run_with_client(body)
        self.assertEqual(final.width, 50)
        self.assertGreater(info.width, 50)

    def test_bad_arguments_raise_at_the_call(self):
        async def body(client):
            with self.assertRaises(enlarger.InvalidArgumentError):
                client.submit(b"\xff\xd8", width=0)  # no await needed to hear of it
            with self.assertRaises(enlarger.InvalidArgumentError):
                client.submit(local_file="/nonexistent/but/checked/later.jpg", width=10, quality=0)
            with self.assertRaises(FileNotFoundError):
                await client.submit(local_file="/nonexistent/photo.jpg", width=10)
            pending = client.submit(corpus(SMALL_IMAGES[0]), width=10)
            request = await pending
            with self.assertRaises(enlarger.EnlargerError):
                await pending  # one submit, one request
            request.cancel()
        self.run_with_client(body)

    def test_cancel_outcome_and_next_event_timeout(self):
        async def body(client):
            # A 100 MP source to 9000 px takes seconds: it is still running when cancelled.
            request = await client.submit(corpus("thumbor_9643x10328.jpg"), width=9000, degraded=False)
            self.assertIsInstance(await request.next_event(timeout=5), enlarger.Accepted)
            self.assertIsInstance(await request.next_event(timeout=5), enlarger.Started)
            with self.assertRaises(TimeoutError):
                await request.next_event(timeout=0.05)
            outcome = request.cancel()  # strict from here, before any await
            self.assertEqual(await request.next_event(timeout=0), enlarger.Cancelled(request.id))
            self.assertIsNone(await request.next_event(timeout=0))
            self.assertEqual(await outcome, enlarger.CancelOutcome.CANCELLED)
        self.run_with_client(body)

    def test_close_ends_outstanding_requests(self):
        async def main():
            client = enlarger.AsyncClient(self.service.endpoint)
            request = await client.submit(corpus("thumbor_9643x10328.jpg"), width=9000, degraded=False)
            self.assertIsInstance(await request.next_event(timeout=5), enlarger.Accepted)
            await client.close()
            events = [event async for event in request]
            self.assertEqual(events[-1].code, enlarger.ErrorCode.CLIENT_CLOSED, events)
            with self.assertRaises(enlarger.ClientClosedError):
                await client.submit(corpus(SMALL_IMAGES[0]), width=10)
            with self.assertRaises(enlarger.ClientClosedError):
                await client.status()
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
