import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// Downloads of a fake meter in Europe/Berlin into a real SQLite store, sync after sync: every reading's
/// stored instant and upload body against the exact UTC instant it was taken at, from the meter's clock
/// history (`ClockPlacer`). 2024-10-27 01:00 UTC: CEST -> CET.
@Suite("Clock history across downloads", .timeLimit(.minutes(1)))
struct ClockHistoryDownloadTests {
    typealias P = ClockPlacementTests
    static let address = "AA:BB:CC:DD:EE:34"
    static let hour = 3600

    final class Scenario: @unchecked Sendable {
        let meter: FakeMeter
        let store: SQLiteStore
        /// The true UTC instant of each record, by sequence.
        var truth: [Int: UnixMillis] = [:]
        var nextSequence = 0

        init() async throws {
            var script = FakeMeterScript(records: [])
            script.characteristics.insert(.currentTime)
            script.writableClocks = [.currentTime]
            meter = FakeMeter(address: ClockHistoryDownloadTests.address, script: script)
            store = try SQLiteStore(path: ":memory:", builders: [FutureReleaseTests.InstantBuilder()])
            try await store.saveMeter(MeterInfo(address: ClockHistoryDownloadTests.address, timeZone: "Europe/Berlin"))
        }

        /// The meter takes a reading at UTC `t` on a clock at F `f`, the time offset field at `offsetMinutes`.
        func take(at t: UnixMillis, f: Int, offsetMinutes: Int = 0) {
            let sequence = nextSequence
            nextSequence += 1
            truth[sequence] = t
            let base = GlucoseDateTime(naiveSeconds: t / 1000 + Int64(f) - Int64(offsetMinutes * 60))
            let record = FakeRecord(measurement: GlucoseMeasurement(
                sequenceNumber: UInt16(sequence), baseTime: base, timeOffset: Int16(offsetMinutes),
                concentration: .value(mantissa: 120, exponent: -5), unit: .kilogramPerLitre, type: 1, sampleLocation: 1))
            meter.update { $0.records.append(record) }
        }

        /// One download at UTC `now`, the meter's clock at F `f`.
        @discardableResult
        func sync(at now: UnixMillis, f: Int, setClock: Bool = false, batch: Int = 1000) async throws -> DownloadReport {
            meter.update { $0.clockValue = FakeMeterScript.currentTime(P.shown(now, f)) }
            var options = DownloadOptions(commitBatchSize: batch, setMeterClock: setClock)
            options.clinical = ClinicalSettings()
            return try await MeterDownload(store: store, options: options, logger: .silent, now: { now })
                .run(link: meter.connect(), meter: MeterInfo(address: meter.address, timeZone: "Europe/Berlin"))
        }

        func readings() async throws -> [Int: NewReading] {
            var out: [Int: NewReading] = [:]
            for r in try await store.readings(ReadingFilter(meterAddress: meter.address)) { out[r.reading.sequence] = r.reading }
            return out
        }

        /// Upload bodies by sequence: `{"seq":N,"date":MILLIS}`.
        func uploads() async throws -> [String] {
            try await store.outboxItems(DestinationName(rawValue: "test")).map { String(decoding: $0.body, as: UTF8.self) }
        }

