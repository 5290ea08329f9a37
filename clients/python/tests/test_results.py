"""End to end against a real broker and worker: results, failures, status counters."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import time
import unittest
from pathlib import Path

import enlarger
from enlarger._proto import client_pb2

from .support import (SMALL_IMAGES, WITH_DEGRADED, Service, check_life, collect, corpus, jpeg_size,
                      pnm_size, sample_image, wait_for)


class ResultsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service(workers=1, concurrency=2).start()
        cls.client = cls.service.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.service.stop()

    def test_degraded_then_final_are_valid_jpegs(self):
        for name in [WITH_DEGRADED, *SMALL_IMAGES[:3]]:
            with self.subTest(image=name):
                events = collect(self.client.submit(corpus(name), width=300, height=300))
                check_life(self, events)
                self.assertIsInstance(events[0], enlarger.Accepted)
                self.assertGreater(events[0].deadline_ms, 0)
                final = events[-1]
                self.assertIsInstance(final, enlarger.Final, events)
                self.assertEqual(final.format, enlarger.ImageFormat.JPEG)
                self.assertEqual(jpeg_size(final.data), (final.width, final.height))
                self.assertLessEqual(max(final.width, final.height), 300)
                self.assertEqual(max(final.width, final.height), 300, "a large source fills the box")
                degraded = [e for e in events if isinstance(e, enlarger.Degraded)]
                for event in degraded:
                    self.assertFalse(event.terminal)
                    self.assertEqual(jpeg_size(event.data), (event.width, event.height))
                    self.assertLess(events.index(event), events.index(final))
                if name == WITH_DEGRADED:
                    self.assertEqual(len(degraded), 1, f"{name} carries an EXIF thumbnail: {events}")

    def test_variants_come_one_final_each_from_one_request(self):
        variants = [{"width": 320, "format": "webp"}, {"width": 160}, {"width": 64, "height": 64, "fit": "cover"}]
        request = self.client.submit(corpus(WITH_DEGRADED), quality=70, variants=variants, share=False)
        events = collect(request)
        check_life(self, events)
        finals = [e for e in events if isinstance(e, enlarger.Final)]
        self.assertEqual(len(finals), 3, events)
        self.assertFalse([e for e in events if isinstance(e, (enlarger.Degraded, enlarger.Placeholder))], events)
        self.assertEqual([f.variant for f in finals], [0, 1, 2], "largest first, as listed here")
        self.assertEqual([f.terminal for f in finals], [False, False, True])
        self.assertEqual([f.format for f in finals],
                         [enlarger.ImageFormat.WEBP, enlarger.ImageFormat.JPEG, enlarger.ImageFormat.JPEG])
        self.assertEqual(max(finals[0].width, finals[0].height), 320)
        self.assertEqual(jpeg_size(finals[1].data), (finals[1].width, finals[1].height))
        self.assertEqual((finals[2].width, finals[2].height), (64, 64))
        again = self.client.submit(corpus(WITH_DEGRADED), quality=70, variants=variants[::-1], share=False).finals()
        self.assertEqual([f.variant for f in again], [0, 1, 2], "finals() puts them in the list's order")
        self.assertEqual([(f.width, f.height) for f in again], [(64, 64), (finals[1].width, finals[1].height),
                                                                  (finals[0].width, finals[0].height)])

    def test_variant_arguments_are_checked_before_sending(self):
        image = corpus(WITH_DEGRADED)
        for variants, complaint in (([], "1 to 8"), ([{"width": 10}] * 9, "1 to 8"), ({"width": 10}, "list"),
                                    ([{"widht": 10}], "dict of"), ([{"width": 0}], "width"),
                                    ([{"width": 10}, {"width": 10, "fail_on": "none"}], "fail_on")):
            with self.subTest(variants=variants), self.assertRaises(enlarger.InvalidArgumentError) as caught:
                self.client.submit(image, variants=variants)
            self.assertIn(complaint, str(caught.exception))
        with self.assertRaises(enlarger.InvalidArgumentError):
            self.client.submit(image, width=10, variants=[{"width": 20}])
        with self.assertRaises(enlarger.InvalidArgumentError):
            self.client.submit(image, variants=[{"width": 20}], delivery="degraded")

    def test_final_only_delivery(self):
        events = collect(self.client.submit(corpus(WITH_DEGRADED), width=200, degraded=False))
        check_life(self, events)
        self.assertFalse([e for e in events if isinstance(e, enlarger.Degraded)], events)
        self.assertEqual(events[-1].width, 200)

    def test_degraded_only_delivery(self):
        events = collect(self.client.submit(corpus(WITH_DEGRADED), width=200, delivery="degraded"))
        check_life(self, events)
        last = events[-1]
        self.assertIsInstance(last, enlarger.Degraded, events)
        self.assertTrue(last.terminal)
        self.assertEqual(jpeg_size(last.data), (last.width, last.height))
        result = self.client.submit(corpus(WITH_DEGRADED), width=200, delivery=enlarger.Delivery.DEGRADED).result(30)
        self.assertIsInstance(result, enlarger.Degraded)

    def test_pnm_and_fit_cover(self):
        events = collect(self.client.submit(corpus(SMALL_IMAGES[0]), width=64, height=64, fit="cover",
                                            format="pnm", degraded=False))
        check_life(self, events)
        final = events[-1]
        self.assertEqual(final.format, enlarger.ImageFormat.PNM)
        self.assertEqual((final.width, final.height), (64, 64))
        self.assertEqual(pnm_size(final.data), (64, 64))

    def test_other_formats_in_and_out(self):
        # A PNG with a transparent half: the first accepted type that keeps alpha is chosen.
        rgba = sample_image("png-rgba8.png")
        final = self.client.submit(rgba, width=48, accept=["image/jpeg", "image/webp"], degraded=False).result(30)
        self.assertEqual(final.format, enlarger.ImageFormat.WEBP)
        self.assertEqual(final.data[:4], b"RIFF")
        flattened = self.client.submit(rgba, width=48, accept=["image/jpeg"], flatten=True, background="#00ff00",
                                       degraded=False).result(30)
        self.assertEqual(flattened.format, enlarger.ImageFormat.JPEG)
        self.assertTrue(any("flattened" in note for note in flattened.notes), flattened.notes)
        with self.assertRaises(enlarger.RequestError) as caught:
            self.client.submit(rgba, width=48, accept=["image/jpeg"], degraded=False).result(30)
        self.assertEqual(caught.exception.code, enlarger.ErrorCode.INVALID_ARGUMENT)
        # HEIC in, AVIF out; its thumbnail makes the degraded result.
        events = collect(self.client.submit(sample_image("heic-thumbnail.heic"), width=400, format="avif"))
        check_life(self, events)
        self.assertEqual([type(e).__name__ for e in events if isinstance(e, enlarger.Result)], ["Degraded", "Final"])
        self.assertEqual(events[-1].format, enlarger.ImageFormat.AVIF)
        # The placeholder: the final's size and a ThumbHash, first; none when not asked for.
        placeholders = [e for e in events if isinstance(e, enlarger.Placeholder)]
        self.assertEqual(len(placeholders), 1, events)
        self.assertEqual((placeholders[0].width, placeholders[0].height), (events[-1].width, events[-1].height))
        self.assertGreaterEqual(len(placeholders[0].thumbhash), 5)
        quiet = collect(self.client.submit(sample_image("heic-thumbnail.heic"), width=400, format="avif",
                                           placeholder=False))
        check_life(self, quiet)
        self.assertFalse(any(isinstance(e, enlarger.Placeholder) for e in quiet), quiet)
        self.assertEqual(events[-1].data[4:12], b"ftypavif")
        info = self.client.info(sample_image("webp-iccp-p3.webp"))
        self.assertEqual((info.format, info.width, info.height, info.profile_description), ("webp", 96, 64, "Display P3"))

    def test_result_helper(self):
        final = self.client.submit(corpus(SMALL_IMAGES[1]), height=100, quality=90, chroma=444,
                                   progressive=True).result(timeout=30)
        self.assertIsInstance(final, enlarger.Final)
        self.assertEqual(final.height, 100)
        with self.assertRaises(enlarger.RequestError) as caught:
            self.client.submit(b"II*\x00 a TIFF, not read", width=10).result(timeout=30)
        self.assertEqual(caught.exception.code, enlarger.ErrorCode.UNKNOWN_FORMAT)

    def test_bad_inputs_fail_with_their_codes(self):
        cases = [
            (b"", {enlarger.ErrorCode.EMPTY}),
            (corpus("gofuzz_1489f923c4dc.jpg", bad=True), {enlarger.ErrorCode.UNKNOWN_FORMAT}),
            (corpus("sharp_8bit_depth.jpg", bad=True), {enlarger.ErrorCode.UNKNOWN_FORMAT}),
            (corpus("sharp_truncated.jpg", bad=True), {enlarger.ErrorCode.TRUNCATED, enlarger.ErrorCode.CORRUPT}),
            (corpus("ljt_monkey12.jpg", bad=True), {enlarger.ErrorCode.UNSUPPORTED}),
        ]
        for data, codes in cases:
            with self.subTest(first_bytes=data[:4]):
                events = collect(self.client.submit(data, width=100))
                check_life(self, events)
                self.assertIsInstance(events[-1], enlarger.Failed, events)
                self.assertIn(events[-1].code, codes, events[-1])
                self.assertTrue(events[-1].message)

    def test_info_reads_the_header_at_a_worker(self):
        info = self.client.info(corpus("bimg_test_exif_full.jpg"))
        self.assertEqual(info, enlarger.ImageInfo(
            format="jpeg", width=3024, height=4032, orientation=6, channels=3, has_alpha=False, bit_depth=8,
            color_space="ycbcr", profile_description="Display P3", profile_bytes=548, progressive=False,
            has_embedded_thumbnail=True, byte_size=3970480))
        grey = self.client.info(corpus("thumbor_grayscale-icc.jpg"))
        self.assertEqual((grey.channels, grey.color_space, grey.profile_description), (1, "gray", "Dot Gain 20%"))
        with self.assertRaises(enlarger.RequestError) as raised:
            self.client.info(corpus("jpegdecoder_max_size.jpg", bad=True))
        self.assertEqual(raised.exception.event.code, enlarger.ErrorCode.TOO_LARGE)
        with self.assertRaises(enlarger.RequestError) as raised:
            self.client.info(corpus("pillow_junk_jpeg_header.jpg", bad=True), fail_on="warning")
        self.assertEqual(raised.exception.event.code, enlarger.ErrorCode.CORRUPT)

    def test_keep_profile_embeds_the_source_profile(self):
        photo = corpus("bimg_test_icc_prophoto.jpg")
        kept = self.client.submit(photo, width=200, keep_profile=True, degraded=False).result(timeout=30)
        self.assertIn(b"ICC_PROFILE\x00", kept.data)
        self.assertIn(b"ProPhoto", kept.data)
        converted = self.client.submit(photo, width=200, degraded=False).result(timeout=30)
        self.assertNotIn(b"ICC_PROFILE\x00", converted.data)
        with self.assertRaises(enlarger.InvalidArgumentError):
            self.client.submit(photo, width=200, keep_profile="yes")

    def test_fail_on_chooses_which_damage_fails(self):
        junk = corpus("pillow_junk_jpeg_header.jpg", bad=True)
        final = self.client.submit(junk, width=64, degraded=False).result(timeout=30)
        self.assertEqual(final.width, 64)
        events = collect(self.client.submit(junk, width=64, fail_on="warning"))
        check_life(self, events)
        self.assertIsInstance(events[-1], enlarger.Failed, events)
        self.assertEqual(events[-1].code, enlarger.ErrorCode.CORRUPT)
        truncated = corpus("sharp_truncated.jpg", bad=True)
        repaired = self.client.submit(truncated, width=64, fail_on=enlarger.FailOn.NONE, degraded=False)
        self.assertEqual(repaired.result(timeout=30).width, 64)
        with self.assertRaises(enlarger.InvalidArgumentError):
            self.client.submit(junk, width=64, fail_on="sometimes")

    def test_status_counts_every_request(self):
        def settled(status):
            return status.queue_depth == 0 and status.in_flight == 0

        before = wait_for(lambda: s if settled(s := self.client.status()) else None, 10, "an idle broker")
        good = [self.client.submit(corpus(name), width=120, degraded=False) for name in SMALL_IMAGES]
        bad = self.client.submit(b"\xff\xd8 truncated", width=120)
        for request in [*good, bad]:
            check_life(self, collect(request))
        after = wait_for(lambda: s if settled(s := self.client.status()) else None, 10, "an idle broker")
        delta = {f.name: getattr(after.totals, f.name) - getattr(before.totals, f.name)
                 for f in dataclasses.fields(enlarger.Totals)}
        self.assertEqual(delta["submitted"], len(good) + 1, delta)
        self.assertEqual(delta["accepted"], len(good) + 1, delta)
        self.assertEqual(delta["finished"], len(good), delta)
        self.assertEqual(delta["failed"], 1, delta)
        self.assertEqual(delta["rejected"], 0, delta)
        totals = after.totals
        self.assertEqual(totals.submitted, totals.accepted + totals.rejected + totals.duplicate_ids)
        self.assertEqual(totals.accepted, totals.finished + totals.failed + totals.cancelled)
        self.assertEqual(len(after.workers), 1)
        self.assertEqual(after.workers[0].capacity, 2)
        self.assertEqual(after.queue_limit, 1024)
        self.assertGreater(after.uptime_ms, 0)

    def test_identical_requests_are_answered_from_the_cache(self):
        image = corpus(SMALL_IMAGES[0])
        first = collect(self.client.submit(image, width=97, degraded=False))
        check_life(self, first)
        self.assertFalse(first[-1].cached)
        before = self.client.status()
        second = collect(self.client.submit(image, width=97, degraded=False))
        check_life(self, second)
        self.assertEqual([type(e) for e in second], [enlarger.Accepted, enlarger.Final], "no worker ran")
        self.assertTrue(second[-1].cached)
        self.assertEqual(second[-1].data, first[-1].data)
        after = self.client.status()
        self.assertEqual(after.totals.cache_hits - before.totals.cache_hits, 1)
        self.assertGreater(after.cache.entries, 0)
        self.assertGreater(after.cache.limit_bytes, 0)
        unshared = collect(self.client.submit(image, width=97, degraded=False, share=False))
        self.assertFalse(unshared[-1].cached, "without a digest the request is worked out again")
        self.assertTrue(any(isinstance(e, enlarger.Started) for e in unshared), unshared)

    def test_status_has_every_counter_of_the_protocol(self):
        self.assertEqual({f.name for f in dataclasses.fields(enlarger.Totals)},
                         {f.name for f in client_pb2.Totals.DESCRIPTOR.fields})
        reply_fields = {f.name for f in client_pb2.StatusReply.DESCRIPTOR.fields}
        self.assertEqual({f.name for f in dataclasses.fields(enlarger.CacheStatus)},
                         {f.name for f in client_pb2.CacheStatus.DESCRIPTOR.fields})
        self.assertEqual({f.name for f in dataclasses.fields(enlarger.BrokerStatus)}, reply_fields)
        self.assertEqual({f.name for f in dataclasses.fields(enlarger.WorkerStatus)},
                         {f.name for f in client_pb2.WorkerStatus.DESCRIPTOR.fields})

    def test_many_threads_share_one_client(self):
        failures = []

        def produce(offset):
            try:
                requests = [self.client.submit(corpus(SMALL_IMAGES[(offset + i) % len(SMALL_IMAGES)]), width=80)
                            for i in range(8)]
                for request in requests:
                    events = collect(request)
                    check_life(self, events)
                    self.assertIsInstance(events[-1], enlarger.Final, events)
            except BaseException as error:  # reported by the main thread
                failures.append(error)

        threads = [threading.Thread(target=produce, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        self.assertEqual(failures, [])

    def test_request_id_may_be_reused_once_ended(self):
        for _ in range(2):
            events = collect(self.client.submit(corpus(SMALL_IMAGES[2]), width=50, request_id="reused-id"))
            self.assertIsInstance(events[-1], enlarger.Final, events)
            self.assertEqual(events[-1].request_id, "reused-id")


if __name__ == "__main__":
    unittest.main()


class FileSourceTest(unittest.TestCase):
    """A worker with a files root: the client names paths, the worker reads them."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="enl-py-files-")
        with open(os.path.join(cls.root, "photo.jpg"), "wb") as f:
            f.write(corpus("bimg_test_exif_full.jpg"))
        # The worker caches results only of files last written a second or more before.
        time.sleep(1.1)
        cls.service = Service(workers=1, concurrency=2, worker_args=("--files-root", cls.root)).start()
        cls.client = cls.service.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.service.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_a_file_source_is_read_by_the_worker_and_then_cached(self):
        events = collect(self.client.submit(worker_file="photo.jpg", width=160))
        check_life(self, events)
        final = events[-1]
        self.assertIsInstance(final, enlarger.Final)
        self.assertEqual(jpeg_size(final.data), (final.width, final.height))
        self.assertEqual(final.width, 160)
        again = collect(self.client.submit(worker_file="photo.jpg", width=160, degraded=False))
        self.assertTrue(again[-1].cached)
        self.assertEqual(again[-1].data, final.data)
        self.assertEqual(self.client.info(worker_file="photo.jpg").width, 3024)

    def test_file_is_the_deprecated_name_of_worker_file(self):
        with self.assertWarns(DeprecationWarning) as caught:
            request = self.client.submit(file="photo.jpg", width=96, degraded=False)
        self.assertIn("worker_file", str(caught.warning))
        self.assertIn("local_file", str(caught.warning))
        self.assertEqual(caught.filename, __file__, "the warning points at the caller")
        self.assertEqual(request.result(timeout=30).width, 96)
        with self.assertRaises(enlarger.InvalidArgumentError):
            self.client.submit(file="photo.jpg", worker_file="photo.jpg", width=96)

    def test_a_local_file_is_read_here_and_a_worker_file_there(self):
        # A file only on this side: local_file sends its bytes; as a worker path it is not there.
        here = tempfile.mkdtemp(prefix="enl-py-local-")
        self.addCleanup(shutil.rmtree, here, ignore_errors=True)
        local = os.path.join(here, "only-here.jpg")
        with open(local, "wb") as f:
            f.write(corpus(SMALL_IMAGES[1]))
        final = self.client.submit(local_file=local, width=80, degraded=False).result(timeout=30)
        self.assertEqual(jpeg_size(final.data), (final.width, final.height))
        self.assertEqual(final.width, 80)
        self.assertGreater(self.client.info(local_file=Path(local)).width, 80)
        missing = collect(self.client.submit(worker_file="only-here.jpg", width=80))[-1]
        self.assertEqual(missing.code, enlarger.ErrorCode.SOURCE_UNAVAILABLE)
        # And a file only on the worker's side is not here.
        with self.assertRaises(FileNotFoundError):
            self.client.submit(local_file=os.path.join(here, "photo.jpg"), width=80)
        # A local file over the limit is refused before it is read. (No broker at this
        # endpoint: the configured limit holds until a broker tells its own.)
        with enlarger.Client(f"ipc://{here}/no-broker.sock", max_input_bytes=100) as small:
            with self.assertRaises(enlarger.InputTooLargeError):
                small.submit(local_file=local, width=80)

    def test_refused_paths_fail_with_source_refused(self):
        for path in ("../photo.jpg", "/etc/passwd"):
            failed = collect(self.client.submit(worker_file=path, width=64))[-1]
            self.assertIsInstance(failed, enlarger.Failed, path)
            self.assertEqual(failed.code, enlarger.ErrorCode.SOURCE_REFUSED, path)
        missing = collect(self.client.submit(worker_file="missing.jpg", width=64))[-1]
        self.assertEqual(missing.code, enlarger.ErrorCode.SOURCE_UNAVAILABLE)

    def test_exactly_one_source(self):
        for arguments in ({}, {"image": b"x", "worker_file": "a.jpg"}, {"worker_file": "a.jpg", "url": "http://x/"},
                          {"worker_file": ""}, {"url": "x" * 2049}, {"worker_file": 7}, {"local_file": 7},
                          {"image": b"x", "local_file": "a.jpg"}, {"local_file": "a.jpg", "worker_file": "a.jpg"}):
            with self.assertRaises(enlarger.InvalidArgumentError, msg=str(arguments)):
                self.client.submit(width=64, **arguments)
