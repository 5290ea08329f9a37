import CDigest
import Foundation

/// The SHA-256 digests of the contract: an inline image's `sha256` (what a Submit that may
/// share names, and what the worker checks before using the bytes) and a URL response's
/// version. Computed by the system's libcrypto.
public enum Digest {
    /// The SHA-256 of `bytes`; nil only if libcrypto failed (it could not allocate), which a
    /// caller treats as not knowing the digest.
    public static func sha256(_ bytes: UnsafeRawBufferPointer) -> Data? {
        var digest = Data(count: Int(ED_SHA256_LENGTH))
        let status = digest.withUnsafeMutableBytes { out in
            ed_sha256(bytes.baseAddress, bytes.count, out.baseAddress!.assumingMemoryBound(to: UInt8.self))
        }
        return status == ED_OK ? digest : nil
    }

    /// The SHA-256 of `bytes` (Data, [UInt8], a slice…).
    public static func sha256(_ bytes: some ContiguousBytes) -> Data? {
        bytes.withUnsafeBytes { sha256($0) }
    }
}
