import CZeroMQ

/// One message frame, owning a `zmq_msg_t`.
///
/// A received frame is handed over as is, so a large payload can travel from one socket to
/// another without its bytes being copied: `Socket.send(_:_:)` sends a `zmq_msg_copy` of
/// it, which shares the buffer by reference count and leaves this message intact (so it
/// can be sent again, for instance to retry a job on another worker).
///
/// Not thread-safe; a message may be handed from one thread to another but is used by one
/// thread at a time.
public final class Message {
    // The zmq_msg_t lives at a fixed address: libzmq forbids copying it bitwise.
    let pointer: UnsafeMutablePointer<zmq_msg_t>
    /// Made by `sharing(_:)` over its caller's array: never to be written.
    private var sharesCallersArray = false

    /// An empty frame.
    public init() {
        pointer = .allocate(capacity: 1)
        zmq_msg_init(pointer)
    }

    /// A frame of `count` uninitialised bytes, to be filled with `withUnsafeMutableBytes`
    /// (so an encoder can write straight into the frame it will send).
    public init(count: Int) {
        pointer = .allocate(capacity: 1)
        // zmq_msg_init_size only fails with ENOMEM, which Swift treats as fatal everywhere.
        precondition(zmq_msg_init_size(pointer, count) == 0, "zmq_msg_init_size(\(count)) failed")
    }

    /// A frame of `count` uninitialised bytes, or `ZMQError` (ENOMEM) when libzmq cannot
    /// allocate them: for frames as large as an image, whose failure must end one request
    /// rather than the process.
    public init(allocating count: Int) throws(ZMQError) {
        pointer = .allocate(capacity: 1)
        guard zmq_msg_init_size(pointer, count) == 0 else {
            let error = ZMQError(code: zmq_errno(), operation: "zmq_msg_init_size(\(count))")
            zmq_msg_init(pointer)  // leaves an empty, closable message for deinit
            throw error
        }
    }

    /// A frame holding a copy of `bytes`.
    public convenience init(copying bytes: UnsafeRawBufferPointer) {
        self.init(count: bytes.count)
        if let source = bytes.baseAddress, bytes.count > 0 {
            zmq_msg_data(pointer).copyMemory(from: source, byteCount: bytes.count)
        }
    }

    /// A frame holding a copy of `bytes`, or `ZMQError` when it cannot be allocated.
    public static func copy(of bytes: UnsafeRawBufferPointer) throws(ZMQError) -> Message {
        let message = try Message(allocating: bytes.count)
        if let source = bytes.baseAddress, bytes.count > 0 {
            zmq_msg_data(message.pointer).copyMemory(from: source, byteCount: bytes.count)
        }
        return message
    }

    /// A frame that sends `bytes`' own storage rather than a copy (`zmq_msg_init_data`):
    /// for a payload as large as an image, which a copy would first have to fault in. The
    /// array is kept alive, and never written (it is an immutable copy of the caller's), until
    /// libzmq lets the frame go, perhaps on its I/O thread. Below `sharingThreshold` bytes it
    /// is a copy: a small copy costs less than the bookkeeping (and libzmq keeps frames of up
    /// to 33 bytes inside the message itself).
    public static func sharing(_ bytes: [UInt8]) -> Message {
        bytes.count < sharingThreshold ? Message(bytes) : Message(keeping: SharedBytes(bytes))
    }

    private init(keeping shared: SharedBytes) {
        pointer = .allocate(capacity: 1)
        sharesCallersArray = true
        let keeper = Unmanaged.passRetained(shared)
        let status = zmq_msg_init_data(pointer, shared.start, shared.bytes.count, { _, hint in
            Unmanaged<SharedBytes>.fromOpaque(hint!).release()
        }, keeper.toOpaque())
        // zmq_msg_init_data only fails with ENOMEM (its own small allocation).
        precondition(status == 0, "zmq_msg_init_data(\(shared.bytes.count)) failed")
    }

