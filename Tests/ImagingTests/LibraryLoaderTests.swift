import CLoader
import Dispatch
import Foundation
import Synchronization
import XCTest

/// The loader behind the HEIF, AVIF and JPEG XL shims (`CLoader`), tried on zlib, which every
/// Debian system has: the first name that loads, every function resolved before any is
/// called, the version check, one load however many threads ask, and failures that say why.
final class LibraryLoaderTests: XCTestCase {
    /// An `el_library` with its C strings and slots, freed with it. Its fields are set once
    /// by `init`; after that only `el_ready`, which is thread-safe, touches it.
    private final class Library: @unchecked Sendable {
        let pointer = UnsafeMutablePointer<el_library>.allocate(capacity: 1)
        private let names: UnsafeMutablePointer<UnsafePointer<CChar>?>
        private let symbols: UnsafeMutablePointer<UnsafePointer<CChar>?>
        let slots: UnsafeMutablePointer<UnsafeMutableRawPointer?>
        private let strings: [UnsafeMutablePointer<CChar>]

        init(names: [String], symbols: [String],
             compatible: (@convention(c) (UnsafeMutablePointer<CChar>?, Int) -> Int32)? = nil) {
            let nameCopies = names.map { strdup($0)! }, symbolCopies = symbols.map { strdup($0)! }
            strings = nameCopies + symbolCopies
            self.names = .allocate(capacity: names.count + 1)
            for (index, name) in nameCopies.enumerated() { self.names[index] = UnsafePointer(name) }
            self.names[names.count] = nil
            self.symbols = .allocate(capacity: max(symbols.count, 1))
            for (index, symbol) in symbolCopies.enumerated() { self.symbols[index] = UnsafePointer(symbol) }
            slots = .allocate(capacity: max(symbols.count, 1))
            slots.initialize(repeating: nil, count: max(symbols.count, 1))
            pointer.initialize(to: el_library())
            pointer.pointee.names = UnsafePointer(self.names)
            pointer.pointee.symbols = UnsafePointer(self.symbols)
            pointer.pointee.slots = slots
            pointer.pointee.count = symbols.count
            pointer.pointee.compatible = compatible
        }

        deinit {
            for string in strings { free(string) }
            names.deallocate()
            symbols.deallocate()
            slots.deallocate()
            pointer.deallocate()
        }

        /// `el_ready`'s answer and message.
        func ready() -> (Bool, String) {
            var message = [CChar](repeating: 0, count: 256)
            let ready = el_ready(pointer, &message, message.count) == 1
            return (ready, String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
    }

    func testALibraryThatIsNotThereIsAnErrorThatNamesIt() {
        let library = Library(names: ["libenlarger-absent.so.9"], symbols: ["zlibVersion"])
        let (ready, message) = library.ready()
        XCTAssertFalse(ready)
        XCTAssertTrue(message.hasPrefix("libenlarger-absent.so.9 could not be loaded: "), message)
        // Final: asked again, the same answer, without trying again.
        let (again, repeated) = library.ready()
        XCTAssertFalse(again)
        XCTAssertEqual(repeated, message)
    }

    func testAMissingFunctionFailsTheLoadBeforeAnyIsCalled() {
        let library = Library(names: ["libz.so.1"], symbols: ["zlibVersion", "enlarger_no_such_function"])
        let (ready, message) = library.ready()
        XCTAssertFalse(ready)
        XCTAssertEqual(message, "libz.so.1 lacks enlarger_no_such_function")
    }

    func testTheFirstNameThatLoadsServesEveryFunction() throws {
        let library = Library(names: ["libenlarger-absent.so.9", "libz.so.1"], symbols: ["zlibVersion", "crc32"])
        let (ready, message) = library.ready()
        XCTAssertTrue(ready, message)
        XCTAssertEqual(message, "", "no message when loaded")
        typealias Version = @convention(c) () -> UnsafePointer<CChar>
        let version = unsafeBitCast(try XCTUnwrap(library.slots[0]), to: Version.self)
        XCTAssertTrue(String(cString: version()).hasPrefix("1."), String(cString: version()))
        typealias CRC32 = @convention(c) (UInt, UnsafePointer<UInt8>?, UInt32) -> UInt
        let crc32 = unsafeBitCast(try XCTUnwrap(library.slots[1]), to: CRC32.self)
        let bytes: [UInt8] = Array("123456789".utf8)
        XCTAssertEqual(crc32(0, bytes, UInt32(bytes.count)), 0xCBF4_3926, "the standard check value")
    }

    func testAVersionTheShimWasNotBuiltForIsRefusedWithItsReason() {
        let library = Library(names: ["libz.so.1"], symbols: ["zlibVersion"]) { message, length in
            _ = "zlib 1.x was loaded; built for 2.0".withCString { strncpy(message!, $0, length - 1) }
            return 0
        }
        let (ready, message) = library.ready()
        XCTAssertFalse(ready)
        XCTAssertEqual(message, "zlib 1.x was loaded; built for 2.0")
    }

    func testManyThreadsAskingAtOnceLoadItOnce() {
        for _ in 0..<20 {
            LoaderCounter.checks.store(0, ordering: .relaxed)
            let library = Library(names: ["libz.so.1"], symbols: ["zlibVersion"]) { _, _ in
                LoaderCounter.checks.add(1, ordering: .relaxed)
                return 1
            }
            let answers = LoaderCounter.Answers()
            DispatchQueue.concurrentPerform(iterations: 8) { _ in answers.add(library.ready().0) }
            XCTAssertEqual(answers.all, Array(repeating: true, count: 8))
            XCTAssertEqual(LoaderCounter.checks.load(ordering: .relaxed), 1, "the version was checked more than once")
        }
    }
}

/// What the C callbacks above (which capture nothing) count, and the threads' answers.
private enum LoaderCounter {
    static let checks = Atomic<Int>(0)

    final class Answers: @unchecked Sendable {
        // @unchecked: every access holds `lock`.
        private let lock = NSLock()
        private var values: [Bool] = []

        func add(_ value: Bool) {
            lock.lock()
            values.append(value)
            lock.unlock()
        }

        var all: [Bool] {
            lock.lock()
            defer { lock.unlock() }
            return values
        }
    }
}
