import GatewayCore
import GlucoseProfile
import Testing
@testable import Meters

/// Records placed in time from the meter's clock history (`ClockPlacer`), each against the exact UTC
/// instant it was taken at. Europe/Berlin: 2024-03-31 01:00 UTC CET -> CEST, 2024-10-27 01:00 UTC CEST -> CET.
@Suite("Meter clock placement")
struct ClockPlacementTests {
    static let hour = 3600
    static let minute = 60

    /// UTC milliseconds of a civil UTC time.
    static func utc(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int = 0) -> UnixMillis {
        (Int64(CivilCalendar.days(year: y, month: mo, day: d)) * 86_400 + Int64(h * 3600 + mi * 60)) * 1000
    }

    /// What a clock running at F showed at the UTC instant `t`.
    static func shown(_ t: UnixMillis, _ f: Int) -> GlucoseDateTime {
        GlucoseDateTime(naiveSeconds: t / 1000 + Int64(f))
    }

    static func berlin() throws -> MeterTimeZone { try #require(MeterTimeZone(identifier: "Europe/Berlin")) }

    /// A record taken at `t` on a clock at F, numbered `sequence`.
    static func record(_ sequence: Int, at t: UnixMillis, f: Int, offsetMinutes: Int = 0) -> ClockRecord {
        ClockRecord(sequence: sequence, userFacing: shown(t, f), timeOffsetMinutes: offsetMinutes)
    }

    /// One record a day at 06:00 UTC from `first` for `days` days, on a clock whose F at each instant is `f`.
    static func daily(from first: UnixMillis, days: Int, startSequence: Int = 1, f: (UnixMillis) -> Int) -> [(ClockRecord, UnixMillis)] {
        (0..<days).map { d in
            let t = first + Int64(d) * 86_400_000
            return (record(startSequence + d, at: t, f: f(t)), t)
        }
    }

    /// Weekly syncs at 12:00 UTC from `first`, each with the highest sequence taken before it.
    static func weekly(from first: UnixMillis, weeks: Int, records: [(ClockRecord, UnixMillis)], f: (UnixMillis) -> Int) -> [ClockSync] {
        (0..<weeks).map { w in
            let at = first + Int64(w) * 7 * 86_400_000
            let highest = records.filter { $0.1 < at }.map(\.0.sequence).max()
            return ClockSync(at: at, offsetSeconds: f(at), highestSequence: highest)
        }
    }

    static func expectExact(_ placements: [ClockPlacement], _ truth: [UnixMillis], sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(placements.count == truth.count, sourceLocation: sourceLocation)
        for (p, t) in zip(placements, truth) {
            #expect(p.instant == t, "\(p) expected \(CivilCalendar.isoUTC(millis: t))", sourceLocation: sourceLocation)
        }
    }

    // MARK: - The cases

    @Test("a DST-unaware meter (UTC+2 all year) synced weekly across the autumn switch: every reading exact")
    func unawareWeekly() throws {
        let records = Self.daily(from: Self.utc(2024, 10, 6, 6), days: 42) { _ in 2 * Self.hour }
        let syncs = Self.weekly(from: Self.utc(2024, 10, 6, 12), weeks: 7, records: records) { _ in 2 * Self.hour }
        for dst in [DSTBehaviour.unknown, .ignores] {
            let placed = ClockPlacer(zone: try Self.berlin(), dst: dst).place(records.map(\.0), syncs: syncs)
            Self.expectExact(placed, records.map(\.1))
        }
        // 2024-10-26 06:00 UTC showed 08:00 and 2024-10-28 06:00 UTC showed 08:00: the zone rules alone
        // would have put the second an hour late.
        let placed = ClockPlacer(zone: try Self.berlin()).place(records.map(\.0), syncs: syncs)
        #expect(placed[22].instant == Self.utc(2024, 10, 28, 6))
        #expect(placed[22] == .placed(instant: Self.utc(2024, 10, 28, 6), offsetSeconds: 7200, since: Self.utc(2024, 10, 27, 12), reason: .sameClock))
    }

    @Test("the same meter synced once six weeks after the switch: exact when known DST-unaware, the pre-switch readings uncertain otherwise")
    func unawareOneBacklog() throws {
        let records = Self.daily(from: Self.utc(2024, 10, 6, 6), days: 42) { _ in 2 * Self.hour }
        let sync = ClockSync(at: Self.utc(2024, 12, 8, 12), offsetSeconds: 2 * Self.hour, highestSequence: 42)
        let known = ClockPlacer(zone: try Self.berlin(), dst: .ignores).place(records.map(\.0), syncs: [sync])
        Self.expectExact(known, records.map(\.1))
        let unknown = ClockPlacer(zone: try Self.berlin(), dst: .unknown).place(records.map(\.0), syncs: [sync])
        for (p, (_, t)) in zip(unknown, records) {
            if t < Self.utc(2024, 10, 27, 1) {
                // Both what it was (the clock never moved) and what a clock following DST would mean.
                #expect(p == .uncertain(candidates: [t - 3_600_000, t]))
            } else {
                #expect(p.instant == t)
            }
        }
        #expect(unknown.filter { $0.instant == nil }.count == 21)
    }

    @Test("a meter that follows DST, synced weekly across both switches: every reading exact")
    func followingWeekly() throws {
        let zone = try Self.berlin()
        let local: (UnixMillis) -> Int = { zone.offsetSeconds(at: $0 / 1000) }
        for (start, syncStart) in [(Self.utc(2024, 3, 10, 6), Self.utc(2024, 3, 10, 12)), (Self.utc(2024, 10, 6, 6), Self.utc(2024, 10, 6, 12))] {
            var records = Self.daily(from: start, days: 42, f: local)
            if start == Self.utc(2024, 10, 6, 6) {
                // Both passes of the repeated hour: 02:40 CEST (00:40 UTC) and 02:20 CET (01:20 UTC).
                records.append((Self.record(100, at: Self.utc(2024, 10, 27, 0, 40), f: 2 * Self.hour), Self.utc(2024, 10, 27, 0, 40)))
                records.append((Self.record(101, at: Self.utc(2024, 10, 27, 1, 20), f: Self.hour), Self.utc(2024, 10, 27, 1, 20)))
                // Numbered in the order they were taken.
                records.sort { $0.1 < $1.1 }
                records = records.enumerated().map { i, r in
                    var rec = r.0
                    rec.sequence = i + 1
                    return (rec, r.1)
                }
            }
            let syncs = Self.weekly(from: syncStart, weeks: 7, records: records, f: local)
            let placed = ClockPlacer(zone: zone, dst: .follows).place(records.map(\.0), syncs: syncs)
            Self.expectExact(placed, records.map(\.1))
        }
    }

    @Test("the user sets the clock 40 min forward between syncs, the time offset field stepping: all six exact")
    func userForwardWithOffsetStep() throws {
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let upper = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour + 40 * Self.minute, highestSequence: 16)
        let times = [Self.utc(2024, 11, 5, 8), Self.utc(2024, 11, 6, 8), Self.utc(2024, 11, 7, 8),
                     Self.utc(2024, 11, 8, 8), Self.utc(2024, 11, 9, 8), Self.utc(2024, 11, 10, 8)]
        let records = times.enumerated().map { i, t in
            i < 3 ? Self.record(11 + i, at: t, f: Self.hour) : Self.record(11 + i, at: t, f: Self.hour + 40 * Self.minute, offsetMinutes: 40)
        }
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, upper])
        Self.expectExact(placed, times)
        #expect(placed[3] == .placed(instant: times[3], offsetSeconds: 6000, since: upper.at, reason: .recordOrder))
    }

    @Test("the user sets the clock 40 min back between syncs, the time running backwards at the change: all six exact")
    func userBackWithBackwardsStep() throws {
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let upper = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour - 40 * Self.minute, highestSequence: 16)
        // 08:00, 08:20, 08:30 UTC on the old clock; set back 40 min at 08:35; 08:45 shows 09:05 CET... 08:05 on the new.
        let times = [Self.utc(2024, 11, 7, 8), Self.utc(2024, 11, 7, 8, 20), Self.utc(2024, 11, 7, 8, 30),
                     Self.utc(2024, 11, 7, 8, 45), Self.utc(2024, 11, 8, 9), Self.utc(2024, 11, 9, 9, 30)]
        let records = times.enumerated().map { i, t in
            Self.record(11 + i, at: t, f: i < 3 ? Self.hour : Self.hour - 40 * Self.minute)
        }
        #expect(records[3].userFacing.naiveSeconds < records[2].userFacing.naiveSeconds)
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, upper])
        Self.expectExact(placed, times)
    }

    @Test("the user sets the clock 40 min forward with nothing in the records showing where: uncertain, none placed off")
    func userForwardNoStep() throws {
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let upper = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour + 40 * Self.minute, highestSequence: 16)
        let times = [Self.utc(2024, 11, 5, 8), Self.utc(2024, 11, 6, 8), Self.utc(2024, 11, 7, 8),
                     Self.utc(2024, 11, 8, 8), Self.utc(2024, 11, 9, 8), Self.utc(2024, 11, 10, 8)]
        let records = times.enumerated().map { i, t in Self.record(11 + i, at: t, f: i < 3 ? Self.hour : Self.hour + 40 * Self.minute) }
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, upper])
        for (p, t) in zip(placed, times) {
            if let instant = p.instant { #expect(instant == t) }
            if case .uncertain(let candidates) = p { #expect(candidates.contains(t) && candidates.count == 2) }
        }
        #expect(placed.allSatisfy { $0.instant == nil })
    }

    @Test("the gateway sets the clock: readings before the write keep the old F, those after get the written one")
    func gatewaySetClock() throws {
        let fast = 2 * Self.hour + 10 * Self.minute
        let before = (1...5).map { Self.utc(2024, 9, $0, 7) }
        let after = (6...10).map { Self.utc(2024, 9, $0, 7) }
        let records = before.enumerated().map { Self.record($0 + 1, at: $1, f: fast) }
            + after.enumerated().map { Self.record($0 + 6, at: $1, f: 2 * Self.hour) }
        let syncs = [ClockSync(at: Self.utc(2024, 9, 5, 12), offsetSeconds: fast, highestSequence: 5),
                     ClockSync(at: Self.utc(2024, 9, 5, 12) + 2000, offsetSeconds: 2 * Self.hour, highestSequence: 5, setByGateway: true),
                     ClockSync(at: Self.utc(2024, 9, 12, 12), offsetSeconds: 2 * Self.hour, highestSequence: 10)]
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: syncs)
        Self.expectExact(placed, before + after)
        #expect(placed[5] == .placed(instant: after[0], offsetSeconds: 7200, since: syncs[1].at, reason: .setByGateway))
    }

    @Test("a clock reset to 2000-01-01 by a battery change: before it exact, after it placed by the new F")
    func batteryReset() throws {
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let reset = Self.utc(2024, 11, 6, 10)
        let resetF = Int((Self.utc(2000, 1, 1, 0) - reset) / 1000)
        let upper = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: resetF, highestSequence: 14)
        let times = [Self.utc(2024, 11, 5, 8), Self.utc(2024, 11, 6, 8), Self.utc(2024, 11, 7, 8), Self.utc(2024, 11, 8, 8)]
        let records = times.enumerated().map { i, t in Self.record(11 + i, at: t, f: i < 2 ? Self.hour : resetF) }
        #expect(records[2].userFacing == GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 22, minute: 0, second: 0))
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, upper])
        Self.expectExact(placed, times)
    }

    // MARK: - Edges

    @Test("no measurement: every record left to the zone rules")
    func noSync() throws {
        let placed = ClockPlacer(zone: try Self.berlin()).place([Self.record(1, at: Self.utc(2024, 1, 1, 0), f: 0)], syncs: [])
        #expect(placed == [.unplaced])
    }

    @Test("F within the 2 min drift allowance is the same clock; beyond it a change")
    func drift() throws {
        let t = Self.utc(2024, 11, 6, 8)
        let records = [Self.record(11, at: t, f: Self.hour)]
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let within = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour + 120, highestSequence: 11)
        // Placed with the later measurement's F: a drifting clock is nearer it for the newer records.
        #expect(ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, within])[0].instant == t - 120_000)
        let beyond = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour + 121, highestSequence: 11)
        #expect(ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, beyond])[0].instant == nil)
    }

    @Test("records no single change explains are all uncertain")
    func contradictory() throws {
        let lower = ClockSync(at: Self.utc(2024, 11, 4, 12), offsetSeconds: Self.hour, highestSequence: 10)
        let upper = ClockSync(at: Self.utc(2024, 11, 11, 12), offsetSeconds: Self.hour + 600, highestSequence: 13)
        // Runs back by a day: no 10 min change explains it.
        let records = [Self.record(11, at: Self.utc(2024, 11, 7, 8), f: Self.hour), Self.record(12, at: Self.utc(2024, 11, 6, 8), f: Self.hour),
                       Self.record(13, at: Self.utc(2024, 11, 8, 8), f: Self.hour)]
        let placed = ClockPlacer(zone: try Self.berlin()).place(records, syncs: [lower, upper])
        #expect(placed.allSatisfy { if case .uncertain(let c) = $0 { c.count == 2 } else { false } })
    }

    @Test("an F no clock can have and an invalid record time neither crash nor place")
    func hostileNumbers() throws {
        let bad = ClockRecord(sequence: 1, userFacing: GlucoseDateTime(naiveSeconds: Int64.max / 2))
        let syncs = [ClockSync(at: 0, offsetSeconds: Int.max, highestSequence: nil)]
        let placed = ClockPlacer(zone: try Self.berlin()).place([Self.record(1, at: Self.utc(2024, 1, 1, 0), f: 0), bad], syncs: syncs)
        #expect(placed == [.unplaced, .unplaced])
        let pair = [ClockSync(at: 0, offsetSeconds: Int.min, highestSequence: 0), ClockSync(at: 1, offsetSeconds: Int.max, highestSequence: 5)]
        #expect(ClockPlacer(zone: try Self.berlin()).place([Self.record(1, at: 0, f: 0)], syncs: pair) == [.unplaced])
    }

    @Test("F is the meter's civil clock minus UTC; the summary names F, the sync and why")
    func offsetAndSummary() throws {
        let f = ClockSync.offset(clock: Self.shown(Self.utc(2024, 10, 20, 9), 7200), now: Self.utc(2024, 10, 20, 9) + 400)
        #expect(f == 7200)
        #expect(ClockSync.offset(clock: GlucoseDateTime(naiveSeconds: 0), now: Int64.min) == nil)
        let p = ClockPlacement.placed(instant: 0, offsetSeconds: 7200, since: Self.utc(2024, 10, 20, 9), reason: .sameClock)
        let stored = try #require(p.stored(sequence: 1, userFacingTime: Self.shown(0, 0)))
        #expect(stored.summary == "clock: +02:00 since sync 2024-10-20 (same clock)")
        #expect(ClockSync.formatOffset(-2430) == "-00:40:30")
        let uncertain = try #require(ClockPlacement.uncertain(candidates: [0, 3_600_000]).stored(sequence: 1, userFacingTime: Self.shown(0, 0)))
        #expect(uncertain.summary == "clock uncertain: 1970-01-01T00:00:00Z or 1970-01-01T01:00:00Z (clock changed between syncs)")
    }
}

