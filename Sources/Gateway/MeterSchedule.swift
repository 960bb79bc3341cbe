import GatewayCore

/// When the daemon tries which meter next: the quiet period after a complete download (a meter keeps
/// advertising for a while after a measurement, and its records are already here), the retry delay after a
/// failed one, how long the list of paired meters is trusted, and how often an advertiser that is not on it
/// makes the daemon read it again. A value with no I/O and no clock of its own: the daemon passes the time.
public struct MeterSchedule: Sendable, Equatable {
    public var quietAfterDownload: Duration
    public var retryDelay: Duration
    public var pairedRefresh: Duration
    private var notBefore: [String: ContinuousClock.Instant] = [:]
    private var unknownCheckedAt: [String: ContinuousClock.Instant] = [:]
    private var pairedLoadedAt: ContinuousClock.Instant?

    public init(quietAfterDownload: Duration, retryDelay: Duration, pairedRefresh: Duration) {
        self.quietAfterDownload = quietAfterDownload
        self.retryDelay = retryDelay
        self.pairedRefresh = pairedRefresh
    }

    public init(_ settings: DaemonSettings) {
        self.init(quietAfterDownload: settings.quietAfterDownload, retryDelay: settings.retryDelay, pairedRefresh: settings.pairedRefresh)
    }

    /// New settings (a reload): the periods already running keep their ends.
    public mutating func update(_ settings: DaemonSettings) {
        quietAfterDownload = settings.quietAfterDownload
        retryDelay = settings.retryDelay
        pairedRefresh = settings.pairedRefresh
    }

    /// True when the paired list was never read or was read `pairedRefresh` ago or longer.
    public func pairedListIsStale(at now: ContinuousClock.Instant) -> Bool {
        guard let at = pairedLoadedAt else { return true }
        return at.duration(to: now) >= pairedRefresh
    }

    public mutating func pairedListRead(at now: ContinuousClock.Instant) {
        pairedLoadedAt = now
    }

    /// An advertiser that is not on the paired list (perhaps paired since the list was read): true when the
    /// list should be read again for it now, at most once per `pairedRefresh` for each address.
    public mutating func shouldLookUp(unknown address: String, at now: ContinuousClock.Instant) -> Bool {
        if let at = unknownCheckedAt[address], at.duration(to: now) < pairedRefresh { return false }
        unknownCheckedAt[address] = now
        return true
    }

    /// Nil when a session with the meter may start at `now`; otherwise when its quiet or retry period ends.
    public func waitsUntil(_ address: String, at now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard let end = notBefore[address], now < end else { return nil }
        return end
    }

    /// A session ended at `now`: the meter is left alone for the quiet period after a complete download, for
    /// the retry delay otherwise. Returns when that ends.
    @discardableResult
    public mutating func sessionEnded(_ address: String, complete: Bool, at now: ContinuousClock.Instant) -> ContinuousClock.Instant {
        let end = now.advanced(by: complete ? quietAfterDownload : retryDelay)
        notBefore[address] = end
        return end
    }
}
