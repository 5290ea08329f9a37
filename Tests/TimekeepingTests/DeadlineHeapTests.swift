import TestSupport
import Timekeeping
import XCTest

/// The heap against a plain dictionary under random inserts, removals and expiries: the
/// same keys leave in the same deadline order (ties in any order), nothing twice, nothing lost.
final class DeadlineHeapTests: XCTestCase {
    func testRandomOperationsAgreeWithAPlainDictionary() {
        let seed = ProcessInfo.processInfo.environment["ENLARGER_SEED"].flatMap(UInt64.init)
            ?? UInt64.random(in: 0...UInt64(UInt32.max))
        print("deadline heap: seed \(seed)")
        var random = SeededGenerator(seed: seed)
        var heap = DeadlineHeap<Int, Int>()
        var model: [Int: Int] = [:]
        var now = 0
        var expired = 0
        for _ in 0..<20_000 {
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<5:
                let key = Int.random(in: 0..<500, using: &random)
                guard model[key] == nil else { continue }
                let deadline = now + Int.random(in: 0..<100, using: &random)
                heap.insert(key, at: deadline)
                model[key] = deadline
            case 5..<7:
                let key = Int.random(in: 0..<500, using: &random)
                heap.remove(key)
                model[key] = nil
            default:
                now += Int.random(in: 0..<20, using: &random)
                while let key = heap.popExpired(at: now) {
                    guard let deadline = model.removeValue(forKey: key) else {
                        return XCTFail("seed \(seed): \(key) left the heap twice or was never in it")
                    }
                    XCTAssertLessThanOrEqual(deadline, now)
                    XCTAssertEqual(deadline, model.values.min().map { min($0, deadline) } ?? deadline,
                                   "seed \(seed): \(key) left before an earlier deadline")
                    expired += 1
                }
                XCTAssert(model.values.allSatisfy { $0 > now }, "seed \(seed): an expired deadline stayed")
            }
            XCTAssertEqual(heap.count, model.count)
            XCTAssertEqual(heap.earliest, model.values.min())
        }
        XCTAssertGreaterThan(expired, 1000)
        for (key, deadline) in model { XCTAssertEqual(heap.deadline(of: key), deadline) }
    }
}
