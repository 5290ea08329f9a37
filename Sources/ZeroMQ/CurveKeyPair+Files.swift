#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Key files: `NAME.pub` holds a public key, `NAME.key` a whole key pair.
//
// `NAME.pub` is the 40-character Z85 public key on one line. `NAME.key` is text too:
//
//     # comment lines and blank lines are ignored
//     public-key = <40 Z85 characters>
//     secret-key = <40 Z85 characters>
//
// A `.key` file is secret: it is created with mode 0600 under a temporary name and linked
// into place complete, so it is never visible half written or readable by others, and it
// is refused when its group or others have any access to it.

/// The two files a key pair is written to.
public struct KeyFilePaths: Equatable, Sendable {
    /// `NAME.key`: the key pair, mode 0600.
    public let keyFile: String
    /// `NAME.pub`: the public key.
    public let publicKeyFile: String
}

extension CurveKeyPair {
    /// Reads a `.key` file.
    ///
    /// - Throws: `KeyFileError`: `.tooOpen` when the file's group or others have any access
    ///   to it, `.missing`, or what is wrong with its content.
    public init(keyFile path: String) throws(KeyFileError) {
        let text = try readKeyFileText(path, secret: true)
        try self.init(keyFileText: text, path: path)
    }

    /// Parses the content of a `.key` file; `path` is only used in errors.
    public init(keyFileText text: String, path: String) throws(KeyFileError) {
        var publicKey: (CurvePublicKey, line: Int)?
        var secretKey: (CurveSecretKey, line: Int)?
        for (number, line) in keyFileLines(text) {
            guard let equals = line.firstIndex(of: "=") else { throw KeyFileError(path: path, reason: .unknownField(line, line: number)) }
            let name = trimmed(line[..<equals])
            let value = trimmed(line[line.index(after: equals)...])
            do {
                switch name {
                case "public-key":
                    if publicKey != nil { throw KeyFileError(path: path, reason: .duplicateField(name, line: number)) }
                    publicKey = (try CurvePublicKey(z85: value), number)
                case "secret-key":
                    if secretKey != nil { throw KeyFileError(path: path, reason: .duplicateField(name, line: number)) }
                    secretKey = (try CurveSecretKey(z85: value), number)
                default:
                    throw KeyFileError(path: path, reason: .unknownField(line, line: number))
                }
            } catch let error as CurveKeyError {
                throw KeyFileError(path: path, reason: .badKey(error, line: number))
            } catch let error as KeyFileError {
                throw error
            } catch {
                preconditionFailure("unexpected \(error)")
            }
        }
        if publicKey == nil && secretKey == nil { throw KeyFileError(path: path, reason: .empty) }
        guard let publicKey else { throw KeyFileError(path: path, reason: .missingField("public-key")) }
        guard let secretKey else { throw KeyFileError(path: path, reason: .missingField("secret-key")) }
        do {
            try self.init(publicKey: publicKey.0, secretKey: secretKey.0)
        } catch .publicKeyDoesNotMatchSecretKey {
            throw KeyFileError(path: path, reason: .keysDoNotMatch)
        } catch {
            throw KeyFileError(path: path, reason: .badKey(error, line: secretKey.line))
        }
    }

    /// The content of this pair's `.key` file. Secret.
    public var keyFileText: String {
        """
        # CURVE key pair. Secret: keep this file mode 0600, readable only by the process using it.
        # Hand out the public key (the .pub file of the same name), never this file.
        public-key = \(publicKey.z85)
        secret-key = \(secretKey.z85)

        """
    }

    /// Writes `directory/name.key` (mode 0600) and `directory/name.pub` (mode 0644 less the
    /// umask), each atomically: a reader sees the whole file or none.
    ///
    /// - Parameter replacing: overwrite existing files; otherwise refuse with
    ///   `.alreadyExists` before writing either file.
    public func write(name: String, directory: String, replacing: Bool = false) throws(KeyFileError) -> KeyFilePaths {
        let paths = KeyFilePaths(keyFile: "\(directory)/\(name).key", publicKeyFile: "\(directory)/\(name).pub")
        if !replacing {
            for path in [paths.keyFile, paths.publicKeyFile] where fileExists(path) {
                throw KeyFileError(path: path, reason: .alreadyExists)
            }
        }
        try writeFileAtomically(Array(keyFileText.utf8), to: paths.keyFile, mode: 0o600, replacing: replacing)
        do {
            try writeFileAtomically(Array(publicKey.publicKeyFileText.utf8), to: paths.publicKeyFile, mode: 0o644, replacing: replacing)
        } catch {
            // Someone created the .pub meanwhile: leave no half-made pair behind.
            unlink(paths.keyFile)
            throw error
        }
        return paths
    }
}

extension CurvePublicKey {
    /// Reads a `.pub` file: one Z85 key line; blank lines and `#` comments are ignored.
    public init(publicKeyFile path: String) throws(KeyFileError) {
        try self.init(publicKeyFileText: readKeyFileText(path, secret: false), path: path)
    }

    /// Parses the content of a `.pub` file; `path` is only used in errors.
    public init(publicKeyFileText text: String, path: String) throws(KeyFileError) {
        var key: CurvePublicKey?
        for (number, line) in keyFileLines(text) {
            if key != nil { throw KeyFileError(path: path, reason: .extraLine(line: number)) }
            do {
                key = try CurvePublicKey(z85: line)
            } catch {
                throw KeyFileError(path: path, reason: .badKey(error, line: number))
            }
        }
        guard let key else { throw KeyFileError(path: path, reason: .empty) }
        self = key
    }

