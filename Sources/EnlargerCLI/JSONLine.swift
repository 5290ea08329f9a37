/// One JSON object per line, keys in the order given (what `--json` prints).
struct JSONLine {
    private var fields: [String] = []

    init() {}

    mutating func add(_ key: String, _ value: String) { fields.append("\(Self.quote(key)):\(Self.quote(value))") }
    mutating func add(_ key: String, _ value: Int) { fields.append("\(Self.quote(key)):\(value)") }
    mutating func add(_ key: String, _ value: Double) {
        fields.append("\(Self.quote(key)):\(value.isFinite ? String((value * 1000).rounded() / 1000) : "null")")
    }
    mutating func add(_ key: String, _ value: Bool) { fields.append("\(Self.quote(key)):\(value)") }
    mutating func add(_ key: String, object: JSONLine) { fields.append("\(Self.quote(key)):\(object.text)") }

    var text: String { "{" + fields.joined(separator: ",") + "}" }

    static func quote(_ s: String) -> String {
        var out = "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20:
                let hex = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
