#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// Signals as a stream, from dispatch signal sources. The default action of each is turned off, so the
/// process is not killed before it can end its work. The thread that takes a signal must not block it
/// (see `Program.run`, whose waiting thread blocks them all and leaves them to dispatch's threads).
public final class ProcessSignals {
    public let stream: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]
    private let continuation: AsyncStream<Int32>.Continuation

    public init(_ numbers: [Int32]) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .unbounded)
        self.stream = stream
        self.continuation = continuation
        var sources: [any DispatchSourceSignal] = []
        for number in numbers {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    /// Stops the sources and ends the stream. The signals stay ignored.
    public func stop() {
        for s in sources { s.cancel() }
        continuation.finish()
    }

    /// Waits for a signal or for `other` to return, whichever comes first. True when `other` returned first.
    public func wait(orUntil other: @escaping @Sendable () async -> Void) async -> Bool {
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
