import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// A reading held as `time-in-future` because the meter's clock was fast and could not be read (or its
/// correction was off) is released by a later download whose measured skew explains it.
@Suite("Readings released from time-in-future", .timeLimit(.minutes(1)))
struct FutureReleaseTests {
    static let address = "AA:BB:CC:DD:EE:03"

    /// A destination that freezes the reading's sequence and instant, and skips excluded readings.
    struct InstantBuilder: OutboxBodyBuilder {
        var destination = DestinationName(rawValue: "test")
        func element(for reading: NewReading, meter: MeterInfo) -> OutboxElement? {
            guard reading.exclusion == nil, let instant = reading.instant else { return nil }
            return OutboxElement(key: "\(reading.meterAddress)-\(reading.sequence)", body: Array("{\"seq\":\(reading.sequence),\"date\":\(instant)}".utf8))
        }
    }

    static func time(_ day: Int, _ hour: Int, _ minute: Int, year: Int = 2026, month: Int = 12) -> GlucoseDateTime {
        guard let t = GlucoseDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: 0) else {
            preconditionFailure("not a time")
        }
        return t
    }

    static func millis(_ t: GlucoseDateTime) -> UnixMillis { t.naiveSeconds * 1000 }

    static func record(_ seq: UInt16, at time: GlucoseDateTime, concentration: SFloat = .value(mantissa: 120, exponent: -5),
                       status: SensorStatus? = nil) -> FakeRecord {
        FakeRecord(measurement: GlucoseMeasurement(
            sequenceNumber: seq, baseTime: time, timeOffset: 0, concentration: concentration, unit: .kilogramPerLitre,
            type: 1, sampleLocation: 1, sensorStatus: status
        ))
    }

    struct Fixture {
        let meter: FakeMeter
        let store: SQLiteStore
        let sink = MemoryLogSink()

        /// One download at gateway wall time `now`, the meter's clock showing `meterClock` (nil: no clock).
        func download(at now: GlucoseDateTime, meterClock: GlucoseDateTime?, correction: Bool = true) async throws -> DownloadReport {
            meter.update { script in
                if let meterClock {
                    script.characteristics.insert(.currentTime)
                    script.clockValue = FakeMeterScript.currentTime(meterClock)
                } else {
                    script.characteristics.remove(.currentTime)
                    script.clockValue = nil
                }
            }
            var options = DownloadOptions()
            options.clinical = ClinicalSettings(clockSkewCorrection: correction)
            let at = FutureReleaseTests.millis(now)
            return try await MeterDownload(store: store, options: options, logger: Logger(label: "test", minimumLevel: .debug, sink: sink), now: { at })
                .run(link: meter.connect(), meter: MeterInfo(address: meter.address, timeZone: "UTC"))
        }

        func bySequence() async throws -> [Int: NewReading] {
            var out: [Int: NewReading] = [:]
            for r in try await store.readings(ReadingFilter(meterAddress: meter.address)) { out[r.reading.sequence] = r.reading }
            return out
        }

        func outbox() async throws -> [String] {
            try await store.outboxItems(DestinationName(rawValue: "test")).map { String(decoding: $0.body, as: UTF8.self) }
        }

        func releases() async throws -> [Int?] {
            try await store.recentEvents(limit: 100, kind: .readingReleased).map(\.code)
        }
    }

    /// The meter's clock is an hour fast. The first download, at 13:00, cannot read it.
    static func heldFixture() async throws -> Fixture {
        let meter = FakeMeter(address: address, script: FakeMeterScript(records: [
            record(1, at: time(1, 13, 55)),                                  // really 12:55
            record(2, at: time(1, 12, 0)),                                   // really 11:00: in the past anyway
            record(3, at: time(1, 0, 0, year: 2037, month: 1)),              // a bogus record no skew explains
            record(4, at: time(1, 13, 58), concentration: .positiveInfinity, status: [.resultTooHigh]),   // a HI, really 12:58
        ]))
        let store = try SQLiteStore(path: ":memory:", builders: [InstantBuilder()])
        try await store.saveMeter(MeterInfo(address: address, timeZone: "UTC"))
        let f = Fixture(meter: meter, store: store)
        let first = try await f.download(at: time(1, 13, 0), meterClock: nil)
        #expect(first.stored == 4)
        let held = try await f.bySequence()
        #expect(held[1]?.exclusion == .timeInFuture)
        #expect(held[2]?.exclusion == nil)
        #expect(held[3]?.exclusion == .timeInFuture)
        #expect(held[4]?.exclusion == .timeInFuture)
        #expect(try await f.outbox() == ["{\"seq\":2,\"date\":\(millis(time(1, 12, 0)))}"])
        return f
    }

    @Test func aLaterSkewThatExplainsItReleasesItOnce() async throws {
        let f = try await Self.heldFixture()
        let before = try await f.bySequence()

        // 13:30, the meter's clock readable and showing 14:30: an hour fast.
        let second = try await f.download(at: Self.time(1, 13, 30), meterClock: Self.time(1, 14, 30))
        #expect(second.skew?.seconds == 3600)
        #expect(second.stored == 0)
        let after = try await f.bySequence()
        // Seq 1: meter instant 13:55 minus an hour is 12:55, five minutes before it arrived at 13:00.
        let one = try #require(after[1])
        #expect(one.exclusion == nil)
        #expect(one.instant == Self.millis(Self.time(1, 12, 55)))
        #expect(one.meterInstant == Self.millis(Self.time(1, 13, 55)))
        #expect(one.userFacingTime == Self.time(1, 13, 55))
        #expect(one.receivedAt == Self.millis(Self.time(1, 13, 0)))
        #expect(one.rawMeasurement == before[1]?.rawMeasurement)
        #expect(one.mgdl == 120)
        // Seq 4 is no longer in the future but still a HI: it keeps that exclusion and gets no upload.
        #expect(after[4]?.exclusion == .high)
        #expect(after[4]?.instant == Self.millis(Self.time(1, 12, 58)))
        // The 2037 record is still far ahead and stays held, untouched.
        #expect(after[3] == before[3])
        #expect(after[2] == before[2])
        #expect(try await f.outbox() == [
            "{\"seq\":2,\"date\":\(Self.millis(Self.time(1, 12, 0)))}",
            "{\"seq\":1,\"date\":\(Self.millis(Self.time(1, 12, 55)))}",
        ])
        #expect(try await f.releases().sorted { ($0 ?? 0) < ($1 ?? 0) } == [1, 4])
        #expect(f.sink.entries.contains { $0.contains("reading 1 released from time-in-future") })

        // The next download measures the same skew: nothing more is released or queued.
        _ = try await f.download(at: Self.time(1, 14, 0), meterClock: Self.time(1, 15, 0))
        #expect(try await f.bySequence() == after)
        #expect(try await f.outbox().count == 2)
        #expect(try await f.releases().count == 2)
    }

    @Test func aSkewThatDoesNotExplainItReleasesNothing() async throws {
        let f = try await Self.heldFixture()
        let before = try await f.bySequence()
        // Five minutes fast is corrected, but 13:55 - 5 min is still 50 minutes after 13:00.
        let small = try await f.download(at: Self.time(1, 13, 30), meterClock: Self.time(1, 13, 35))
        #expect(small.skew?.seconds == 300)
        // An hour fast with the correction off changes nothing either.
        _ = try await f.download(at: Self.time(1, 13, 40), meterClock: Self.time(1, 14, 40), correction: false)
        // Within the threshold: no correction applies.
        _ = try await f.download(at: Self.time(1, 13, 50), meterClock: Self.time(1, 13, 51))
        #expect(try await f.bySequence() == before)
        #expect(try await f.outbox().count == 1)
        #expect(try await f.releases().isEmpty)
    }

    @Test func aReadingWithAnotherExclusionIsNeverTouched() async throws {
        let f = try await Self.heldFixture()
        // A future reading stored with another reason (as by an older gateway) is not re-evaluated.
        var other = try #require(try await f.bySequence()[1])
        other.sequence = 9
        other.exclusion = .sensorFault
        try await f.store.insert([other])
        _ = try await f.download(at: Self.time(1, 13, 30), meterClock: Self.time(1, 14, 30))
        let after = try await f.bySequence()
        #expect(after[9] == other)
        #expect(after[1]?.exclusion == nil)
    }
}
