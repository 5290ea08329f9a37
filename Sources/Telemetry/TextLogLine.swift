import Logging

/// A log line in text form (`time level label: message key=value …`), built as bytes.
///
/// A value is written bare when it is plain, and quoted with escapes (`"…"`, with `\"`,
/// `\\`, `\n`, `\r`, `\t` and `\u00XX` for other control characters) when it is empty or
/// holds a space, a quote, a backslash, `=` or a control character. So no value (a
/// producer's request id, an error's text) can end the line, forge a field or a line of
/// its own, or confuse a `key=value` parser.
public struct TextLogLine {
    public private(set) var bytes: [UInt8] = []

    public init(capacity: Int = 256) {
        bytes.reserveCapacity(capacity)
    }

    /// Appends `text` as it is: the parts of the line no one else controls.
    public mutating func append(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    /// Appends bytes as they are.
    public mutating func append(bytes more: some Sequence<UInt8>) {
        bytes.append(contentsOf: more)
    }

    /// Appends `value` (not negative) in decimal, zero-padded to `width` digits.
    public mutating func append(digits value: Int, width: Int) {
        let start = bytes.count
        appendDecimal(value.magnitude)
        let missing = width - (bytes.count - start)
        if missing > 0 { bytes.insert(contentsOf: repeatElement(UInt8(ascii: "0"), count: missing), at: start) }
    }

    /// Appends ` key=value`.
    public mutating func append(key: String, _ value: String) {
        appendKey(key)
        var utf8View = value
        let plain = utf8View.withUTF8 { utf8 in
            guard Self.isPlain(utf8) else { return false }
            bytes.append(contentsOf: utf8)
            return true
        }
        if !plain { appendQuoted(value) }
    }

    /// Appends ` key=value` for an integer, in decimal.
    public mutating func append(key: String, _ value: Int) {
        appendKey(key)
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        appendDecimal(value.magnitude)
    }

    /// Appends ` key=value` for an integer, in decimal.
    public mutating func append(key: String, _ value: UInt64) {
        appendKey(key)
        appendDecimal(UInt(value))
    }

    /// Appends ` key=value` for a number as Swift prints it (`4.1`, `0.0`).
    public mutating func append(key: String, _ value: Double) {
        appendKey(key)
        bytes.append(contentsOf: value.description.utf8)
    }

    /// Appends ` key=value` for a duration in milliseconds to a tenth, as
    /// `LogField.milliseconds` gives it and Swift prints it (`4.1`, `12.0`).
    public mutating func append(key: String, milliseconds duration: Duration) {
        let tenths = (LogField.milliseconds(duration) * 10).rounded()
        guard tenths.magnitude < 1e15 else { return append(key: key, LogField.milliseconds(duration)) }
        appendKey(key)
        let whole = Int(tenths)
        if whole < 0 { bytes.append(UInt8(ascii: "-")) }
        appendDecimal(whole.magnitude / 10)
        bytes.append(UInt8(ascii: "."))
        bytes.append(UInt8(ascii: "0") + UInt8(whole.magnitude % 10))
    }

    /// Appends ` key=value` for a log field: numbers in decimal, anything else as text.
    public mutating func append(key: String, _ value: Logger.MetadataValue) {
        switch value {
        case .string(let text): append(key: key, text)
        case .stringConvertible(let number as Int): append(key: key, number)
        case .stringConvertible(let number as UInt64): append(key: key, number)
        case .stringConvertible(let number as UInt32): append(key: key, UInt64(number))
        case .stringConvertible(let number as Double): append(key: key, number)
        default: append(key: key, value.description)
        }
    }

    /// Ends the line.
    public mutating func end() {
        bytes.append(UInt8(ascii: "\n"))
    }

    private mutating func appendKey(_ key: String) {
        bytes.append(UInt8(ascii: " "))
        bytes.append(contentsOf: key.utf8)
        bytes.append(UInt8(ascii: "="))
    }

    private mutating func appendDecimal(_ value: UInt) {
        var value = value
        let start = bytes.count
        repeat {
            bytes.append(UInt8(ascii: "0") + UInt8(truncatingIfNeeded: value % 10))
            value /= 10
        } while value != 0
        bytes[start...].reverse()
    }

    /// Nothing to quote: not empty, and no byte that is a space, a quote, a backslash, `=`,
    /// an ASCII control character or the start of a C1 control character (U+0080–U+009F,
    /// which UTF-8 writes as 0xC2 then 0x80–0x9F).
    static func isPlain(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard !utf8.isEmpty else { return false }
        for byte in utf8 {
            switch byte {
            case 0...0x20, UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "="), 0x7f, 0xc2: return false
            default: continue
            }
        }
        return true
    }

    private mutating func appendQuoted(_ value: String) {
        bytes.append(UInt8(ascii: "\""))
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": bytes.append(contentsOf: #"\""#.utf8)
            case "\\": bytes.append(contentsOf: #"\\"#.utf8)
            case "\n": bytes.append(contentsOf: #"\n"#.utf8)
            case "\r": bytes.append(contentsOf: #"\r"#.utf8)
            case "\t": bytes.append(contentsOf: #"\t"#.utf8)
            case _ where scalar.value < 0x20 || (0x7f...0x9f).contains(scalar.value):
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: #"\u00"#.utf8)
                bytes.append(hex[Int(scalar.value >> 4)])
                bytes.append(hex[Int(scalar.value & 0xf)])
            default:
                bytes.append(contentsOf: String(scalar).utf8)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }
}
