/// What libzmq may still hold for each client, bounded in bytes as well as in messages: a
/// pure value, no sockets.
///
/// libzmq bounds the pipe toward one client by a count of messages (the clients socket's
/// `ZMQ_SNDHWM`), not by bytes. A large count lets small results flow without the loop
/// waiting on the I/O thread every few messages; a small one keeps large results from
/// piling up unseen. Both are had by tracking bytes here: libzmq holds for a client at most
/// the last `depth` messages handed to it (the high-water mark, plus the one its I/O thread
/// is writing out), so the bytes of those messages bound what it holds.
///
/// A message of at most `smallBytes` always may go (the count bounds those). A larger one
/// may go when the large messages among the last `depth - 1` handed to the client (those
/// that stay beside it once it is in) and itself fit `budget`, or when none is there (a
/// single result larger than the budget goes alone). Otherwise the service first hands
/// the client fillers, small messages each of which pushes an older message out of the
/// window; once the pipe refuses one, it is full by count and the message waits in the
/// outbox, counted, like any other. So what libzmq holds for one client stays within
/// `budget` (or one message) plus `depth` small messages.
///
/// A window is kept only while a large message is in it, and is dropped when the client's
/// connection ends (libzmq drops the pipe with it).
struct ClientPipes {
    /// Messages libzmq may hold for one client.
    let depth: Int
    /// Bytes of large messages libzmq may hold for one client.
    let budget: Int
    /// Messages up to this size are bounded by the count alone.
    let smallBytes: Int

    private struct Window {
        /// Messages handed to the client since the window opened.
        var handed: UInt64 = 0
        /// The large ones among the last `depth` handed, oldest first.
        var large: [(index: UInt64, bytes: Int)] = []
        var head = 0
        var largeBytes = 0
    }

    private var windows: [PeerID: Window] = [:]

    /// `highWaterMark`: the clients socket's `ZMQ_SNDHWM` (at least 1).
    init(highWaterMark: Int, budget: Int, smallBytes: Int = 64 << 10) {
        precondition(highWaterMark > 0, "libzmq bounds the pipe only with a high-water mark")
        depth = highWaterMark + 1
        self.budget = budget
        self.smallBytes = smallBytes
    }

    /// Whether a message of `bytes` may be handed to `peer`'s pipe now.
    func admits(_ bytes: Int, to peer: PeerID) -> Bool {
        guard bytes > smallBytes, let window = windows[peer] else { return true }
        // Once it is in, what stays beside it are the last depth - 1 handed: the oldest of
        // the window (if large) leaves.
        var held = window.largeBytes
        if window.head < window.large.count, window.large[window.head].index + UInt64(depth - 1) < window.handed {
            held -= window.large[window.head].bytes
        }
        return held == 0 || held + bytes <= budget
    }

    /// A message of `bytes` was handed to `peer`'s pipe.
    mutating func handed(_ bytes: Int, to peer: PeerID) {
        if bytes <= smallBytes {
            // The common case: nothing is kept for a client that gets only small messages.
            guard !windows.isEmpty, let index = windows.index(forKey: peer) else { return }
            windows.values[index].handed += 1
            Self.slide(&windows.values[index], keeping: depth)
            if windows.values[index].largeBytes == 0 { windows.remove(at: index) }
            return
        }
        var window = windows.removeValue(forKey: peer) ?? Window()
        window.large.append((window.handed, bytes))
        window.largeBytes += bytes
        window.handed += 1
        Self.slide(&window, keeping: depth)
        windows[peer] = window
    }

    /// Hands a message of `bytes` to `peer`'s pipe through `transmit` once it fits, first
    /// transmitting fillers (of `fillerBytes`, at most `smallBytes`) while it does not.
    /// Returns the message's outcome, or the first filler's that was not `sent`.
    mutating func hand<Outcome: Equatable, Failure: Error>(
        _ bytes: Int, to peer: PeerID, fillerBytes: Int, sent: Outcome,
        transmit: (_ filler: Bool) throws(Failure) -> Outcome
    ) throws(Failure) -> Outcome {
        precondition(fillerBytes <= smallBytes, "a filler must not need room itself")
        while !admits(bytes, to: peer) {
            let outcome = try transmit(true)
            guard outcome == sent else { return outcome }
            handed(fillerBytes, to: peer)
        }
        let outcome = try transmit(false)
        if outcome == sent { handed(bytes, to: peer) }
        return outcome
    }

    /// `peer`'s connection ended: libzmq dropped its pipe.
    mutating func forget(_ peer: PeerID) {
        windows[peer] = nil
    }

    /// Whether a large message may still be in `peer`'s pipe.
    func tracks(_ peer: PeerID) -> Bool { windows[peer] != nil }

    /// Bytes of large messages libzmq may hold for `peer`.
    func largeBytes(for peer: PeerID) -> Int { windows[peer]?.largeBytes ?? 0 }

    /// Clients with a large message in their window.
    var count: Int { windows.count }

    /// Lets go of the large messages that are no longer among the last `kept` handed.
    private static func slide(_ window: inout Window, keeping kept: Int) {
        while window.head < window.large.count, window.large[window.head].index + UInt64(kept) < window.handed {
            window.largeBytes -= window.large[window.head].bytes
            window.head += 1
        }
        if window.head > 32 && window.head * 2 > window.large.count {
            window.large.removeFirst(window.head)
            window.head = 0
        }
    }
}
