/// The parts of an ICC profile (ICC.1:2010, also version 2) that Enlarger reads itself: the
/// colour space and the description. Every offset is checked against the data: a damaged
/// profile yields `nil` fields, never a crash.
public struct ICCProfile: Sendable, Equatable {
    /// The data colour space signature, trimmed: `RGB`, `CMYK`, `GRAY`, …
    public var colorSpace: String?
    /// The profile description (`desc` tag), from a v2 `desc` or a v4 `mluc` element.
    public var description: String?
    /// The major version (2 or 4).
    public var majorVersion: Int?

    public init(_ bytes: [UInt8]) {
        guard bytes.count >= 132 else { return }
        majorVersion = Int(bytes[8])
        colorSpace = Self.signature(bytes, at: 16)?.trimmingSpaces
        let tags = Int(Self.uint32(bytes, at: 128) ?? 0)
        guard tags <= (bytes.count - 132) / 12 else { return }
        for index in 0..<tags {
            let entry = 132 + index * 12
            guard Self.signature(bytes, at: entry) == "desc",
                  let offset = Self.uint32(bytes, at: entry + 4).map(Int.init),
                  let size = Self.uint32(bytes, at: entry + 8).map(Int.init),
                  offset >= 0, size >= 12, offset <= bytes.count, size <= bytes.count - offset
            else { continue }
            description = Self.text(Array(bytes[offset..<offset + size]))
            return
        }
    }

    /// A `desc` (ASCII) or `mluc` (UTF-16BE, first record) element's text.
    static func text(_ element: [UInt8]) -> String? {
        switch signature(element, at: 0) {
        case "desc":
            guard let count = uint32(element, at: 8).map(Int.init), count > 0, count <= element.count - 12 else { return nil }
            let ascii = element[12..<12 + count].prefix { $0 != 0 }
            return clean(String(decoding: ascii, as: UTF8.self))
        case "mluc":
            guard let records = uint32(element, at: 8), records > 0, let recordSize = uint32(element, at: 12),
                  recordSize >= 12, let length = uint32(element, at: 20).map(Int.init),
                  let offset = uint32(element, at: 24).map(Int.init),
                  offset >= 0, length >= 0, offset <= element.count, length <= element.count - offset
            else { return nil }
            var units: [UInt16] = []
            var index = offset
            while index + 1 < offset + length {
                units.append(UInt16(element[index]) << 8 | UInt16(element[index + 1]))
                index += 2
            }
            return clean(String(decoding: units.prefix { $0 != 0 }, as: UTF16.self))
        default:
            return nil
        }
    }

    private static func clean(_ text: String) -> String? {
        let trimmed = text.trimmingSpaces
        return trimmed.isEmpty ? nil : trimmed
    }

    static func uint32(_ bytes: [UInt8], at offset: Int) -> UInt32? {
        guard offset >= 0, offset + 4 <= bytes.count else { return nil }
        return bytes[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
    }

    static func signature(_ bytes: [UInt8], at offset: Int) -> String? {
        guard offset >= 0, offset + 4 <= bytes.count else { return nil }
        return String(decoding: bytes[offset..<offset + 4], as: UTF8.self)
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var text = Substring(self)
        while let last = text.last, last == " " || last == "\0" { text = text.dropLast() }
        while let first = text.first, first == " " { text = text.dropFirst() }
        return String(text)
    }
}