    /// The content of this key's `.pub` file.
    public var publicKeyFileText: String { z85 + "\n" }

    /// Writes `path` (mode 0644 less the umask) atomically.
    public func writePublicKeyFile(to path: String, replacing: Bool = false) throws(KeyFileError) {
        try writeFileAtomically(Array(publicKeyFileText.utf8), to: path, mode: 0o644, replacing: replacing)
    }
}

// MARK: Text

/// The lines that matter, numbered from 1: trimmed, without blank lines and `#` comments.
private func keyFileLines(_ text: String) -> [(Int, String)] {
    // "\r\n" is a single Character in Swift, so it is a line break of its own.
    text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        .enumerated().compactMap { index, line in
        let content = trimmed(line)
        return content.isEmpty || content.hasPrefix("#") ? nil : (index + 1, content)
    }
}

private func trimmed(_ text: Substring) -> String {
    let blank: Set<Character> = [" ", "\t", "\r"]
    return String(text.drop(while: { blank.contains($0) }).reversed().drop(while: { blank.contains($0) }).reversed())
}

// MARK: Files

/// Far above any key file; a larger file is a mistake, not something to read into memory.
private let keyFileByteLimit = 64 * 1024

private func readKeyFileText(_ path: String, secret: Bool) throws(KeyFileError) -> String {
    let bytes = try readSmallFile(path, secret: secret)
    guard let text = String(validating: bytes, as: UTF8.self) else { throw KeyFileError(path: path, reason: .notText) }
    return text
}

/// Reads a whole small file, checking through the open descriptor (so a file swapped in
/// between the check and the read is still the one checked) that it is a regular file and,
/// when `secret`, that only its owner may access it.
func readSmallFile(_ path: String, secret: Bool) throws(KeyFileError) -> [UInt8] {
    let fd = retryingEINTR { open(path, O_RDONLY | O_CLOEXEC) }
    guard fd >= 0 else {
        let code = errno
        throw KeyFileError(path: path, reason: code == ENOENT ? .missing : .system(operation: "open", errno: code))
    }
    defer { close(fd) }
    var info = stat()
    guard fstat(fd, &info) == 0 else { throw KeyFileError(path: path, reason: .system(operation: "fstat", errno: errno)) }
    guard info.st_mode & S_IFMT == S_IFREG else { throw KeyFileError(path: path, reason: .notARegularFile) }
    if secret && info.st_mode & 0o077 != 0 {
        throw KeyFileError(path: path, reason: .tooOpen(mode: UInt32(info.st_mode & 0o7777)))
    }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = retryingEINTR { read(fd, &chunk, chunk.count) }
        guard count >= 0 else { throw KeyFileError(path: path, reason: .system(operation: "read", errno: errno)) }
        if count == 0 { return bytes }
        bytes += chunk[..<count]
        if bytes.count > keyFileByteLimit { throw KeyFileError(path: path, reason: .tooLarge(bytes: bytes.count)) }
    }
}

private func fileExists(_ path: String) -> Bool {
    var info = stat()
    return lstat(path, &info) == 0
}

/// Writes `bytes` to a new temporary file beside `path` with exactly `mode` (secret files)
/// or `mode` less the umask (others), flushes it, then moves it into place: `rename` when
/// replacing, `link` otherwise (which fails if `path` exists, so nothing is overwritten).
private func writeFileAtomically(_ bytes: [UInt8], to path: String, mode: mode_t, replacing: Bool) throws(KeyFileError) {
    let directory = path.lastIndex(of: "/").map { String(path[..<$0]) } ?? "."
    let name = path.lastIndex(of: "/").map { String(path[path.index(after: $0)...]) } ?? path
    let temporary = "\(directory.isEmpty ? "" : directory)/.\(name).\(String(UInt64.random(in: 0...UInt64.max), radix: 36)).tmp"
    let secret = mode & 0o077 == 0
    // O_EXCL: a fresh file, so its mode is the one given here and nobody else holds it open.
    let fd = retryingEINTR { open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode) }
    guard fd >= 0 else { throw KeyFileError(path: path, reason: .system(operation: "open", errno: errno)) }
    var renamed = false
    defer { if !renamed { unlink(temporary) } }
    do {
        defer { close(fd) }
        if secret, fchmod(fd, mode) != 0 { throw KeyFileError(path: path, reason: .system(operation: "fchmod", errno: errno)) }
        var offset = 0
        while offset < bytes.count {
            let count = retryingEINTR {
                bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            }
            guard count > 0 else { throw KeyFileError(path: path, reason: .system(operation: "write", errno: errno)) }
            offset += count
        }
        guard fsync(fd) == 0 else { throw KeyFileError(path: path, reason: .system(operation: "fsync", errno: errno)) }
    }
    if replacing {
        guard rename(temporary, path) == 0 else { throw KeyFileError(path: path, reason: .system(operation: "rename", errno: errno)) }
        renamed = true
    } else {
        // On success `path` is a second name for the file, and the deferred unlink removes
        // the temporary one.
        guard link(temporary, path) == 0 else {
            let code = errno
            throw KeyFileError(path: path, reason: code == EEXIST ? .alreadyExists : .system(operation: "link", errno: code))
        }
    }
}

@inline(__always)
private func retryingEINTR<T: BinaryInteger>(_ body: () -> T) -> T {
    while true {
        let result = body()
        if result >= 0 || errno != EINTR { return result }
    }
}
