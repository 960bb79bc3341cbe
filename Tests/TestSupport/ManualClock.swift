import GatewayCore
import Support
import Synchronization

/// A `Clock` that moves only when a test calls `advance(by:)`. Sleepers whose deadline has been reached are
/// woken by the advance; a cancelled sleeper throws `CancellationError` at once. Its instants are offsets
/// from the real clock's `now` when it was made (see `SessionClock` for why the instant type is shared).
public final class ManualClock: SessionClock {
    private struct Sleeper {
        var deadline: ContinuousClock.Instant
        var continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var offset: Duration = .zero
        var sleepers: [Int: Sleeper] = [:]
        var nextKey = 0
    }
    private let base = ContinuousClock.now
    private let state = Mutex(State())

    public init() {}

    public var now: ContinuousClock.Instant { base + state.withLock { $0.offset } }
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Sleepers waiting now.
    public var sleeping: Int { state.withLock { $0.sleepers.count } }

    /// The deadlines of the sleepers waiting now, earliest first.
    public var deadlines: [ContinuousClock.Instant] { state.withLock { $0.sleepers.values.map(\.deadline).sorted() } }

    public func advance(by duration: Duration) {
        let woken = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.offset += duration
            let now = base + s.offset
            let due = s.sleepers.filter { $0.value.deadline <= now }
            for key in due.keys { s.sleepers[key] = nil }
            return due.values.map(\.continuation)
        }
        for continuation in woken { continuation.resume() }
    }

    /// `tolerance` is ignored: a manual clock wakes its sleepers exactly at the advance that reaches them.
    public func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
        let key = state.withLock { s -> Int in
            s.nextKey += 1
            return s.nextKey
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { s -> (any Error)?? in
                    if Task.isCancelled { return .some(CancellationError()) }
                    if base + s.offset >= deadline { return .some(nil) }
                    s.sleepers[key] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                switch resumeNow {
                case .some(.some(let error)): continuation.resume(throwing: error)
                case .some(.none): continuation.resume()
                case .none: break
                }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: key) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }
}
