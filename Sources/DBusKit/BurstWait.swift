/// What one dispatch pass delivered: signals only for subscribers that wait for bursts (`burst`, and
/// which subscriptions took them), and everything else dispatched (`others`: replies, errors, method
/// calls, signals some other subscriber took).
struct PassCount {
    var burst = 0
    var others = 0
    var bursting: Set<Int> = []
}

/// When a read wake-up pauses to let more of a burst arrive, and for how long.
///
/// After each pass the connection asks ``pause(after:callsPending:now:wanted:)``: it pauses `window`
/// and then reads everything queued on the socket as the next pass, while the passes hold burst signals
/// and nothing else, no reply of ours is awaited and the subscribers want it; a pause starts only while
/// at least a window of the wake-up's `budget` (from `start`) is left. So a message outside the burst
/// waits at most one window, and one wake-up pauses at most `budget` in all.
struct BurstWait {
    static let window: Duration = .milliseconds(2)
    static let budget: Duration = .milliseconds(8)

    let start: ContinuousClock.Instant
    var window: Duration = Self.window
    var budget: Duration = Self.budget

    /// The pause before reading the next pass, or nil: end the wake-up now. `wanted` (the subscribers'
    /// consent) is asked last, only when everything else allows a pause.
    func pause(after pass: PassCount, callsPending: Bool, now: ContinuousClock.Instant,
               wanted: () -> Bool) -> Duration? {
        guard pass.burst > 0, pass.others == 0, !callsPending else { return nil }
        guard budget - (now - start) >= window, wanted() else { return nil }
        return window
    }
}
