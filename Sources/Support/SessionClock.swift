/// The gateway's monotonic time: Swift's `Clock`, with the instants and durations of `ContinuousClock`.
///
/// There is one monotonic clock type in the product, `ContinuousClock` (it keeps counting while the system
/// is suspended), and it conforms as it is. Code that waits or measures takes an `any SessionClock` (or
/// `some SessionClock`), so tests pass a `ManualClock` and time out, back off and retry without sleeping, and
/// the demo passes a `ScaledClock` to compress an hour of backoff into minutes.
///
/// Why `Instant` is pinned to `ContinuousClock.Instant` rather than left generic: a deadline is one type
/// everywhere (the upload command computes one and the dispatcher compares against it, whatever clock each
/// holds), state that stores instants needs no generic parameter, and `any SessionClock` stays usable as an
/// existential (`now`, `sleep(until:)` and `-` have concrete types). A manual or scaled clock's instants are
/// offsets from a real one, so they are ordinary `ContinuousClock.Instant`s.
///
/// Wall-clock time (timestamps that are stored, uploaded and shown) is not a `Clock`: it comes from
/// `SystemClock.now()` in Unix milliseconds.
public protocol SessionClock: Clock where Instant == ContinuousClock.Instant, Duration == Swift.Duration {}

extension ContinuousClock: SessionClock {}

extension SessionClock {
    /// Returns at `deadline`; throws `CancellationError` when the task is cancelled first.
    public func sleep(until deadline: Instant) async throws {
        try await sleep(until: deadline, tolerance: nil)
    }
}

/// A clock that runs `rate` times faster than `ContinuousClock`: `glucose-gateway run --time-scale X`, so the
/// demo and the system tests see an hour of upload backoff in minutes with the product's own timings. Its
/// instants start at the real clock's `now` when it is made and then advance `rate` times as fast.
public struct ScaledClock: SessionClock {
    public let rate: Double
    private let origin: ContinuousClock.Instant
    private let base = ContinuousClock()

    /// `rate` is kept within 1...100000 (a clock that runs slower than real time has no use here).
    public init(rate: Double) {
        self.rate = rate.isFinite ? min(max(rate, 1), 100_000) : 1
        self.origin = base.now
    }

    public var now: ContinuousClock.Instant { origin + (base.now - origin) * rate }
    public var minimumResolution: Duration { base.minimumResolution }

    /// Returns once this clock's `now` has reached `deadline` (the scaled real sleep may end a rounding
    /// error early; it is then repeated for the rest).
    public func sleep(until deadline: ContinuousClock.Instant, tolerance: Duration?) async throws {
        try Task.checkCancellation()
        while true {
            let left = now.duration(to: deadline)
            guard left > .zero else { return }
            try await base.sleep(for: max(left / rate, .nanoseconds(1)), tolerance: tolerance.map { $0 / rate })
        }
    }
}

extension Duration {
    /// Whole milliseconds, rounded toward zero (timeouts handed to C libraries, numbers in status and logs).
    public var wholeMilliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
