import Support

/// Timings of the recovery behaviour. `standard` is what the product uses; tests shrink them, and
/// `run --time-scale` keeps them and runs the uploader on a `ScaledClock` instead.
public struct UploadTiming: Sendable, Equatable {
    /// In-session retry n waits a random time in 0...min(retryCap, retryBase * 2^n) (full jitter).
    public var retryBase: Duration = .seconds(1)
    public var retryCap: Duration = .seconds(30)
    /// After the in-session attempts run out: random(longBackoffBase, min(longBackoffBase * 2^k, longBackoffCap)).
    public var longBackoffBase: Duration = .seconds(30)
    public var longBackoffCap: Duration = .seconds(15 * 60)
    /// While waiting for the network in recovery mode, a probe every min(probeCap, backoff).
    public var probeCap: Duration = .seconds(60)
    public var probeBase: Duration = .seconds(1)
    /// Largest batch; timeouts halve it, successes grow it back by a quarter.
    public var maxBatch = 200
    /// Credential checks wait this long at least: Nightscout delays each failed authentication by 5 s.
    public var credentialTimeout: Duration = .seconds(15)
    /// Longest `Retry-After` obeyed within a session; a longer one ends the session into long backoff.
    public var retryAfterCap: Duration = .seconds(60)

    public static let standard = UploadTiming()
    public init() {}
}

/// Backoff arithmetic, with the random source passed in so tests can seed it. Delays are drawn to the
/// millisecond.
public enum Backoff {
    /// Full jitter: uniform in 0...min(cap, base * 2^attempt).
    public static func fullJitter<R: RandomNumberGenerator>(attempt: Int, base: Duration, cap: Duration, using rng: inout R) -> Duration {
        let ceiling = ceiling(attempt: attempt, base: base, cap: cap).wholeMilliseconds
        return ceiling <= 0 ? .zero : .milliseconds(Int64.random(in: 0...ceiling, using: &rng))
    }

    /// Long-term backoff: uniform in base...min(cap, base * 2^level).
    public static func longTerm<R: RandomNumberGenerator>(level: Int, base: Duration, cap: Duration, using rng: inout R) -> Duration {
        let ceiling = ceiling(attempt: level, base: base, cap: cap).wholeMilliseconds
        let floor = min(base.wholeMilliseconds, ceiling)
        return .milliseconds(Int64.random(in: floor...max(floor, ceiling), using: &rng))
    }

    /// min(cap, base * 2^attempt), without overflow.
    static func ceiling(attempt: Int, base: Duration, cap: Duration) -> Duration {
        let shift = min(max(attempt, 0), 30)
        let (product, overflow) = base.wholeMilliseconds.multipliedReportingOverflow(by: 1 << shift)
        return overflow ? cap : min(cap, .milliseconds(product))
    }
}
