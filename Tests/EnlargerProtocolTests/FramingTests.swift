import EnlargerProtocol
import SwiftProtobuf
import XCTest

final class FramingTests: XCTestCase {
    private let jpeg: [UInt8] = [0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3]

    private func submit(_ requestID: String = "req-1") -> Enlarger_V1_Submit {
        var submit = Enlarger_V1_Submit()
        submit.requestID = requestID
        submit.spec.width = 320
        submit.delivery = .progressive
        return submit
    }

    private func decodeClient(_ frames: [[UInt8]]) -> Result<ClientToBrokerMessage<[UInt8]>, FrameError> {
        Result { () throws(FrameError) in try ClientToBrokerMessage(frames: frames) }
    }

    private func assertFails(
        _ result: Result<ClientToBrokerMessage<[UInt8]>, FrameError>, _ reason: FrameError.Reason,
        requestID: String? = nil, file: StaticString = #filePath, line: UInt = #line
    ) {
        guard case .failure(let error) = result else {
            return XCTFail("decoded, expected \(reason)", file: file, line: line)
        }
        XCTAssertEqual(error.reason, reason, error.message, file: file, line: line)
        XCTAssertEqual(error.requestID, requestID, file: file, line: line)
        XCTAssertFalse(error.message.isEmpty, file: file, line: line)
    }

    // MARK: Tags

    func testTagsAreTheDocumentedASCIIStrings() {
        XCTAssertEqual(ProtocolTag.client.bytes, Array("ENL-C1".utf8))
        XCTAssertEqual(ProtocolTag.worker.bytes, Array("ENL-W1".utf8))
    }

    // MARK: Round trips

    func testSubmitRoundTripKeepsPayloadFrameSeparate() throws {
        let encoded = ClientToBrokerMessage.submit(submit(), image: jpeg).encoded()
        XCTAssertEqual(encoded.frames.count, 3)
        XCTAssertEqual(encoded.frames[0], Array("ENL-C1".utf8))
        XCTAssertEqual(encoded.frames[2], jpeg)

        guard case .submit(let decoded, let image) = try ClientToBrokerMessage(frames: encoded.frames) else {
            return XCTFail("not a submit")
        }
        XCTAssertEqual(decoded, submit())
        XCTAssertEqual(image, jpeg)
    }

    func testEveryClientKindRoundTrips() throws {
        var cancel = Enlarger_V1_Cancel()
        cancel.requestID = "r"
        let messages: [ClientToBrokerMessage<[UInt8]>] = [.cancel(cancel), .statusRequest, .ping]
        for message in messages {
            let decoded = try ClientToBrokerMessage(frames: message.encoded().frames)
            XCTAssertEqual(decoded.encoded().header, message.encoded().header)
        }
    }

    func testEveryBrokerToClientKindRoundTrips() throws {
        var result = Enlarger_V1_Result()
        result.requestID = "r"
        result.stage = .degraded
        result.width = 10
        result.height = 20
        result.terminal = false
        var failed = Enlarger_V1_Failed()
        failed.requestID = "r"
        failed.code = .corrupt
        failed.message = "bad huffman table"
        var ack = Enlarger_V1_CancelAck()
        ack.requestID = "r"
        ack.outcome = .finished
        var status = Enlarger_V1_StatusReply()
        status.queueDepth = 3
        status.totals.submitted = 7
        var accepted = Enlarger_V1_Accepted()
        accepted.requestID = "r"
        let messages: [BrokerToClientMessage<[UInt8]>] = [
            .accepted(accepted), .started(.with { $0.requestID = "r"; $0.attempt = 2 }),
            .result(result, image: [9, 9]), .failed(failed), .cancelled(.with { $0.requestID = "r" }),
            .rejected(.with { $0.requestID = "r"; $0.code = .overloaded }), .cancelAck(ack),
            .statusReply(status), .pong(.with { $0.heartbeatIntervalMs = 1000 }),
            .error(.with { $0.code = .malformed; $0.message = "x" }),
        ]
        for message in messages {
            let frames = message.encoded().frames
            let decoded = try BrokerToClientMessage(frames: frames)
            XCTAssertEqual(decoded.encoded().frames, frames)
            XCTAssertEqual(decoded.requestID, message.requestID)
        }
    }

    func testEveryWorkerKindRoundTrips() throws {
        let toBroker: [WorkerToBrokerMessage<[UInt8]>] = [
            .ready(.with { $0.capacity = 4; $0.workerName = "w1"; $0.pid = 42 }), .heartbeat,
            .jobStarted(.with { $0.jobID = 1; $0.attempt = 1 }),
            .jobResult(.with { $0.jobID = 1; $0.attempt = 1; $0.stage = .final; $0.terminal = true }, image: [1]),
            .jobFailed(.with { $0.jobID = 1; $0.attempt = 1; $0.code = .truncated }),
            .jobCancelled(.with { $0.jobID = 1; $0.attempt = 1 }), .disconnect,
        ]
        for message in toBroker {
            let frames = message.encoded().frames
            XCTAssertEqual(frames[0], Array("ENL-W1".utf8))
            XCTAssertEqual(try WorkerToBrokerMessage(frames: frames).encoded().frames, frames)
        }
        let toWorker: [BrokerToWorkerMessage<[UInt8]>] = [
            .job(.with { $0.jobID = 7; $0.attempt = 2; $0.requestID = "r"; $0.spec.height = 5 }, image: jpeg),
            .cancelJob(.with { $0.jobID = 7; $0.attempt = 2 }), .heartbeat, .disconnect,
            .error(.with { $0.code = .malformed }),
        ]
        for message in toWorker {
            let frames = message.encoded().frames
            XCTAssertEqual(try BrokerToWorkerMessage(frames: frames).encoded().frames, frames)
        }
    }