        /// Every reading stored at its true instant, nothing excluded, each uploaded once at it.
        func expectAllExact(sourceLocation: SourceLocation = #_sourceLocation) async throws {
            let stored = try await readings()
            #expect(stored.count == truth.count, sourceLocation: sourceLocation)
            for (sequence, t) in truth.sorted(by: { $0.key < $1.key }) {
                let r = stored[sequence]
                #expect(r?.instant == t, "record \(sequence): \(r?.instant.map { CivilCalendar.isoUTC(millis: $0) } ?? "none") expected \(CivilCalendar.isoUTC(millis: t))",
                        sourceLocation: sourceLocation)
                #expect(r?.exclusion == nil, sourceLocation: sourceLocation)
            }
            #expect(Set(try await uploads()) == Set(truth.map { "{\"seq\":\($0.key),\"date\":\($0.value)}" }), sourceLocation: sourceLocation)
        }
    }

    @Test("a DST-unaware meter (UTC+2 all year) synced weekly across the autumn switch: every reading exact")
    func unawareWeekly() async throws {
        let s = try await Scenario()
        // Synced on Wednesdays at 12:00 UTC (the week of the switch, 2024-10-24 to 10-30, straddles it), and
        // once more at the end.
        for day in 0..<42 {
            s.take(at: P.utc(2024, 10, 6, 6) + Int64(day) * 86_400_000, f: 2 * Self.hour)
            if day % 7 == 3 || day == 41 { try await s.sync(at: P.utc(2024, 10, 6, 12) + Int64(day) * 86_400_000, f: 2 * Self.hour) }
        }
        try await s.expectAllExact()
        // The zone rules alone would have put 2024-10-28 06:00 UTC (shown 08:00) at 07:00 UTC.
        #expect(try await s.readings()[22]?.instant == P.utc(2024, 10, 28, 6))
        let history = try await s.store.clockHistory(Self.address)
        #expect(history.count == 7 && history.allSatisfy { $0.offsetSeconds == 7200 })
        let placements = try await s.store.placements(Self.address)
        #expect(placements.count == 42)
        #expect(placements.first { $0.sequence == 22 }?.summary == "clock: +02:00 since sync 2024-10-23 (same clock)")
    }

    @Test("a clock that shows whole seconds, read 0.7 s into a second: F is the clock's, the readings after the switch exact")
    func clockReadWithinASecond() async throws {
        let s = try await Scenario()
        // As on the real stack: the meter's clock is exactly UTC+2, and the gateway's clock is 0.7 s past
        // the second the meter shows when the answer comes.
        for day in 0..<42 {
            s.take(at: P.utc(2024, 10, 6, 6) + Int64(day) * 86_400_000, f: 2 * Self.hour)
            if day % 7 == 3 || day == 41 { try await s.sync(at: P.utc(2024, 10, 6, 12) + Int64(day) * 86_400_000 + 700, f: 2 * Self.hour) }
        }
        try await s.expectAllExact()
        #expect(try await s.store.clockHistory(Self.address).map(\.offsetSeconds) == Array(repeating: 7200, count: 7))
        // The middle of the read counts: shown 12:00:00 (F 0 at the instant it ticked), asked at 0.2 s and
        // answered at 1.0 s: the meter read it within 12:00:00.0-1.0, the middle 0.6 s: F rounds to 0.
        let noon = P.utc(2024, 10, 6, 12)
        let shown = GlucoseDateTime(naiveSeconds: noon / 1000)
        #expect(ClockSync.offset(read: shown, asked: noon + 200, answered: noon + 1000) == 0)
        #expect(ClockSync.offset(read: shown, asked: noon, answered: noon) == 0)
        #expect(ClockSync.offset(read: shown, asked: noon + 999, answered: noon + 999) == 0)
        #expect(ClockSync.offset(read: shown, asked: noon + 1600, answered: noon + 1600) == -1)
        #expect(ClockSync.offset(read: shown, asked: noon - 600, answered: noon - 600) == 1)
        #expect(ClockSync.offset(read: shown, asked: .min, answered: .min) == nil)
        #expect(ClockSync.offset(read: shown, asked: .min, answered: .max) != nil)
    }

    @Test("the skew a sync reports is measured as F is: a clock exactly right, read 0.7 s into a second, is off by 0 s")
    func skewAgreesWithF() async throws {
        let s = try await Scenario()
        s.take(at: P.utc(2024, 9, 1, 6), f: 2 * Self.hour)
        // Europe/Berlin in September is UTC+2, so a clock at F +02:00 shows the zone's time exactly.
        let report = try await s.sync(at: P.utc(2024, 9, 1, 12) + 700, f: 2 * Self.hour)
        #expect(report.skew?.seconds == 0)
        #expect(try await s.store.clockHistory(Self.address).map(\.offsetSeconds) == [7200])
    }

    @Test("the same meter synced once six weeks after the switch: the pre-switch readings time-uncertain, never uploaded an hour off",
          arguments: [1000, 1])
    func unawareOneBacklog(batch: Int) async throws {
        let s = try await Scenario()
        for day in 0..<42 { s.take(at: P.utc(2024, 10, 6, 6) + Int64(day) * 86_400_000, f: 2 * Self.hour) }
        // In one commit, and one record per commit: the uncertain ones then wait for the download's end.
        let report = try await s.sync(at: P.utc(2024, 12, 8, 12), f: 2 * Self.hour, batch: batch)
        #expect(report.stored == 42)
        let stored = try await s.readings()
        let uploads = Set(try await s.uploads())
        let placements = Dictionary(uniqueKeysWithValues: try await s.store.placements(Self.address).map { ($0.sequence, $0) })
        for (sequence, t) in s.truth {
            let r = try #require(stored[sequence])
            if t < P.utc(2024, 10, 27, 1) {
                #expect(r.exclusion == .timeUncertain)
                #expect(r.instant == nil)
                #expect(placements[sequence]?.candidates == [t - 3_600_000, t])
            } else {
                #expect(r.exclusion == nil)
                #expect(r.instant == t)
                #expect(uploads.contains("{\"seq\":\(sequence),\"date\":\(t)}"))
            }
        }
        #expect(uploads.count == 21)
    }

    @Test("the user sets the clock 40 min back between syncs, the time running backwards at the change: all six exact")
    func userBackWithBackwardsStep() async throws {
        let s = try await Scenario()
        s.take(at: P.utc(2024, 11, 3, 8), f: Self.hour)
        try await s.sync(at: P.utc(2024, 11, 4, 12), f: Self.hour)
        for (i, t) in [P.utc(2024, 11, 7, 8), P.utc(2024, 11, 7, 8, 20), P.utc(2024, 11, 7, 8, 30),
                       P.utc(2024, 11, 7, 8, 45), P.utc(2024, 11, 8, 9), P.utc(2024, 11, 9, 9, 30)].enumerated() {
            s.take(at: t, f: i < 3 ? Self.hour : Self.hour - 40 * 60)
        }
        try await s.sync(at: P.utc(2024, 11, 11, 12), f: Self.hour - 40 * 60)
        try await s.expectAllExact()
    }

    @Test("the user sets the clock 40 min forward, the time offset field stepping: all six exact; without the step none uploaded off")
    func userForward() async throws {
        for stepped in [true, false] {
            let s = try await Scenario()
            s.take(at: P.utc(2024, 11, 3, 8), f: Self.hour)
            try await s.sync(at: P.utc(2024, 11, 4, 12), f: Self.hour)
            let times = [P.utc(2024, 11, 5, 8), P.utc(2024, 11, 6, 8), P.utc(2024, 11, 7, 8),
                         P.utc(2024, 11, 8, 8), P.utc(2024, 11, 9, 8), P.utc(2024, 11, 10, 8)]
            for (i, t) in times.enumerated() {
                s.take(at: t, f: i < 3 ? Self.hour : Self.hour + 40 * 60, offsetMinutes: i >= 3 && stepped ? 40 : 0)
            }
            try await s.sync(at: P.utc(2024, 11, 11, 12), f: Self.hour + 40 * 60)
            if stepped {
                try await s.expectAllExact()
                continue
            }
            let stored = try await s.readings()
            for sequence in 1...6 { #expect(stored[sequence]?.exclusion == .timeUncertain && stored[sequence]?.instant == nil) }
            // Only the reading from before the first sync went up, at its right time.
            #expect(try await s.uploads() == ["{\"seq\":0,\"date\":\(P.utc(2024, 11, 3, 8))}"])
        }
    }

    @Test("set_meter_clock: the readings before the write keep their times, those after it are right too")
    func gatewaySetsTheClock() async throws {
        let s = try await Scenario()
        let fast = 2 * Self.hour + 10 * 60
        for day in 1...5 { s.take(at: P.utc(2024, 9, day, 7), f: fast) }
        let first = try await s.sync(at: P.utc(2024, 9, 5, 12), f: fast, setClock: true)
        #expect(first.clockSet?.new == P.shown(P.utc(2024, 9, 5, 12), 2 * Self.hour))
        for day in 6...10 { s.take(at: P.utc(2024, 9, day, 7), f: 2 * Self.hour) }
        try await s.sync(at: P.utc(2024, 9, 12, 12), f: 2 * Self.hour, setClock: true)
        try await s.expectAllExact()
        let history = try await s.store.clockHistory(Self.address)
        #expect(history.map(\.setByGateway) == [false, true, false])
        #expect(history.map(\.offsetSeconds) == [fast, 7200, 7200])
        let placements = try await s.store.placements(Self.address)
        #expect(placements.first { $0.sequence == 5 }?.reason == "set by the gateway")
    }

    @Test("set_meter_clock in a download the link dropped: the write is kept like `meters set-clock`, the records around it placed by its time")
    func gatewaySetsTheClockAndTheLinkDrops() async throws {
        let s = try await Scenario()
        let fast = 2 * Self.hour + 10 * 60
        for day in 1...5 { s.take(at: P.utc(2024, 9, day, 7), f: fast) }
        // Five minutes before the sync: on the old clock before the write, or on the new one ten minutes
        // later, after it; both fit, so it is never guessed.
        s.take(at: P.utc(2024, 9, 5, 11, 55), f: fast)
        s.meter.update { $0.disconnectAfterRecords = 2 }
        let writtenAt = P.utc(2024, 9, 5, 12)
        let first = try await s.sync(at: writtenAt, f: fast, setClock: true)
        #expect(first.clockSet != nil)
        #expect(!first.outcome.isComplete)
        // The clock as read and as written, neither knowing the meter's highest record (not all of it came).
        let kept = try await s.store.clockHistory(Self.address)
        #expect(kept.map(\.setByGateway) == [false, true])
        #expect(kept.map(\.offsetSeconds) == [fast, 2 * Self.hour])
        #expect(kept.map(\.at) == [writtenAt, writtenAt])
        #expect(kept.allSatisfy { $0.highestSequence == nil })
        s.meter.update { $0.disconnectAfterRecords = nil }
        for day in 6...10 { s.take(at: P.utc(2024, 9, day, 7), f: 2 * Self.hour) }
        try await s.sync(at: P.utc(2024, 9, 12, 12), f: 2 * Self.hour)
        let stored = try await s.readings()
        #expect(stored.count == 11)
        // Records 2 to 4 were taken days before the write: on either clock they lie before it, where only
        // the old clock ran. Records 6 to 10 lie after it on either clock, where only the new one ran.
        for (sequence, t) in s.truth where sequence != 5 {
            #expect(stored[sequence]?.instant == t && stored[sequence]?.exclusion == nil, "record \(sequence)")
        }
        let justBefore = try #require(s.truth[5])
        #expect(stored[5]?.exclusion == .timeUncertain && stored[5]?.instant == nil)
        let placements = Dictionary(uniqueKeysWithValues: try await s.store.placements(Self.address).map { ($0.sequence, $0) })
        #expect(placements[5]?.candidates == [justBefore, justBefore + 600_000])
        #expect(placements[3]?.offsetSeconds == fast)
        #expect(placements[6]?.reason == "set by the gateway")
        let uploads = Set(try await s.uploads())
        #expect(uploads == Set(s.truth.filter { $0.key != 5 }.map { "{\"seq\":\($0.key),\"date\":\($0.value)}" }))
    }

    @Test("a clock reset to 2000-01-01 by a battery change: the readings before it exact, those after placed by the new F")
    func batteryReset() async throws {
        let s = try await Scenario()
        s.take(at: P.utc(2024, 11, 3, 8), f: Self.hour)
        try await s.sync(at: P.utc(2024, 11, 4, 12), f: Self.hour)
        s.take(at: P.utc(2024, 11, 5, 8), f: Self.hour)
        s.take(at: P.utc(2024, 11, 6, 8), f: Self.hour)
        let resetF = Int((P.utc(2000, 1, 1, 0) - P.utc(2024, 11, 6, 10)) / 1000)
        s.take(at: P.utc(2024, 11, 7, 8), f: resetF)
        s.take(at: P.utc(2024, 11, 8, 8), f: resetF)
        try await s.sync(at: P.utc(2024, 11, 11, 12), f: resetF)
        try await s.expectAllExact()
    }
}
