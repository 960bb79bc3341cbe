import Support

/// Hands each signal to `handle` (SIGHUP reloads, SIGTERM and SIGINT stop the daemon), one at a time.
public struct SignalService: Service {
    let signals: AsyncStream<Int32>
    let handle: @Sendable (Int32) async -> Void

    public init(signals: ProcessSignals, handle: @escaping @Sendable (Int32) async -> Void) {
        self.signals = signals.stream
        self.handle = handle
    }

    public func run() async {
        for await signal in signals { await handle(signal) }
    }
}
