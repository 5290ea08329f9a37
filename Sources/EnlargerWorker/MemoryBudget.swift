import Foundation

/// How much memory a worker lets its jobs use at once (their estimated peaks), and where the
/// default comes from: the memory limit of the worker's cgroup (v2 `memory.max`, v1
/// `memory.limit_in_bytes`, the tightest of its own and its ancestors'), the process's
/// address-space limit (`ulimit -v`) when tighter, or else physical RAM, times
/// `defaultFraction`.
public enum MemoryBudget {
    /// The share of the limit given to jobs. The rest is for what estimates do not count:
    /// the input frames of jobs not yet admitted, ZeroMQ's queues, the runtime and code, and
    /// buffers freed off-thread just after their job ended.
    public static let defaultFraction = 0.75

    /// A memory limit and where it was found.
    public struct Limit: Sendable, Equatable {
        public enum Source: Sendable, Equatable {
            /// A cgroup v2 `memory.max` file.
            case cgroupV2(String)
            /// A cgroup v1 `memory.limit_in_bytes` file.
            case cgroupV1(String)
            /// The process's `RLIMIT_AS` (`ulimit -v`, `prlimit --as`).
            case addressSpace
            case physicalMemory
        }

        public var bytes: Int
        public var source: Source
    }

    /// The default budget of a worker process alone on the limit found by `detectLimit`.
    public static func defaultBudget() -> Int {
        budget(for: detectLimit())
    }

    public static func budget(for limit: Limit, fraction: Double = defaultFraction) -> Int {
        max(1, Int(Double(limit.bytes) * fraction))
    }

    /// The tightest memory limit that applies to this process. `readFile` returns a small
    /// file's contents or nil (injectable for tests).
    public static func detectLimit(
        readFile: (String) -> String? = readSmallFile,
        physicalMemory: UInt64 = ProcessInfo.processInfo.physicalMemory,
        addressSpace: Int? = addressSpaceLimit()
    ) -> Limit {
        var best = Limit(bytes: Int(clamping: physicalMemory), source: .physicalMemory)
        if let addressSpace, addressSpace > 0, addressSpace < best.bytes {
            best = Limit(bytes: addressSpace, source: .addressSpace)
        }
        func consider(_ path: String, _ source: Limit.Source, unlimitedFrom: Int) {
            guard let text = readFile(path)?.trimmingCharacters(in: .whitespacesAndNewlines),
                  let bytes = Int(text), bytes > 0, bytes < unlimitedFrom, bytes < best.bytes else { return }
            best = Limit(bytes: bytes, source: source)
        }
        for line in (readFile("/proc/self/cgroup") ?? "").split(separator: "\n") {
            // "hierarchy-id:controllers:path"; v2 is "0::path".
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            let path = String(fields[2])
            if fields[0] == "0" && fields[1].isEmpty {
                for directory in selfAndAncestors(path) {
                    let file = "/sys/fs/cgroup\(directory)/memory.max"
                    consider(file, .cgroupV2(file), unlimitedFrom: .max)  // "max" does not parse
                }
            } else if fields[1].split(separator: ",").contains("memory") {
                // v1 reports "no limit" as a huge page-rounded number.
                for directory in selfAndAncestors(path) {
                    let file = "/sys/fs/cgroup/memory\(directory)/memory.limit_in_bytes"
                    consider(file, .cgroupV1(file), unlimitedFrom: 1 << 60)
                }
            }
        }
        return best
    }

    /// This process's `RLIMIT_AS` soft limit in bytes, or nil when unlimited.
    public static func addressSpaceLimit() -> Int? {
        var limit = rlimit()
        guard getrlimit(__rlimit_resource_t(RLIMIT_AS.rawValue), &limit) == 0, limit.rlim_cur != rlim_t.max else { return nil }
        return Int(clamping: limit.rlim_cur)
    }

    /// `/a/b/c` → `/a/b/c`, `/a/b`, `/a`, `` (the root): a container often sees its own
    /// cgroup mounted at the root while /proc/self/cgroup names it by its host path.
    static func selfAndAncestors(_ path: String) -> [String] {
        var parts = path.split(separator: "/").map(String.init)
        var paths: [String] = []
        while !parts.isEmpty {
            paths.append("/" + parts.joined(separator: "/"))
            parts.removeLast()
        }
        paths.append("")
        return paths
    }

    public static func readSmallFile(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 64 << 10) else { return nil }
        return String(decoding: data, as: UTF8.self)
    }

    /// Parses a byte count such as `536870912`, `512M`, `2G`, `1.5GiB` or `64k` (binary
    /// multiples: K = 1024). Returns nil for anything else, zero and negative counts included.
    public static func parseByteCount(_ text: String) -> Int? {
        var digits = text.trimmingCharacters(in: .whitespaces).uppercased()
        for suffix in ["IB", "B"] where digits.hasSuffix(suffix) {
            digits.removeLast(suffix.count)
            break
        }
        let units: [Character: Double] = ["K": 0x1p10, "M": 0x1p20, "G": 0x1p30, "T": 0x1p40]
        var multiplier = 1.0
        if let last = digits.last, let unit = units[last] {
            multiplier = unit
            digits.removeLast()
        }
        guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
              let number = Double(digits) else { return nil }
        let bytes = (number * multiplier).rounded(.down)
        guard bytes >= 1, bytes < 0x1p62 else { return nil }
        return Int(bytes)
    }
}
