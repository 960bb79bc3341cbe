/// The monotonic time that a meter session's timers run on: the system's continuous clock in the gateway,
/// a manual clock in tests, so that timeouts and grace periods are tested without sleeping.
public protocol SessionClock: Sendable {
    var now: ContinuousClock.Instant { get }
    /// Returns at `deadline`; throws `CancellationError` when the task is cancelled first.
    func sleep(until deadline: ContinuousClock.Instant) async throws
}

/// `ContinuousClock`, which keeps counting while the system is suspended.
public struct SystemSessionClock: SessionClock {
    public init() {}
    public var now: ContinuousClock.Instant { ContinuousClock.now }
    public func sleep(until deadline: ContinuousClock.Instant) async throws {
        try await Task.sleep(until: deadline, clock: .continuous)
    }
}
