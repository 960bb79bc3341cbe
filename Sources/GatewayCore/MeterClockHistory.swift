import GlucoseProfile

/// One measurement of a meter's clock against UTC: `offsetSeconds` is F = the meter's clock read as a civil
/// time minus UTC at `at`. A meter's clock runs at one F until a clock event (the user sets it, the meter
/// moves it at a DST switch, the gateway writes it, a battery change resets it). The store remembers one
/// per download that read the clock (`ReadingStore.rememberClock`), and one more for each write.
public struct ClockSync: Sendable, Equatable {
    /// The gateway's UTC when the clock was read (or written).
    public var at: UnixMillis
    /// F in seconds.
    public var offsetSeconds: Int
    /// The highest record sequence the meter had then; nil when none was known. Records up to it were
    /// taken before this measurement.
    public var highestSequence: Int?
    /// This F is the gateway's own write of the clock (`set_meter_clock`), not a reading of it.
    public var setByGateway: Bool

    public init(at: UnixMillis, offsetSeconds: Int, highestSequence: Int?, setByGateway: Bool = false) {
        self.at = at
        self.offsetSeconds = offsetSeconds
        self.highestSequence = highestSequence
        self.setByGateway = setByGateway
    }

    /// F of a clock that showed `clock` (a civil time) at the UTC instant `now`, to the nearest second; nil
    /// for a clock value that is not a valid date.
    public static func offset(clock: GlucoseDateTime, now: UnixMillis) -> Int? {
        guard clock.isValid else { return nil }
        let (clockMillis, o1) = clock.naiveSeconds.multipliedReportingOverflow(by: 1000)
        let (delta, o2) = clockMillis.subtractingReportingOverflow(now)
        guard !o1, !o2 else { return nil }
        let seconds = delta >= 0 ? (delta + 500) / 1000 : -((-delta + 500) / 1000)
        return Int(exactly: seconds)
    }

    /// `+02:00`, `-00:40`, `+01:00:30` (seconds only when not whole minutes).
    public static func formatOffset(_ seconds: Int) -> String {
        let sign = seconds < 0 ? "-" : "+"
        let m = seconds.magnitude
        func two(_ v: UInt) -> String { v < 10 ? "0\(v)" : "\(v)" }
        var text = "\(sign)\(two(m / 3600)):\(two(m / 60 % 60))"
        if m % 60 != 0 { text += ":\(two(m % 60))" }
        return text
    }

    /// `2024-10-20T09:00:00Z  clock +02:00 (read, up to record 42)` for `meters`.
    public var summary: String {
        let how = setByGateway ? "set by the gateway" : "read"
        let upTo = highestSequence.map { ", up to record \($0)" } ?? ""
        return "\(CivilCalendar.isoUTC(millis: at))  clock \(Self.formatOffset(offsetSeconds)) (\(how)\(upTo))"
    }
}

/// Where a stored reading was placed in time by its meter's clock history, as the store keeps it beside
/// the reading (by meter, sequence and user-facing time) when it was first stored. Never changed after.
public struct ReadingClock: Sendable, Equatable {
    public var sequence: Int
    public var userFacingTime: GlucoseDateTime
    /// F the reading was placed with; nil when it could not be placed with certainty.
    public var offsetSeconds: Int?
    /// The sync whose F it is.
    public var since: UnixMillis?
    /// Why that F (`same clock`, `only sync`, `set by the gateway`, `DST switch`, `record order`), or for an
    /// uncertain reading why not.
    public var reason: String
    /// The candidate instants of a reading that could not be placed (`time-uncertain`), ascending.
    public var candidates: [UnixMillis]

    public init(sequence: Int, userFacingTime: GlucoseDateTime, offsetSeconds: Int?, since: UnixMillis?, reason: String,
                candidates: [UnixMillis] = []) {
        self.sequence = sequence
        self.userFacingTime = userFacingTime
        self.offsetSeconds = offsetSeconds
        self.since = since
        self.reason = reason
        self.candidates = candidates
    }

    /// `clock: +02:00 since sync 2024-10-20 (same clock)`; `clock uncertain: A or B (clock changed)`.
    public var summary: String {
        if let offsetSeconds, let since {
            return "clock: \(ClockSync.formatOffset(offsetSeconds)) since sync \(CivilCalendar.isoUTC(millis: since).prefix(10)) (\(reason))"
        }
        return "clock uncertain: " + candidates.map { CivilCalendar.isoUTC(millis: $0) }.joined(separator: " or ") + " (\(reason))"
    }
}

extension ReadingStore {
    // Stores without a clock history (test fakes) remember nothing: every download is then a first sync.
    public func clockHistory(_ address: String) async throws -> [ClockSync] { [] }
    public func rememberClock(_ address: String, _ syncs: [ClockSync]) async throws {}
    public func rememberPlacements(_ address: String, _ placements: [ReadingClock]) async throws {}
    public func placements(_ address: String) async throws -> [ReadingClock] { [] }
}
