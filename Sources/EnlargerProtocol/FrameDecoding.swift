import SwiftProtobuf

// The checks every direction shares, in the order they apply: frame count, tag, header
// size, header decoding; then, per kind, the request id and the payload frame count. The
// request id is checked before the frame count so that a Submit with a readable id but bad
// frames can still be answered about that id.
enum FrameDecoding {
    static func header<Header: SwiftProtobuf.Message, Frames: RandomAccessCollection>(
        _: Header.Type, tag: ProtocolTag, frames: Frames
    ) throws(FrameError) -> Header where Frames.Element: FrameBytes {
        guard frames.count >= 2 else {
            throw FrameError(.missingHeader, "expected a tag and a header frame, got \(frames.count) frame(s)")
        }
        let tagFrame = frames[frames.startIndex]
        guard tagFrame.withUnsafeBytes({ $0.elementsEqual(tag.bytes) }) else {
            throw FrameError(.wrongTag, "expected protocol tag \(tag.text), got \(describe(tagFrame))")
        }
        let headerFrame = frames[frames.index(after: frames.startIndex)]
        guard headerFrame.count <= WireLimits.maxHeaderBytes else {
            throw FrameError(
                .oversizeHeader, "header frame of \(headerFrame.count) bytes exceeds \(WireLimits.maxHeaderBytes)")
        }
        do {
            return try headerFrame.withUnsafeBytes { try Header(serializedBytes: $0.bytes) }
        } catch {
            // A Submit that names its id still gets an answer about that id (a terminal one).
            let requestID = Header.self == Enlarger_V1_ClientToBroker.self
                ? headerFrame.withUnsafeBytes { SubmitSalvage.requestID(in: Array($0)) } : nil
            throw FrameError(.undecodableHeader, "header is not a valid \(Header.protoMessageName): \(error)",
                             requestID: requestID)
        }
    }

    static func unknownKind(_ header: some SwiftProtobuf.Message) -> FrameError {
        FrameError(.unknownKind, "\(type(of: header).protoMessageName) has no known kind set")
    }

    static func checkRequestID(_ requestID: String) throws(FrameError) {
        let length = requestID.utf8.count
        guard (1...WireLimits.maxRequestIDBytes).contains(length) else {
            throw FrameError(
                .invalidRequestID,
                "request id must be 1 to \(WireLimits.maxRequestIDBytes) bytes of UTF-8, got \(length) bytes")
        }
    }

    /// The single payload frame of a kind that carries one.
    static func payload<Frames: RandomAccessCollection>(
        of kind: String, in frames: Frames, requestID: String? = nil
    ) throws(FrameError) -> Frames.Element {
        guard frames.count >= 3 else {
            throw FrameError(.missingPayload, "\(kind) needs a payload frame", requestID: requestID)
        }
        guard frames.count == 3 else {
            throw FrameError(.extraFrames, "\(kind) carries 3 frames, got \(frames.count)", requestID: requestID)
        }
        return frames[frames.index(frames.startIndex, offsetBy: 2)]
    }

    static func checkNoPayload<Frames: RandomAccessCollection>(
        of kind: String, in frames: Frames, requestID: String? = nil
    ) throws(FrameError) {
        guard frames.count == 2 else {
            throw FrameError(.extraFrames, "\(kind) carries 2 frames, got \(frames.count)", requestID: requestID)
        }
    }

    private static func describe(_ frame: some FrameBytes) -> String {
        frame.withUnsafeBytes { bytes in
            let shown = bytes.prefix(16)
            let printable = shown.allSatisfy { (0x20..<0x7f).contains($0) }
            let text = printable
                ? "\"\(String(decoding: shown, as: UTF8.self))\""
                : shown.map { String($0, radix: 16).leftPadded(to: 2) }.joined(separator: " ")
            return bytes.count > shown.count ? "\(text)… (\(bytes.count) bytes)" : text
        }
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
