import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// SIGINT and SIGTERM as an awaitable event.
final class TerminationSignals {
    private let stream: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]

    init() {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self)
        self.stream = stream
        var sources: [any DispatchSourceSignal] = []
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            source.setEventHandler { continuation.yield(sig) }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    /// Waits for a signal or for `other` to return. Returns true when `other` returned first.
    func wait(orUntil other: @escaping @Sendable () async -> Void) async -> Bool {
        let stream = self.stream
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in stream { return false }
                return false
            }
            group.addTask {
                await other()
                return true
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }
}
