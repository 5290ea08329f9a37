import Foundation

/// Runs `handler` on SIGINT and SIGTERM (on a dispatch queue, not in signal context).
///
/// On Linux, libdispatch catches the signal with a handler of its own once the source is
/// resumed; ignoring the signal first (as a kqueue-based dispatch needs) would open a window
/// in which a SIGTERM is dropped and the process never stops. Until the source is resumed,
/// the signal keeps its default action: it still ends the process.
func onTerminationSignals(_ handler: @escaping @Sendable (Int32) -> Void) -> [any DispatchSourceSignal] {
    [SIGINT, SIGTERM].map { number in
        #if !os(Linux)
        signal(number, SIG_IGN)
        #endif
        let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
        source.setEventHandler { handler(number) }
        source.resume()
        return source
    }
}
