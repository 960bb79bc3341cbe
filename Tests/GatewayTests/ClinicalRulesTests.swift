import GatewayCore
import GlucoseProfile
import Testing
@testable import Meters

@Suite("Clinical rules")
struct ClinicalRulesTests {
    static let address = "AA:BB:CC:DD:EE:01"
    static let base = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 0, second: 0)!
    /// The gateway's clock at download: after every reading here, so none is in the future.
    static let downloadedAt = utc(2025, 1, 1, 0, 0)

    static func measurement(
        seq: UInt16 = 1, base: GlucoseDateTime = base, offset: Int16? = 0, value: SFloat? = .value(mantissa: 111, exponent: -5),
        unit: ConcentrationUnit = .kilogramPerLitre, type: UInt8 = 2, location: UInt8 = 1, status: SensorStatus? = nil
    ) -> DecodedMeasurement {
        let m = GlucoseMeasurement(sequenceNumber: seq, baseTime: base, timeOffset: offset, concentration: value, unit: unit,
                                   type: value == nil ? nil : type, sampleLocation: value == nil ? nil : location, sensorStatus: status)
        return DecodedMeasurement(m.encoded())!
    }

    static func interpret(
        _ d: DecodedMeasurement, zone: String = "UTC", context: GlucoseMeasurementContext? = nil,
        settings: ClinicalSettings = ClinicalSettings(), skew: ClockSkew? = nil
    ) -> NewReading {
        ReadingInterpreter(meterAddress: address, zone: MeterTimeZone(identifier: zone), settings: settings, skew: skew)
            .reading(d, context: context, rawContext: context?.encoded(), receivedAt: Self.downloadedAt)
    }

    static func utc(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int) -> UnixMillis {
        GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: 0).map { $0.naiveSeconds * 1000 } ?? .min
    }

    // MARK: Time

    @Test func userFacingTimeIsBasePlusOffsetInTheMeterZone() {
        let r = Self.interpret(Self.measurement(offset: 90), zone: "Europe/Berlin")
        #expect(r.baseTime.isoString == "2024-05-01T08:00:00")
        #expect(r.timeOffsetMinutes == 90)
        #expect(r.userFacingTime.isoString == "2024-05-01T09:30:00")
        // 09:30 CEST = 07:30 UTC.
        #expect(r.meterInstant == Self.utc(2024, 5, 1, 7, 30))
        #expect(r.instant == r.meterInstant)
        #expect(r.exclusion == nil)
    }

    @Test(arguments: [
        (Int16(-420), "2024-05-01T01:00:00"),           // Contour: UTC base, PDT offset
        (Int16(339), "2024-05-01T13:39:00"),            // Accu-Chek: odd large offset
        (Int16(-600), "2024-04-30T22:00:00"),           // across midnight backwards
        (Int16(32767), "2024-05-24T02:07:00"),          // the largest offset
        (Int16(-32768), "2024-04-08T13:52:00"),         // the smallest offset
    ] as [(Int16, String)])
    func negativeAndLargeOffsets(_ offset: Int16, _ expected: String) {
        let r = Self.interpret(Self.measurement(offset: offset))
        #expect(r.userFacingTime.isoString == expected)
        #expect(r.meterInstant != nil)
    }

    @Test func dstGapAndRepeatedHourFollowTheRule() throws {
        // Base time in the Berlin spring-forward gap.
        let gap = GlucoseDateTime(year: 2024, month: 3, day: 31, hour: 2, minute: 30, second: 0)!
        let r1 = Self.interpret(Self.measurement(base: gap), zone: "Europe/Berlin")
        #expect(r1.meterInstant == Self.utc(2024, 3, 31, 1, 30))
        #expect(r1.exclusion == nil)
        // Repeated hour in New York: the first occurrence (EDT).
        let repeated = GlucoseDateTime(year: 2024, month: 11, day: 3, hour: 1, minute: 30, second: 0)!
        let r2 = Self.interpret(Self.measurement(base: repeated), zone: "America/New_York")
        #expect(r2.meterInstant == Self.utc(2024, 11, 3, 5, 30))
    }

    @Test func unknownZoneLeavesTimeUnresolved() {
        let r = Self.interpret(Self.measurement(), zone: "Nowhere/Atlantis")
        #expect(r.meterInstant == nil)
        #expect(r.instant == nil)
        #expect(r.exclusion == .timeUnresolved)
        #expect(r.userFacingTime.isoString == "2024-05-01T08:00:00")
    }

    @Test(arguments: [
        [UInt8](arrayLiteral: 0, 0, 0, 0, 0, 0, 0),       // clock never set: year/month/day 0
        [0xE8, 0x07, 13, 1, 8, 0, 0],                      // month 13 (i-SENS firmware bug)
        [0xE8, 0x07, 2, 30, 8, 0, 0],                      // February 30
    ])
    func invalidBaseTimeIsKeptUnresolved(_ time: [UInt8]) throws {
        var bytes = Self.measurement(seq: 7).raw
        bytes.replaceSubrange(3..<10, with: time)
        let decoded = try #require(DecodedMeasurement(bytes))
        #expect(!decoded.timeUsable)
        let r = Self.interpret(decoded, zone: "Europe/Berlin")
        #expect(r.sequence == 7)
        #expect(r.meterInstant == nil)
        #expect(r.exclusion == .timeUnresolved)
        #expect(r.mgdl == 111)
        #expect(r.rawMeasurement == bytes)
        #expect(r.baseTime.isoString.count == 19)
    }

    @Test func truncatedMeasurementIsNotDecoded() {
        let bytes = Self.measurement().raw
        for n in 0..<bytes.count {
            #expect(DecodedMeasurement(Array(bytes.prefix(n))) == nil, "prefix \(n)")
        }
    }

    // MARK: Clock skew

    @Test func skewAboveThresholdIsCorrectedAndBothTimesKept() throws {
        let zone = try #require(MeterTimeZone(identifier: "Europe/Berlin"))
        // Meter shows 10:05:00 CEST while the gateway says 08:00:00 UTC (10:00 CEST): 5 minutes fast.
        let clock = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 10, minute: 5, second: 0)!
        let skew = try #require(ClockSkew.measure(clockValue: FakeMeterClock.cts(clock), zone: zone, gatewayNow: Self.utc(2024, 5, 1, 8, 0)))
        #expect(skew.seconds == 300)
        let r = Self.interpret(Self.measurement(), zone: "Europe/Berlin", skew: skew)
        #expect(r.meterInstant == Self.utc(2024, 5, 1, 6, 0))
        #expect(r.instant == Self.utc(2024, 5, 1, 5, 55))
    }

    @Test func skewWithinThresholdIsLeftAlone() throws {
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        let clock = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 2, second: 0)!
        let skew = try #require(ClockSkew.measure(clockValue: FakeMeterClock.dateTime(clock), zone: zone, gatewayNow: Self.utc(2024, 5, 1, 8, 0)))
        #expect(skew.seconds == 120)
        let r = Self.interpret(Self.measurement(), skew: skew)
        #expect(r.instant == r.meterInstant)
    }

    @Test func skewCorrectionCanBeTurnedOffAndThresholdChanged() {
        let skew = ClockSkew(meterClock: GlucoseDateTime(naiveSeconds: 0), seconds: -600)
        let off = Self.interpret(Self.measurement(), settings: ClinicalSettings(clockSkewCorrection: false), skew: skew)
        #expect(off.instant == off.meterInstant)
        let strict = Self.interpret(Self.measurement(), settings: ClinicalSettings(clockSkewThresholdSeconds: 30),
                                    skew: ClockSkew(meterClock: GlucoseDateTime(naiveSeconds: 0), seconds: 45))
        #expect(strict.instant == strict.meterInstant.map { $0 - 45_000 })
        let slow = Self.interpret(Self.measurement(), skew: skew)
        #expect(slow.instant == slow.meterInstant.map { $0 + 600_000 })
    }

    @Test(arguments: [[UInt8](), [0xE8, 0x07, 5, 1], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0], [0xE8, 0x07, 5, 1, 25, 0, 0]])
    func unusableClockValuesGiveNoSkew(_ value: [UInt8]) throws {
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        #expect(ClockSkew.measure(clockValue: value, zone: zone, gatewayNow: 0) == nil)
    }

    // MARK: Exclusions

    struct ExclusionCase: CustomStringConvertible, Sendable {
        var name: String
        var value: SFloat?
        var type: UInt8 = 2
        var location: UInt8 = 1
        var status: SensorStatus?
        var expected: ExclusionReason?
        var special: String?
        var description: String { name }
    }

    static let exclusionCases: [ExclusionCase] = [
        ExclusionCase(name: "plain reading", value: .value(mantissa: 111, exponent: -5), expected: nil),
        ExclusionCase(name: "control solution type 10", value: .value(mantissa: 111, exponent: -5), type: 10, expected: .controlSolution),
        ExclusionCase(name: "control solution location 4", value: .value(mantissa: 111, exponent: -5), location: 4, expected: .controlSolution),
        ExclusionCase(name: "HI", value: .positiveInfinity, status: [.resultTooHigh], expected: .high, special: "+inf"),
        ExclusionCase(name: "LO", value: .negativeInfinity, status: [.resultTooLow], expected: .low, special: "-inf"),
        ExclusionCase(name: "NaN", value: .nan, expected: .notANumber, special: "nan"),
        ExclusionCase(name: "NRes", value: .nres, expected: .notAtThisResolution, special: "nres"),
        ExclusionCase(name: "reserved SFLOAT", value: .reserved, expected: .reservedValue, special: "reserved"),
        ExclusionCase(name: "no concentration", value: nil, expected: .noConcentration),
        ExclusionCase(name: "battery low alone", value: .value(mantissa: 111, exponent: -5), status: [.batteryLow], expected: nil),
        ExclusionCase(name: "time fault alone", value: .value(mantissa: 111, exponent: -5), status: [.timeFault], expected: nil),
        ExclusionCase(name: "battery low and time fault", value: .value(mantissa: 111, exponent: -5), status: [.batteryLow, .timeFault], expected: nil),
        ExclusionCase(name: "reserved status bits alone", value: .value(mantissa: 111, exponent: -5), status: SensorStatus(rawValue: 0xF000), expected: nil),
    ] + (1...10).map { bit in
        ExclusionCase(name: "fault bit \(bit)", value: .value(mantissa: 111, exponent: -5),
                      status: SensorStatus(rawValue: 1 << UInt16(bit)), expected: .sensorFault)
    }

    @Test(arguments: exclusionCases)
    func exclusions(_ c: ExclusionCase) {
        let r = Self.interpret(Self.measurement(value: c.value, type: c.type, location: c.location, status: c.status))
        #expect(r.exclusion == c.expected)
        #expect(r.special?.rawValue == c.special)
        #expect(r.analyte == .glucose)
        if c.expected == nil { #expect(r.mgdl == 111) }
        if c.special != nil { #expect(r.mgdl == nil && r.mmoll == nil) }
        #expect(r.sensorStatus == c.status.map { Int($0.rawValue) })
    }

    @Test func molPerLitreIsConverted() throws {
        // 55 x 10^-4 mol/L = 5.5 mmol/L.
        let r = Self.interpret(Self.measurement(value: .value(mantissa: 55, exponent: -4), unit: .molePerLitre))
        #expect(r.unit.rawValue == "mol/L")
        let mmol = try #require(r.mmoll)
        #expect(abs(mmol - 5.5) < 1e-9)
        let mg = try #require(r.mgdl)
        #expect(abs(mg - 99.0858) < 0.001)
        #expect(r.exclusion == nil)
    }

    @Test func kgPerLitreIsConverted() throws {
        let r = Self.interpret(Self.measurement(value: .value(mantissa: 111, exponent: -5)))
        #expect(r.unit.rawValue == "kg/L")
        #expect(r.mgdl == 111)
        let mmol = try #require(r.mmoll)
        #expect(abs(mmol - 111 / 18.0156) < 0.001)
    }

    @Test func ketoneContextMakesAKetoneReading() throws {
        var context = GlucoseMeasurementContext(sequenceNumber: 1)
        context.meal = 6
        let r = Self.interpret(Self.measurement(value: .value(mantissa: 15, exponent: -5)), context: context)
        #expect(r.analyte == .ketone)
        #expect(r.mgdl == nil)
        #expect(r.mmoll == 1.5)
        #expect(r.exclusion == .ketone)
        #expect(r.context?.meal == 6)
        #expect(r.rawContext == context.encoded())
    }

    @Test func ordinaryMealContextStaysGlucose() {
        var context = GlucoseMeasurementContext(sequenceNumber: 1)
        context.meal = 1
        context.carbohydrateID = 1
        context.carbohydrateKg = .value(mantissa: 90, exponent: -3)
        let r = Self.interpret(Self.measurement(), context: context)
        #expect(r.analyte == .glucose)
        #expect(r.exclusion == nil)
        #expect(r.context?.meal == 1)
        #expect(r.context?.carbohydrateKg == 0.09)
    }
}

/// Clock characteristic values for tests.
enum FakeMeterClock {
    static func cts(_ t: GlucoseDateTime) -> [UInt8] {
        [UInt8(t.year & 0xFF), UInt8(t.year >> 8), UInt8(t.month), UInt8(t.day), UInt8(t.hour), UInt8(t.minute), UInt8(t.second), 3, 0, 0]
    }
    static func dateTime(_ t: GlucoseDateTime) -> [UInt8] { Array(cts(t).prefix(7)) }
}
