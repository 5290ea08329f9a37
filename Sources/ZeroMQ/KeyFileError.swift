#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a key file could not be read or written. `path` names the file; `reason` says what
/// is wrong with it, keeping the `errno` of a failed system call.
public struct KeyFileError: Error, Equatable, Sendable, CustomStringConvertible {
    public enum Reason: Equatable, Sendable {
        case missing
        /// Writing without `replacing`, and the file is there.
        case alreadyExists
        /// A directory, socket or device where a key file should be.
        case notARegularFile
        /// A secret (`.key`) file that its group or others may access; `mode` is its
        /// permission bits. Only the owner may (mode 0600 or 0400).
        case tooOpen(mode: UInt32)
        /// Larger than any key file (`bytes` read before giving up).
        case tooLarge(bytes: Int)
        /// No key in the file (only blank lines and comments, or nothing).
        case empty
        /// Not UTF-8 text.
        case notText
        /// A `.pub` file with more than one key line; `line` is the first extra one.
        case extraLine(line: Int)
        /// A `.key` file line that is not `name = value`, or names an unknown field.
        case unknownField(String, line: Int)
        case duplicateField(String, line: Int)
        case missingField(String)
        /// A line whose value is not a CURVE key.
        case badKey(CurveKeyError, line: Int)
        /// A `.key` file whose public key does not belong to its secret key.
        case keysDoNotMatch
        /// A system call failed.
        case system(operation: String, errno: Int32)
    }

    public let path: String
    public let reason: Reason

    public init(path: String, reason: Reason) {
        self.path = path
        self.reason = reason
    }

    public var description: String {
        switch reason {
        case .missing: "\(path): no such file"
        case .alreadyExists: "\(path) already exists (not overwriting it)"
        case .notARegularFile: "\(path) is not a regular file"
        case .tooOpen(let mode):
            "\(path) holds a secret key but has mode \(String(mode, radix: 8)), so others can access it; "
                + "refusing to use it (chmod 600 \(path))"
        case .tooLarge(let bytes): "\(path) is too large for a key file (\(bytes)+ bytes)"
        case .empty: "\(path) holds no key"
        case .notText: "\(path) is not UTF-8 text"
        case .extraLine(let line): "\(path):\(line): a .pub file holds one key line, found another"
        case .unknownField(let text, let line): "\(path):\(line): expected `public-key = …` or `secret-key = …`, found \"\(text)\""
        case .duplicateField(let name, let line): "\(path):\(line): \(name) given twice"
        case .missingField(let name): "\(path): no \(name) line"
        case .badKey(let error, let line): "\(path):\(line): \(error)"
        case .keysDoNotMatch: "\(path): the public key does not belong to the secret key"
        case .system(let operation, let code):
            "\(path): \(operation) failed: \(String(cString: strerror(code))) (errno \(code))"
        }
    }
}
