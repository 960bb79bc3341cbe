import GatewayCore
import GlucoseProfile
import Meters
import SQLiteStore
import Support

/// Where each listed reading was placed in time by its meter's clock history, and the meters' clock
/// histories, for `readings` and `meters`.
struct ReadingClocks {
    var byKey: [String: ReadingClock] = [:]

    static func key(_ meter: String, _ sequence: Int, _ time: GlucoseDateTime) -> String { "\(meter)|\(sequence)|\(time.isoString)" }

    /// The time zones of the meters with a `time-uncertain` reading, by address (`civilMeterTime`).
    var zones: [String: MeterTimeZone] = [:]

    /// The placements of the meters of `readings`.
    static func load(_ store: SQLiteStore, for readings: [StoredReading], environment: [String: String] = [:]) async throws -> ReadingClocks {
        var out = ReadingClocks()
        for meter in Set(readings.map(\.reading.meterAddress)) {
            for p in try await store.placements(meter) { out.byKey[key(meter, p.sequence, p.userFacingTime)] = p }
        }
        let uncertain = Set(readings.filter { $0.reading.exclusion == .timeUncertain }.map(\.reading.meterAddress))
        if !uncertain.isEmpty {
            for m in try await store.meters(includingUnpaired: true) where uncertain.contains(m.info.address) {
                out.zones[m.info.address] = MeterTimeZone(identifier: m.info.timeZone, environment: environment)
            }
        }
        return out
    }

    func clock(_ r: NewReading) -> ReadingClock? { byKey[Self.key(r.meterAddress, r.sequence, r.userFacingTime)] }

    /// Whether `meter_time` is shown as the meter's civil time with no offset: a `time-uncertain` reading
    /// whose time, read in the meter's zone, names two instants (the repeated autumn hour). The zone's first
    /// one, as stored, would claim one instant where two are possible (`clock.candidates` lists both).
    func civilMeterTime(_ r: NewReading) -> Bool {
        guard r.exclusion == .timeUncertain, let zone = zones[r.meterAddress] else { return false }
        if case .repeated? = zone.resolve(r.userFacingTime) { return true }
        return false
    }

    /// `{"offset": "+02:00", "offset_seconds": 7200, "since_sync": ..., "reason": ..., "summary": ...}`; for a
    /// time-uncertain reading `candidates` instead of the offset. Nil (no key) for a reading stored before the
    /// clock history or on a meter without a readable clock: its time is the zone's.
    static func json(_ c: ReadingClock) -> JSONValue {
        var o = JSONObjectBuilder()
        o.add("offset", c.offsetSeconds.map(ClockSync.formatOffset))
        o.add("offset_seconds", c.offsetSeconds)
        o.add("since_sync", c.since.map(MeterCommandSupport.isoUTC))
        o.add("reason", c.reason)
        if !c.candidates.isEmpty { o.add("candidates", c.candidates.map(MeterCommandSupport.isoUTC)) }
        o.add("summary", c.summary)
        return o.value
    }

    /// The meter's clock history as lines below the `meters` table.
    static func historyText(_ address: String, _ history: [ClockSync]) -> String {
        guard !history.isEmpty else { return "" }
        return "\(address) clock history (F = meter clock - UTC):\n" + history.map { "  \($0.summary)\n" }.joined()
    }

    static func historyJSON(_ history: [ClockSync]) -> JSONValue {
        .array(history.map { s in
            var o = JSONObjectBuilder()
            o.add("at", MeterCommandSupport.isoUTC(s.at))
            o.add("offset", ClockSync.formatOffset(s.offsetSeconds))
            o.add("offset_seconds", s.offsetSeconds)
            o.add("highest_sequence", s.highestSequence)
            o.add("set_by_gateway", s.setByGateway)
            return o.value
        })
    }
}
