import EnlargerBroker
import XCTest

#if canImport(Glibc)
import Glibc
#endif

final class AllocatorTuningTests: XCTestCase {
    func testTheOperatorsOwnAllocatorSettingsAreLeftAlone() {
        XCTAssertFalse(AllocatorTuning.keepFreedMemoryForReuse(
            environment: ["GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"]))
        XCTAssertFalse(AllocatorTuning.keepFreedMemoryForReuse(environment: ["MALLOC_TRIM_THRESHOLD_": "0"]))
    }

    /// What the settings are for: a burst of image-sized blocks, freed and allocated again,
    /// is not faulted in again. (With glibc's defaults the heap's free top is given back once
    /// it passes twice the largest block freed, and every later burst takes one fault a page.)
    func testABurstOfFreedImageSizedBlocksIsReusedWithoutPageFaults() throws {
        #if canImport(Glibc)
        XCTAssertTrue(AllocatorTuning.keepFreedMemoryForReuse(environment: ["GLIBC_TUNABLES": "glibc.rtld.nns=4"]))
        let size = 5 << 20, count = 6
        func burst() -> Int {
            var usage = rusage()
            getrusage(RUSAGE_SELF.rawValue, &usage)
            let before = usage.ru_minflt
            let blocks = (0..<count).map { _ in malloc(size)! }
            for block in blocks { memset(block, 0xA5, size) }
            blocks.forEach { free($0) }
            getrusage(RUSAGE_SELF.rawValue, &usage)
            return usage.ru_minflt - before
        }
        let faults = (0..<3).map { _ in burst() }
        print("page faults per burst of \(count) × \(size >> 20) MiB: \(faults)")
        // Faulting the burst in again would take one fault per 4 KiB page: 7,680.
        XCTAssertLessThan(faults[2], 200, "the freed blocks were given back and faulted in again")
        #endif
    }
}
