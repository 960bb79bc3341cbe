/// Timings of the recovery behaviour. `standard` is what the product uses; tests shrink them.
public struct UploadTiming: Sendable, Equatable {
    /// In-session retry n waits a random time in 0..<min(retryCapMs, retryBaseMs * 2^n) (full jitter).
    public var retryBaseMs = 1000
    public var retryCapMs = 30_000
    /// After the in-session attempts run out: random(longBaseMs, min(longBaseMs * 2^k, longCapMs)).
    public var longBackoffBaseMs = 30_000
    public var longBackoffCapMs = 15 * 60_000
    /// While waiting for the network in recovery mode, a probe every min(probeCapMs, backoff).
    public var probeCapMs = 60_000
    public var probeBaseMs = 1000
    /// Largest batch; timeouts halve it, successes grow it back by a quarter.
    public var maxBatch = 100
    /// Credential checks wait this long at least: Nightscout delays each failed authentication by 5 s.
    public var credentialTimeoutMs = 15_000
    /// Longest `Retry-After` obeyed within a session; a longer one ends the session into long backoff.
    public var retryAfterCapMs = 60_000

    public static let standard = UploadTiming()
    public init() {}
}

/// Backoff arithmetic, with the random source passed in so tests can seed it.
public enum Backoff {
    /// Full jitter: uniform in 0...min(cap, base * 2^attempt).
    public static func fullJitter<R: RandomNumberGenerator>(attempt: Int, baseMs: Int, capMs: Int, using rng: inout R) -> Int {
        let ceiling = ceilingMs(attempt: attempt, baseMs: baseMs, capMs: capMs)
        return ceiling <= 0 ? 0 : Int.random(in: 0...ceiling, using: &rng)
    }

    /// Long-term backoff: uniform in base...min(cap, base * 2^level).
    public static func longTerm<R: RandomNumberGenerator>(level: Int, baseMs: Int, capMs: Int, using rng: inout R) -> Int {
        let ceiling = ceilingMs(attempt: level, baseMs: baseMs, capMs: capMs)
        let floor = min(baseMs, ceiling)
        return Int.random(in: floor...max(floor, ceiling), using: &rng)
    }

    static func ceilingMs(attempt: Int, baseMs: Int, capMs: Int) -> Int {
        let shift = min(max(attempt, 0), 30)
        let (product, overflow) = baseMs.multipliedReportingOverflow(by: 1 << shift)
        return overflow ? capMs : min(capMs, product)
    }
}
