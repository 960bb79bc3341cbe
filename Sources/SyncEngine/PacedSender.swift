import Support
import Synchronization

/// Sends the newest pending job, one at a time, on a clock: the engine under the parts that send now and
/// then on a schedule of their own (the heartbeat, Nightscout's device status). It knows nothing of what it
/// sends or when it is due; its owner decides that and calls it from its own isolation, so the order of the
/// owner's decisions is the order of its effects.
///
/// - One timer: `wake(at:_:)` replaces the one set before (none while nothing is due).
/// - One job in flight: a job submitted while another runs waits for it, and a newer one takes the place of
///   a job that is still waiting (only the newest is worth sending).
/// - Jobs and the timer run in tasks of their own, so the owner never waits for the network.
///
/// A class under a lock rather than an actor: its calls must take effect before the owner's next decision,
/// without a suspension point in which a later decision could overtake an earlier one.
public final class PacedSender: Sendable {
    /// One job: a request and what its owner does with the answer.
    public typealias Job = @Sendable () async -> Void

    private struct State {
        var timer: Task<Void, Never>?
        /// The task running jobs; nil while none runs.
        var running: Task<Void, Never>?
        var waiting: Job?
        var stopped = false
    }

    /// The clock its timer runs on, which its owner's schedule reads too.
    public let clock: any SessionClock
    private let state = Mutex(State())

    public init(clock: any SessionClock) {
        self.clock = clock
    }

    /// Calls `tick` at `deadline`, in place of the timer set before; nil only stops that timer.
    public func wake(at deadline: ContinuousClock.Instant?, _ tick: @escaping @Sendable () async -> Void) {
        let clock = self.clock
        state.withLock { s in
            s.timer?.cancel()
            s.timer = nil
            guard !s.stopped, let deadline else { return }
            s.timer = Task {
                do { try await clock.sleep(until: deadline) } catch { return }
                await tick()
            }
        }
    }

    /// Runs `job` now or, when one is in flight, after it, in place of any job still waiting.
    public func submit(_ job: @escaping Job) {
        state.withLock { s in
            guard !s.stopped else { return }
            guard s.running == nil else {
                s.waiting = job
                return
            }
            s.running = Task { [weak self] in
                var next: Job? = job
                while let current = next {
                    await current()
                    next = self?.nextJob()
                }
            }
        }
    }

    /// The job waiting, or nil (and the running task ends) when there is none or the sender stopped.
    private func nextJob() -> Job? {
        state.withLock { s in
            guard !s.stopped, let job = s.waiting else {
                s.running = nil
                return nil
            }
            s.waiting = nil
            return job
        }
    }

    /// Stops the timer and the job in flight; nothing runs after.
    public func stop() {
        state.withLock { s in
            s.stopped = true
            s.timer?.cancel()
            s.timer = nil
            s.running?.cancel()
            s.waiting = nil
        }
    }
}

/// Tells when a request's outcome differs from the one before, so that a failure is logged once per change
/// of outcome rather than at every attempt.
public struct OutcomeChanges: Sendable {
    public enum Change: Sendable, Equatable {
        /// The request failed, and the one before did not fail the same way.
        case failing(String)
        /// The request went through after a failure.
        case recovered
    }

    private var last: String?

    public init() {}

    /// Records the outcome of a request (`error` nil: it went through) and says what changed.
    public mutating func record(error: String?) -> Change? {
        let outcome = error ?? "ok"
        guard outcome != last else { return nil }
        defer { last = outcome }
        if let error { return .failing(error) }
        return last == nil ? nil : .recovered
    }
}