    // MARK: Framing errors

    func testTooFewFramesIsMissingHeader() {
        assertFails(decodeClient([]), .missingHeader)
        assertFails(decodeClient([Array("ENL-C1".utf8)]), .missingHeader)
    }

    func testWrongTagIsRejectedBeforeTheHeaderIsRead() {
        var frames = ClientToBrokerMessage<[UInt8]>.ping.encoded().frames
        frames[0] = Array("ENL-W1".utf8)
        assertFails(decodeClient(frames), .wrongTag)
        frames[0] = [0, 1, 2]
        assertFails(decodeClient(frames), .wrongTag)
        frames[0] = []
        assertFails(decodeClient(frames), .wrongTag)
    }

    func testWorkerMessageOnTheClientProtocolIsWrongTag() {
        let frames = WorkerToBrokerMessage<[UInt8]>.heartbeat.encoded().frames
        assertFails(decodeClient(frames), .wrongTag)
    }

    func testGarbageHeaderIsUndecodable() {
        assertFails(decodeClient([ProtocolTag.client.bytes, [0xFF, 0xFF, 0xFF, 0xFF]]), .undecodableHeader)
        // A truncated length-delimited field.
        assertFails(decodeClient([ProtocolTag.client.bytes, [0x0A, 0x10, 0x0A]]), .undecodableHeader)
    }

    func testRequestIDThatIsNotUTF8IsUndecodable() {
        // ClientToBroker.submit { request_id: 0xFF }
        assertFails(decodeClient([ProtocolTag.client.bytes, [0x0A, 0x03, 0x0A, 0x01, 0xFF], jpeg]), .undecodableHeader)
    }

    func testOversizeHeader() {
        let header = [UInt8](repeating: 0, count: WireLimits.maxHeaderBytes + 1)
        assertFails(decodeClient([ProtocolTag.client.bytes, header]), .oversizeHeader)
    }

    func testUnsetOrUnknownKind() {
        assertFails(decodeClient([ProtocolTag.client.bytes, []]), .unknownKind)
        // Field 99 (varint 1): a kind a later version might add.
        assertFails(decodeClient([ProtocolTag.client.bytes, [0x98, 0x06, 0x01]]), .unknownKind)
    }

    func testRequestIDLengthLimits() throws {
        for bad in ["", String(repeating: "x", count: 65), String(repeating: "é", count: 33)] {
            let frames = ClientToBrokerMessage.submit(submit(bad), image: jpeg).encoded().frames
            assertFails(decodeClient(frames), .invalidRequestID)
            var cancel = Enlarger_V1_Cancel()
            cancel.requestID = bad
            assertFails(decodeClient(ClientToBrokerMessage<[UInt8]>.cancel(cancel).encoded().frames), .invalidRequestID)
        }
        let longest = String(repeating: "x", count: 64)
        guard case .submit(let decoded, _) = try ClientToBrokerMessage(
            frames: ClientToBrokerMessage.submit(submit(longest), image: jpeg).encoded().frames)
        else { return XCTFail("not a submit") }
        XCTAssertEqual(decoded.requestID, longest)
    }

    func testSubmitWithoutPayloadNamesTheRequest() {
        let frames = Array(ClientToBrokerMessage.submit(submit("abc"), image: jpeg).encoded().frames.prefix(2))
        assertFails(decodeClient(frames), .missingPayload, requestID: "abc")
    }

    func testExtraFrames() {
        let submitFrames = ClientToBrokerMessage.submit(submit("abc"), image: jpeg).encoded().frames + [[1]]
        assertFails(decodeClient(submitFrames), .extraFrames, requestID: "abc")
        let pingFrames = ClientToBrokerMessage<[UInt8]>.ping.encoded().frames + [[]]
        assertFails(decodeClient(pingFrames), .extraFrames)
    }

    func testWorkerFramingErrors() {
        func reason(_ frames: [[UInt8]]) -> FrameError.Reason? {
            do {
                _ = try WorkerToBrokerMessage<[UInt8]>(frames: frames)
                return nil
            } catch {
                return error.reason
            }
        }
        let result = WorkerToBrokerMessage.jobResult(.with { $0.jobID = 1 }, image: [UInt8]([1])).encoded().frames
        XCTAssertEqual(reason(Array(result.prefix(2))), .missingPayload)
        XCTAssertEqual(reason(result + [[]]), .extraFrames)
        XCTAssertEqual(reason(WorkerToBrokerMessage<[UInt8]>.heartbeat.encoded().frames + [[]]), .extraFrames)
        XCTAssertEqual(reason(ClientToBrokerMessage<[UInt8]>.ping.encoded().frames), .wrongTag)
        XCTAssertEqual(reason([ProtocolTag.worker.bytes, [0x08]]), .undecodableHeader)
    }

    func testDecodingReadsFramesInPlaceFromAnArraySlice() throws {
        let frames = [[0xAA]] + ClientToBrokerMessage.submit(submit(), image: jpeg).encoded().frames
        guard case .submit(_, let image) = try ClientToBrokerMessage(frames: frames.dropFirst()) else {
            return XCTFail("not a submit")
        }
        XCTAssertEqual(image, jpeg)
    }
}
