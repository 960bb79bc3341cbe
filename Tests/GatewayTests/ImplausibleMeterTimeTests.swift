import GatewayCore
import GlucoseProfile
import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// A meter time before 2010 (a clock never set, or reset by a battery change: 1970-01-01, 2000-02-29) is not
/// when the reading was taken: kept as `time-unresolved`, never uploaded, unless a skew measured later
/// puts it right.
@Suite("Meter times before 2010", .timeLimit(.minutes(1)))
struct ImplausibleMeterTimeTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var time: GlucoseDateTime
        var value: SFloat = .value(mantissa: 111, exponent: -5)
        var expected: ExclusionReason?
        var testDescription: String { "\(time.isoString) \(value) -> \(expected.map { "\($0)" } ?? "uploaded")" }
    }

    static func t(_ y: Int, _ mo: Int, _ d: Int, _ h: Int = 0, _ mi: Int = 0, _ s: Int = 0) -> GlucoseDateTime {
        GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s)!
    }

    static let cases: [Case] = [
        Case(time: t(1970, 1, 1), expected: .timeUnresolved),
        Case(time: t(2000, 2, 29), expected: .timeUnresolved),
        Case(time: t(2009, 12, 31, 23, 59, 59), expected: .timeUnresolved),
        // A HI at such a time must not become a note either.
        Case(time: t(2000, 1, 1), value: .positiveInfinity, expected: .timeUnresolved),
        Case(time: t(2010, 1, 1), expected: nil),
        Case(time: t(2024, 5, 1, 8), expected: nil),
    ]

    @Test(arguments: cases)
    func aMeterTimeBefore2010IsUnresolved(_ c: Case) {
        let d = ClinicalRulesTests.measurement(base: c.time, value: c.value)
        let r = ClinicalRulesTests.interpret(d)
        #expect(r.exclusion == c.expected)
        if c.expected == .timeUnresolved {
            // The time the meter gave is kept, beside the bytes; no instant to upload with.
            #expect(r.instant == nil)
            #expect(r.meterInstant == c.time.naiveSeconds * 1000)
            #expect(r.userFacingTime == c.time)
            #expect(r.rawMeasurement == d.raw)
        } else {
            #expect(r.instant == c.time.naiveSeconds * 1000)
        }
    }

    @Test func aSkewMeasuredLaterReleasesItWithTheCorrectedTime() async throws {
        typealias F = FutureReleaseTests
        // The meter's clock was reset to 2000 by a battery change; the reading was taken at 12:00 on the
        // day of the first download, when the meter's clock showed 2000-03-01 12:00.
        let meter = FakeMeter(address: F.address, script: FakeMeterScript(records: [
            F.record(1, at: Self.t(2000, 3, 1, 12)),
            F.record(2, at: Self.t(1970, 1, 1)),
        ]))
        let store = try SQLiteStore(path: ":memory:", builders: [F.InstantBuilder()])
        try await store.saveMeter(MeterInfo(address: F.address, timeZone: "UTC"))
        let f = F.Fixture(meter: meter, store: store)
        let first = try await f.download(at: Self.t(2026, 12, 1, 13), meterClock: nil)
        #expect(first.stored == 2)
        let held = try await f.bySequence()
        #expect(held[1]?.exclusion == .timeUnresolved)
        #expect(held[2]?.exclusion == .timeUnresolved)
        #expect(try await f.outbox().isEmpty)

        // An hour later the meter's clock can be read: 2000-03-01 14:00 against 2026-12-01 14:00.
        let second = try await f.download(at: Self.t(2026, 12, 1, 14), meterClock: Self.t(2000, 3, 1, 14))
        #expect(second.stored == 0)
        let after = try await f.bySequence()
        let one = try #require(after[1])
        #expect(one.exclusion == nil)
        #expect(one.instant == F.millis(Self.t(2026, 12, 1, 12)))
        #expect(one.meterInstant == held[1]?.meterInstant)
        #expect(try await f.outbox() == ["{\"seq\":1,\"date\":\(F.millis(Self.t(2026, 12, 1, 12)))}"])
        #expect(f.sink.entries.contains { $0.contains("reading 1 released from time-unresolved") })
        // 1970 corrected by the same skew is still before 2010: it stays held, untouched.
        #expect(after[2] == held[2])
    }
}
