import Synchronization

/// The one stream of daemon snapshots. The daemon publishes each snapshot here (in order, never waiting);
/// every service that follows the daemon (state file, metrics, service manager, heartbeat, MQTT, alert
/// commands) reads its own copy, taken before the daemon starts so that it misses none.
public final class SnapshotFeed: Sendable {
    /// How a reader that falls behind catches up.
    public enum Buffering: Sendable {
        /// Every snapshot, in order (files and alerts: each one counts).
        case every
        /// The newest snapshot only (MQTT states: only the current one is worth sending).
        case latest
    }

    private let state = Mutex<(readers: [AsyncStream<DaemonSnapshot>.Continuation], finished: Bool)>(([], false))

    public init() {}

    /// A reader's stream. It ends after the last snapshot once `finish()` is called (a reader taken after
    /// that is empty).
    public func reader(_ buffering: Buffering) -> AsyncStream<DaemonSnapshot> {
        let policy: AsyncStream<DaemonSnapshot>.Continuation.BufferingPolicy = buffering == .every ? .unbounded : .bufferingNewest(1)
        let (stream, continuation) = AsyncStream.makeStream(of: DaemonSnapshot.self, bufferingPolicy: policy)
        let added = state.withLock { s -> Bool in
            guard !s.finished else { return false }
            s.readers.append(continuation)
            return true
        }
        if !added { continuation.finish() }
        return stream
    }

    public func publish(_ snapshot: DaemonSnapshot) {
        state.withLock { s in
            for reader in s.readers { reader.yield(snapshot) }
        }
    }

    /// No more snapshots: each reader ends after those it holds.
    public func finish() {
        let readers = state.withLock { s -> [AsyncStream<DaemonSnapshot>.Continuation] in
            s.finished = true
            defer { s.readers = [] }
            return s.readers
        }
        for reader in readers { reader.finish() }
    }
}