    /// The size from which `sharing(_:)` shares rather than copies.
    public static let sharingThreshold = 16 * 1024

    /// A frame holding a copy of `bytes`.
    public convenience init(_ bytes: [UInt8]) {
        self.init(count: bytes.count)
        bytes.withUnsafeBytes { source in
            if let base = source.baseAddress, source.count > 0 {
                zmq_msg_data(pointer).copyMemory(from: base, byteCount: source.count)
            }
        }
    }

    /// A frame holding the UTF-8 bytes of `string`.
    public convenience init(_ string: String) {
        self.init(Array(string.utf8))
    }

    deinit {
        zmq_msg_close(pointer)
        pointer.deallocate()
    }

    /// Number of bytes in the frame.
    public var count: Int { zmq_msg_size(pointer) }

    /// Whether more frames of the same multipart message follow (valid after a receive).
    public var hasMore: Bool { zmq_msg_more(pointer) != 0 }

    /// Calls `body` with the frame's bytes, valid only during the call.
    public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        try body(UnsafeRawBufferPointer(start: zmq_msg_data(pointer), count: zmq_msg_size(pointer)))
    }

    /// Calls `body` with the frame's bytes for writing, valid only during the call. Only
    /// for a frame this thread created and has not sent: a received or sent frame may share
    /// its buffer with other messages, and one made by `sharing(_:)` is its caller's array
    /// (a precondition).
    public func withUnsafeMutableBytes<R>(_ body: (UnsafeMutableRawBufferPointer) throws -> R) rethrows -> R {
        precondition(!sharesCallersArray, "a frame made by Message.sharing(_:) is its caller's array: never written")
        return try body(UnsafeMutableRawBufferPointer(start: zmq_msg_data(pointer), count: zmq_msg_size(pointer)))
    }

    /// A copy of the frame's bytes.
    public var bytes: [UInt8] {
        withUnsafeBytes { Array($0) }
    }

    // MARK: Metadata

    /// A property of the connection a received frame came through (`zmq_msg_gets`):
    /// "User-Id", "Peer-Address", "Socket-Type", or one the ZAP handler set; `nil` when the
    /// frame has none (a frame this process made, or see `Array<Message>.userID`).
    ///
    /// The properties live in the `zmq_msg_t`, so read them while this `Message` exists,
    /// before the received frames are dropped.
    public func metadata(_ property: String) -> String? {
        guard let value = zmq_msg_gets(pointer, property) else { return nil }
        return String(cString: value)
    }

    /// The user id the `ZAPHandler` gave the connection this frame came through
    /// (`curve:<public key>`, or a domain's NULL user id). Prefer `Array<Message>.userID`
    /// for a whole received message.
    public var userID: String? { metadata("User-Id") }
}

extension Array where Element == Message {
    /// The authenticated identity of the peer that sent this received multipart message:
    /// the "User-Id" of the first frame that carries connection properties.
    ///
    /// Every frame that came over the wire carries them, but a ROUTER's routing-id frame
    /// may not (libzmq 4.3 leaves it bare when a poll fetched the message), so the first
    /// frame alone is not enough. Read it before the frames are dropped, and only trust it
    /// on sockets set up with `Socket.setCurveServer` or `Socket.setZAPDomain`: without a ZAP
    /// domain, a NULL peer can supply its own "User-Id".
    public var userID: String? {
        for frame in self {
            if let userID = frame.userID { return userID }
        }
        return nil
    }
}

/// The array behind a `Message.sharing(_:)` frame, and where its bytes start: a native array's
/// storage does not move while the array lives unchanged, and this one is never changed.
private final class SharedBytes {
    let bytes: [UInt8]
    let start: UnsafeMutableRawPointer

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
        start = UnsafeMutableRawPointer(mutating: self.bytes.withUnsafeBytes { $0.baseAddress! })
    }
}
