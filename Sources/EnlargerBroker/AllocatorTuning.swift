import CAllocator

/// How a process that runs the broker (`enlarger broker`, `enlarger serve`) asks glibc's allocator to keep freed memory for reuse.
///
/// Every image passes through the broker in a message that libzmq allocates on its I/O
/// thread and frees once forwarded. By default glibc gives a burst's worth of freed images
/// back to the system as soon as the heap's free top passes twice the largest block freed,
/// and the next burst faults every page back in, zeroed: about one page fault per 4 KiB of
/// image, more than half of the broker's CPU with inline images (`Benchmarks/service.sh`).
/// Here blocks of up to `mappedFrom` come from the heap, and up to `keptBytes` of free heap
/// top per arena stays mapped for the next ones. Images are allocated and freed on two
/// threads, the broker's loop and libzmq's I/O thread, so about twice `keptBytes` at most
/// stays mapped once the broker is idle.
///
/// Not for the workers: their job threads have an arena each, and memory kept per arena
/// would go unseen by their memory admission. An operator's own settings (`GLIBC_TUNABLES`
/// or `MALLOC_*_` variables) are left alone.
public enum AllocatorTuning {
    public static let keptBytes: Int32 = 64 << 20
    public static let mappedFrom: Int32 = 32 << 20

    /// Whether the settings were taken: not with the operator's own, nor outside glibc.
    @discardableResult
    public static func keepFreedMemoryForReuse(environment: [String: String]) -> Bool {
        let ownSettings = environment["GLIBC_TUNABLES"]?.contains("glibc.malloc.") == true
            || environment.keys.contains { $0.hasPrefix("MALLOC_") && $0.hasSuffix("_") }
        guard !ownSettings else { return false }
        return enlarger_keep_freed_memory(mappedFrom, keptBytes) == 1
    }
}
