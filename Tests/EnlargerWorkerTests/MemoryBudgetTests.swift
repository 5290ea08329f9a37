import XCTest

@testable import EnlargerWorker

/// Where the default memory budget comes from, and how `--memory-budget` is read.
final class MemoryBudgetTests: XCTestCase {
    private let gigabyte: UInt64 = 1 << 30

    func testByteCountsWithAndWithoutSuffixes() {
        let cases: [(String, Int?)] = [
            ("536870912", 536_870_912), ("512M", 512 << 20), ("512m", 512 << 20), ("2G", 2 << 30),
            ("2GiB", 2 << 30), ("2GB", 2 << 30), ("64k", 64 << 10), ("1.5G", 3 << 29), ("1T", 1 << 40),
            (" 100 ", 100), ("0", nil), ("-1G", nil), ("", nil), ("G", nil), ("12Q", nil), ("1e9", nil),
            ("lots", nil), ("99999999999T", nil),
        ]
        for (text, expected) in cases {
            XCTAssertEqual(MemoryBudget.parseByteCount(text), expected, "'\(text)'")
        }
    }

    /// A fake file system: path → contents.
    private func detect(_ files: [String: String], physical: UInt64 = 16 << 30, addressSpace: Int? = nil) -> MemoryBudget.Limit {
        MemoryBudget.detectLimit(readFile: { files[$0] }, physicalMemory: physical, addressSpace: addressSpace)
    }

    func testAnAddressSpaceLimitCountsWhenItIsTheTightest() {
        XCTAssertEqual(detect([:], addressSpace: 1 << 30), .init(bytes: 1 << 30, source: .addressSpace))
        let cgroup = [
            "/proc/self/cgroup": "0::/worker\n",
            "/sys/fs/cgroup/worker/memory.max": "536870912\n",
        ]
        XCTAssertEqual(detect(cgroup, addressSpace: 1 << 30).bytes, 512 << 20, "the cgroup limit is tighter")
        XCTAssertEqual(detect([:], physical: 1 << 30, addressSpace: 4 << 30).source, .physicalMemory)
    }

    func testCgroupV2LimitOfTheProcessOrAnAncestor() {
        let own = detect([
            "/proc/self/cgroup": "0::/system.slice/enlarger.service\n",
            "/sys/fs/cgroup/system.slice/enlarger.service/memory.max": "2147483648\n",
            "/sys/fs/cgroup/system.slice/memory.max": "max\n",
        ])
        XCTAssertEqual(own, .init(bytes: 2 << 30, source: .cgroupV2("/sys/fs/cgroup/system.slice/enlarger.service/memory.max")))
        let parent = detect([
            "/proc/self/cgroup": "0::/kubepods/pod1/container\n",
            "/sys/fs/cgroup/kubepods/pod1/container/memory.max": "max\n",
            "/sys/fs/cgroup/kubepods/pod1/memory.max": "1073741824\n",
            "/sys/fs/cgroup/kubepods/memory.max": "8589934592\n",
        ])
        XCTAssertEqual(parent.bytes, 1 << 30, "the tightest limit up the tree applies")
        // A container with its own cgroup namespace sees itself at the root.
        let root = detect(["/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "536870912\n"])
        XCTAssertEqual(root, .init(bytes: 512 << 20, source: .cgroupV2("/sys/fs/cgroup/memory.max")))
    }

    func testCgroupV1LimitIgnoresItsUnlimitedMarker() {
        let limited = detect([
            "/proc/self/cgroup": "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n",
            "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "3221225472\n",
        ])
        XCTAssertEqual(limited, .init(bytes: 3 << 30, source: .cgroupV1("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes")))
        // Inside the container the host path does not exist; its own limit is at the mount's root.
        let mountedAtRoot = detect([
            "/proc/self/cgroup": "4:memory:/docker/abc\n",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n",
        ])
        XCTAssertEqual(mountedAtRoot.bytes, 1 << 30)
        let unlimited = detect([
            "/proc/self/cgroup": "4:memory:/user.slice\n",
            "/sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes": "9223372036854771712\n",
        ], physical: 8 << 30)
        XCTAssertEqual(unlimited, .init(bytes: 8 << 30, source: .physicalMemory))
    }

    func testPhysicalMemoryWhenThereIsNoCgroupOrItsLimitIsLarger() {
        XCTAssertEqual(detect([:], physical: 4 << 30), .init(bytes: 4 << 30, source: .physicalMemory))
        let larger = detect([
            "/proc/self/cgroup": "0::/big\n", "/sys/fs/cgroup/big/memory.max": "\(64 << 30)\n",
        ], physical: 4 << 30)
        XCTAssertEqual(larger.source, .physicalMemory)
        XCTAssertEqual(detect(["/proc/self/cgroup": "garbage\n::\n"], physical: 1 << 30).bytes, 1 << 30)
    }

    func testDefaultBudgetIsAFractionOfTheLimit() {
        let limit = MemoryBudget.Limit(bytes: 4 << 30, source: .physicalMemory)
        XCTAssertEqual(MemoryBudget.budget(for: limit), 3 << 30)
        XCTAssertGreaterThan(MemoryBudget.defaultBudget(), 0)
        print("this machine: \(MemoryBudget.detectLimit()) → default budget \(MemoryBudget.defaultBudget()) bytes")
    }
}