/// A meter without a readable clock in the repeated autumn hour (Europe/Berlin, 2024-10-27: 02:00-03:00
/// shown twice, 00:00-01:00 UTC then 01:00-02:00 UTC).
@Suite("Repeated hour without a clock")
struct RepeatedHourPlacementTests {
    typealias P = ClockPlacementTests
    static func shown(_ h: Int, _ mi: Int) -> GlucoseDateTime {
        GlucoseDateTime(year: 2024, month: 10, day: 27, hour: h, minute: mi, second: 0)!
    }
    static func record(_ sequence: Int, _ h: Int, _ mi: Int, receivedAt: UnixMillis = P.utc(2024, 10, 27, 12)) -> RepeatedHourPlacer.Record {
        RepeatedHourPlacer.Record(sequence: sequence, userFacing: shown(h, mi), receivedAt: receivedAt)
    }

    @Test func aLoneRecordInTheRepeatedHourIsUncertainWithBothInstants() throws {
        let placed = RepeatedHourPlacer.place([Self.record(1, 1, 30), Self.record(2, 2, 30), Self.record(3, 3, 30)], zone: try P.berlin())
        #expect(placed == [nil, .uncertain(candidates: [P.utc(2024, 10, 27, 0, 30), P.utc(2024, 10, 27, 1, 30)]), nil])
    }

    @Test func receivedBeforeTheSecondPassItIsTheFirst() throws {
        let placed = RepeatedHourPlacer.place([Self.record(1, 2, 30, receivedAt: P.utc(2024, 10, 27, 1, 10))], zone: try P.berlin())
        #expect(placed == [nil])
    }

    @Test func wallTimeRunningBackSettlesBoth() throws {
        // 02:50 then 02:20: the clock fell back between them. 02:50 is the first pass (00:50 UTC) because the
        // next record is at most 01:20 UTC; 02:20 the second (01:20 UTC).
        let placed = RepeatedHourPlacer.place([Self.record(1, 2, 50), Self.record(2, 2, 20)], zone: try P.berlin())
        #expect(placed[0] == nil)
        #expect(placed[1]?.instant == P.utc(2024, 10, 27, 1, 20))
    }
}
