#if canImport(Glibc)
import Glibc
#endif
import Dispatch

/// SIGTERM, SIGINT and SIGHUP as a stream, from dispatch signal sources (the default actions are turned
/// off so the process is not killed before it can end its downloads).
public final class DaemonSignals {
    public let stream: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]
    private let continuation: AsyncStream<Int32>.Continuation

    public init() {
        let (stream, continuation) = AsyncStream.makeStream(of: Int32.self, bufferingPolicy: .unbounded)
        self.stream = stream
        self.continuation = continuation
        var sources: [any DispatchSourceSignal] = []
        for number in [SIGTERM, SIGINT, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            sources.append(source)
        }
        self.sources = sources
    }

    public func stop() {
        for s in sources { s.cancel() }
        continuation.finish()
    }
}

/// Hands each signal to `handle` (SIGHUP reloads, SIGTERM and SIGINT stop the daemon), one at a time.
public struct SignalService: Service {
    let signals: AsyncStream<Int32>
    let handle: @Sendable (Int32) async -> Void

    public init(signals: DaemonSignals, handle: @escaping @Sendable (Int32) async -> Void) {
        self.signals = signals.stream
        self.handle = handle
    }

    public func run() async {
        for await signal in signals { await handle(signal) }
    }
}
