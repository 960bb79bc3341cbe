import GatewayCore
import GlucoseProfile
import Testing
@testable import Gateway
@testable import Meters

/// Readings dated after the gateway's clock at download: a fast meter clock, or a bogus far-future record.
@Suite("Readings in the future")
struct FutureReadingTests {
    static let address = "AA:BB:CC:DD:EE:02"

    /// A 0x2A18 value encoded by the codec, base time `time` in the meter's zone (UTC here), offset 0.
    static func record(_ time: GlucoseDateTime, seq: UInt16 = 1) -> DecodedMeasurement? {
        let m = GlucoseMeasurement(sequenceNumber: seq, baseTime: time, timeOffset: 0, concentration: .value(mantissa: 120, exponent: -5),
                                   unit: .kilogramPerLitre, type: 1, sampleLocation: 1, sensorStatus: nil)
        return DecodedMeasurement(m.encoded())
    }

    static func millis(_ t: GlucoseDateTime) -> UnixMillis { t.naiveSeconds * 1000 }

    /// The gateway's wall clock at download, set by hand.
    static let wallTime = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 0, second: 0)!

    static func interpret(_ time: GlucoseDateTime, settings: ClinicalSettings = ClinicalSettings(), skew: ClockSkew? = nil,
                          receivedAt: UnixMillis = millis(wallTime)) throws -> NewReading {
        let decoded = try #require(record(time))
        return ReadingInterpreter(meterAddress: address, zone: MeterTimeZone(identifier: "UTC"), settings: settings, skew: skew)
            .reading(decoded, context: nil, rawContext: nil, receivedAt: receivedAt)
    }

    @Test func theDefaultToleranceIsTenMinutes() {
        #expect(ClinicalSettings().futureToleranceSeconds == 600)
        #expect(GatewaySection().futureToleranceSeconds == 600)
    }

    @Test func aReadingUpToTheToleranceAheadIsKept() throws {
        // Exactly 600 s ahead: within the tolerance.
        let edge = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 10, second: 0)!
        let r = try Self.interpret(edge)
        #expect(r.instant == Self.millis(edge))
        #expect(r.exclusion == nil)
        #expect(r.mgdl == 120)
    }

    @Test func aReadingBeyondTheToleranceIsTimeInFuture() throws {
        let ahead = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 10, second: 1)!
        let r = try Self.interpret(ahead)
        #expect(r.exclusion == .timeInFuture)
        #expect(r.exclusion?.rawValue == "time-in-future")
        // Kept whole: the number, the meter's time and the bytes.
        #expect(r.mgdl == 120)
        #expect(r.instant == Self.millis(ahead))
        #expect(r.userFacingTime == ahead)
    }

    @Test func aBogusYear2037RecordIsTimeInFuture() throws {
        let bogus = GlucoseDateTime(year: 2037, month: 1, day: 1, hour: 0, minute: 0, second: 0)!
        #expect(try Self.interpret(bogus).exclusion == .timeInFuture)
    }

    @Test func theToleranceIsASetting() throws {
        let ahead = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 1, second: 0)!
        #expect(try Self.interpret(ahead).exclusion == nil)
        #expect(try Self.interpret(ahead, settings: ClinicalSettings(futureToleranceSeconds: 30)).exclusion == .timeInFuture)
        let later = GlucoseDateTime(year: 2026, month: 12, day: 2, hour: 13, minute: 0, second: 0)!
        #expect(try Self.interpret(later, settings: ClinicalSettings(futureToleranceSeconds: 86_400)).exclusion == nil)
    }

    @Test func theWallTimeAtDownloadDecides() throws {
        // The same record: in the future when it arrives early, in the past when it arrives an hour later.
        let time = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 30, second: 0)!
        #expect(try Self.interpret(time).exclusion == .timeInFuture)
        #expect(try Self.interpret(time, receivedAt: Self.millis(time) + 3_600_000).exclusion == nil)
    }

    @Test func aMeasuredFastClockIsCorrectedFirst() throws {
        // The meter's clock is 20 minutes fast and readable: the corrected instant is now, not the future.
        let fast = GlucoseDateTime(year: 2026, month: 12, day: 1, hour: 13, minute: 20, second: 0)!
        let skew = ClockSkew(meterClock: fast, seconds: 1200)
        let corrected = try Self.interpret(fast, skew: skew)
        #expect(corrected.exclusion == nil)
        #expect(corrected.instant == Self.millis(Self.wallTime))
        // With correction off the same record is held back.
        let uncorrected = try Self.interpret(fast, settings: ClinicalSettings(clockSkewCorrection: false), skew: skew)
        #expect(uncorrected.exclusion == .timeInFuture)
    }

    @Test func aFutureHIIsTimeInFutureWithItsValueKept() throws {
        let m = GlucoseMeasurement(sequenceNumber: 3, baseTime: GlucoseDateTime(year: 2037, month: 1, day: 1, hour: 0, minute: 0, second: 0)!,
                                   timeOffset: 0, concentration: .positiveInfinity, unit: .kilogramPerLitre, type: 1, sampleLocation: 1,
                                   sensorStatus: [.resultTooHigh])
        let decoded = try #require(DecodedMeasurement(m.encoded()))
        let r = ReadingInterpreter(meterAddress: Self.address, zone: MeterTimeZone(identifier: "UTC"))
            .reading(decoded, context: nil, rawContext: nil, receivedAt: Self.millis(Self.wallTime))
        // Fora meters add a HI dated 2037 when their memory is full: it must never reach anyone as a HI.
        #expect(r.exclusion == .timeInFuture)
        #expect(r.special == .positiveInfinity)
    }

    @Test func theConfigKeyIsReadAndChecked() {
        let (config, problems) = ConfigLoader.evaluate(bytes: Array("[gateway]\nfuture_tolerance_s = 120\n".utf8), path: "/nonexistent-dir/gw.toml")
        #expect(problems.isEmpty)
        #expect(config.gateway.futureToleranceSeconds == 120)
        #expect(config.summaryLines().contains("future_tolerance_s: 120"))
        let (_, bad) = ConfigLoader.evaluate(bytes: Array("[gateway]\nfuture_tolerance_s = -1\n".utf8), path: "/nonexistent-dir/gw.toml")
        #expect(bad.count == 1)
        #expect(bad.first?.message.contains("future_tolerance_s") == true)
    }
}
