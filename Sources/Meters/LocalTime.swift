import GatewayCore
import GlucoseProfile

/// How a wall time was turned into an instant.
public enum LocalTimeResolution: Sendable, Equatable {
    /// The wall time occurs exactly once in the zone.
    case unique(UnixMillis)
    /// The wall time falls in a gap (clocks sprang forward); the instant is the wall time moved forward by
    /// the gap length, i.e. read with the offset in force before the change.
    case gap(UnixMillis, shiftSeconds: Int)
    /// The wall time occurs twice (clocks fell back); the instant is the earlier, first occurrence.
    case repeated(UnixMillis, laterAlternative: UnixMillis)

    public var instant: UnixMillis {
        switch self {
        case .unique(let t), .gap(let t, _), .repeated(let t, _): t
        }
    }
}

/// Reads meter wall-clock times in a meter's IANA time zone.
///
/// The rule for the two ambiguous cases, fixed so that the same bytes always give the same instant:
/// - **DST gap** (a local time that never occurred, e.g. 02:30 on the spring-forward night in
///   Europe/Berlin): the time is moved forward by the length of the gap, as the wall clock would have
///   shown it: 02:30 becomes 03:30 CEST (01:30 UTC). Equivalently, the time is read with the offset in
///   force before the change.
/// - **Repeated hour** (a local time that occurred twice, e.g. 02:30 on the fall-back night): the
///   EARLIER, first occurrence is taken (02:30 CEST, 00:30 UTC, not 02:30 CET).
/// A zone that cannot be loaded resolves nothing; the caller stores the reading as `time-unresolved`.
public struct MeterTimeZone: Sendable, Equatable {
    public let identifier: String
    let info: ZoneInfo

    /// Nil when the identifier is not a zone in the system's tz database (`TZDIR` or /usr/share/zoneinfo).
    public init?(identifier: String, environment: [String: String] = [:]) {
        guard let info = ZoneDatabase.load(identifier, directory: ZoneDatabase.directory(environment: environment)) else {
            return nil
        }
        self.identifier = identifier
        self.info = info
    }

    /// The gateway's own zone identifier (`TZ`, else /etc/timezone, else /etc/localtime, else UTC): the
    /// default for a newly paired meter.
    public static func systemIdentifier(environment: [String: String]) -> String {
        ZoneDatabase.systemIdentifier(environment: environment)
    }

    /// Offset from UTC in seconds at an instant.
    public func offsetSeconds(at seconds: Int64) -> Int {
        info.offset(at: seconds)
    }

    /// The wall time shown in this zone at an instant.
    public func localTime(at millis: UnixMillis) -> GlucoseDateTime {
        let seconds = millis >= 0 ? millis / 1000 : (millis - 999) / 1000
        return GlucoseDateTime(naiveSeconds: seconds + Int64(offsetSeconds(at: seconds)))
    }

    /// Resolves a wall time to an instant under the documented rule; nil when no rule applies (a zone
    /// whose offsets are inconsistent around that time) and for fields that are not a valid date (a month
    /// 13 or a day 0 from a meter's broken clock is not guessed at).
    public func resolve(_ local: GlucoseDateTime) -> LocalTimeResolution? {
        guard local.isValid else { return nil }
        let naive = local.naiveSeconds
        // Offsets in force well before and well after: transitions are never closer than 2 days apart.
        let before = offsetSeconds(at: naive - 172_800)
        let after = offsetSeconds(at: naive + 172_800)
        let current = offsetSeconds(at: naive)
        // Each distinct offset of the three whose instant shows this wall time gives one candidate (distinct
        // offsets give distinct instants); kept as the earliest and latest, without a set or an array: this
        // runs for every record of a download.
        var count = 0
        var earliest = Int64.max
        var latest = Int64.min
        for (index, offset) in [before, after, current].enumerated() {
            if index >= 1, offset == before { continue }
            if index == 2, offset == after { continue }
            let instant = naive - Int64(offset)
            guard offsetSeconds(at: instant) == offset else { continue }
            count += 1
            earliest = min(earliest, instant)
            latest = max(latest, instant)
        }
        if count == 1 {
            return .unique(earliest * 1000)
        }
        if count >= 2 {
            return .repeated(earliest * 1000, laterAlternative: latest * 1000)
        }
        // No instant shows this wall time: a gap. Read it with the offset before the change.
        let instant = naive - Int64(before)
        let shown = offsetSeconds(at: instant)
        guard shown > before else { return nil }
        return .gap(instant * 1000, shiftSeconds: shown - before)
    }
}
