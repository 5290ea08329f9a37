/// The request id of a Submit whose header does not decode as a whole (a string field that
/// is not UTF-8 deep in its source, say), read straight from the protobuf wire format, so
/// that the broker can answer that request with a terminal Rejected{MALFORMED} rather than
/// an Error no request is named in. Only `ClientToBroker.submit` (field 1) and its
/// `request_id` (field 1) are looked at; nil unless both are found and the id is valid.
enum SubmitSalvage {
    static func requestID(in header: [UInt8]) -> String? {
        guard let submit = field(1, in: header[...]),
              let id = field(1, in: submit),
              let text = String(validating: id, as: UTF8.self),
              (1...WireLimits.maxRequestIDBytes).contains(text.utf8.count)
        else { return nil }
        return text
    }

    /// The last length-delimited field `number` of a message (protobuf keeps the last).
    private static func field(_ number: UInt64, in message: ArraySlice<UInt8>) -> ArraySlice<UInt8>? {
        var position = message.startIndex
        var found: ArraySlice<UInt8>?
        func varint() -> UInt64? {
            var value: UInt64 = 0
            var shift: UInt64 = 0
            while position < message.endIndex, shift < 64 {
                let byte = message[position]
                position += 1
                value |= UInt64(byte & 0x7F) << shift
                if byte & 0x80 == 0 { return value }
                shift += 7
            }
            return nil
        }
        while position < message.endIndex {
            guard let key = varint() else { return found }
            switch key & 7 {
            case 0: guard varint() != nil else { return found }
            case 1: position += 8
            case 5: position += 4
            case 2:
                guard let length = varint(), length <= UInt64(message.endIndex - position) else { return found }
                let end = position + Int(length)
                if key >> 3 == number { found = message[position..<end] }
                position = end
            default: return found
            }
        }
        return found
    }
}
