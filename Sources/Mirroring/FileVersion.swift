import Foundation

/// What a source file was when its thumbnail was made. Any change of content through the
/// file system's calls (write, truncate, rename over it, copy with restored times) changes
/// the ctime, which no ordinary tool can set back; size, mtime and inode catch the rest.
///
/// Blind spot, stated in the README: bytes changed through a shared memory mapping
/// (`mmap` + store) change neither mtime nor ctime until the kernel writes the page back,
/// and on some file systems not then either. Linux's change counter (i_version) cannot be
/// read from user space on most file systems, so it is not used.
public struct FileVersion: Codable, Equatable, Hashable, Sendable {
    public var size: Int64
    public var modifiedNanoseconds: Int64
    public var changedNanoseconds: Int64
    public var inode: UInt64
    public var device: UInt64

    public init(_ info: stat) {
        size = Int64(info.st_size)
        modifiedNanoseconds = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
        changedNanoseconds = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
        inode = UInt64(info.st_ino)
        device = UInt64(info.st_dev)
    }

    public init(size: Int64, modifiedNanoseconds: Int64, changedNanoseconds: Int64, inode: UInt64, device: UInt64) {
        self.size = size
        self.modifiedNanoseconds = modifiedNanoseconds
        self.changedNanoseconds = changedNanoseconds
        self.inode = inode
        self.device = device
    }
}

extension FileVersion {
    /// The same file, its content untouched as far as writes show (device, inode, size and
    /// modification time): what a chmod or a rename changes (the change time) is left out.
    func sameContent(as other: FileVersion) -> Bool {
        device == other.device && inode == other.inode && size == other.size
            && modifiedNanoseconds == other.modifiedNanoseconds
    }
}

/// A directory or file named by device and inode: the same whatever path reaches it.
struct FileIdentity: Hashable, Codable {
    var device: UInt64
    var inode: UInt64

    init(_ info: stat) {
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }

    /// The identity of what `path` names, following symbolic links; nil if nothing is there.
    static func of(_ path: String) -> FileIdentity? {
        var info = stat()
        return stat(path, &info) == 0 ? FileIdentity(info) : nil
    }
}
