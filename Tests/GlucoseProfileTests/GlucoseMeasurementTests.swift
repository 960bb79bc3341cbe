import Testing
@testable import GlucoseProfile

@Suite("Glucose Measurement 0x2A18")
struct GlucoseMeasurementTests {
    @Test func minimalRecordHasOnlySequenceAndBaseTime() throws {
        let m = try GlucoseMeasurement(bytes: hex("00 2A 00 E8 07 03 05 0E 1E 00"))
        #expect(m.sequenceNumber == 42)
        #expect(m.baseTime == date(2024, 3, 5, 14, 30, 0))
        #expect(m.timeOffset == nil)
        #expect(m.concentration == nil)
        #expect(m.type == nil && m.sampleLocation == nil && m.sensorStatus == nil)
        #expect(!m.contextFollows)
        #expect(m.userFacingTime.isoString == "2024-03-05T14:30:00")
        #expect(m.mgPerDL == nil)
    }

    @Test func fullKgPerLitreRecord() throws {
        // flags 0x1B: offset, concentration, status, context follows; seq 0x1234; 2024-03-05 14:30:15;
        // offset +60; 111e-5 kg/L; type 1 (capillary whole blood), location 1 (finger); status battery low.
        let m = try GlucoseMeasurement(bytes: hex("1B 34 12 E8 07 03 05 0E 1E 0F 3C 00 6F B0 11 01 00"))
        #expect(m.sequenceNumber == 0x1234)
        #expect(m.timeOffset == 60)
        #expect(m.concentration == .value(mantissa: 111, exponent: -5))
        #expect(m.unit == .kilogramPerLitre)
        #expect(m.type == 1 && m.sampleLocation == 1)
        #expect(m.sensorStatus == .batteryLow)
        #expect(m.contextFollows)
        #expect(m.userFacingTime.isoString == "2024-03-05T15:30:15")
        #expect(m.mgPerDL == 111)
        #expect(m.encoded() == hex("1B 34 12 E8 07 03 05 0E 1E 0F 3C 00 6F B0 11 01 00"))
    }

    @Test func nibbleOrderTypeLowLocationHigh() throws {
        // Accu-Chek sends 0xF8: type 8 (undetermined plasma), location 15 (not available).
        let m = try GlucoseMeasurement(bytes: hex("02 04 00 E5 07 01 02 03 04 05 6F B0 F8"))
        #expect(m.type == 8)
        #expect(m.sampleLocation == 15)
        #expect(GlucoseMeasurement.typeName(8) == "undetermined_plasma")
        #expect(GlucoseMeasurement.sampleLocationName(15) == "not_available")
    }

    @Test func molePerLitre() throws {
        // flags 0x06: concentration in mol/L; 55e-4 mol/L = 5.5 mmol/L; type 2, location 1.
        let m = try GlucoseMeasurement(bytes: hex("06 01 00 E8 07 03 05 0E 1E 00 37 C0 12"))
        #expect(m.unit == .molePerLitre)
        #expect(m.mmolPerL == 5.5)
        #expect(m.mgPerDL == 5.5 * 18.0156)
        #expect(GlucoseUnits.rounded(m.concentration!, unit: m.unit, to: .mgPerDL)?.description == "99.1")
        #expect(GlucoseUnits.rounded(m.concentration!, unit: m.unit, to: .mmolPerL)?.description == "5.50")
    }

    @Test func hiIsPositiveInfinityWithStatusBit5() throws {
        let m = try GlucoseMeasurement(bytes: hex("0B 05 00 E8 07 03 05 0E 1E 00 00 00 FE 07 F8 20 00"))
        #expect(m.concentration == .positiveInfinity)
        #expect(m.sensorStatus == .resultTooHigh)
        #expect(m.sensorStatus?.names == ["result_too_high"])
        #expect(m.mgPerDL == nil && m.mmolPerL == nil)
    }

    @Test func loIsNegativeInfinityWithStatusBit6() throws {
        // Real Accu-Chek Guide LO: -INF (02 08) and status 0x0040.
        let m = try GlucoseMeasurement(bytes: hex("0B 06 00 E5 07 0B 0E 0A 14 1E 3C 00 02 08 F8 40 00"))
        #expect(m.concentration == .negativeInfinity)
        #expect(m.sensorStatus == .resultTooLow)
        #expect(m.sensorStatus?.names == ["result_too_low"])
        #expect(m.mgPerDL == nil)
    }

    @Test func negativeTimeOffsetCrossesMidnightMonthAndYear() throws {
        // Contour: base time UTC, offset -420 (PDT). 2024-01-01T03:00:00 - 7 h = 2023-12-31T20:00:00.
        let m = try GlucoseMeasurement(bytes: hex("01 07 00 E8 07 01 01 03 00 00 5C FE"))
        #expect(m.timeOffset == -420)
        #expect(m.userFacingTime.isoString == "2023-12-31T20:00:00")
        #expect(m.baseTime.isoString == "2024-01-01T03:00:00")
    }

    @Test func offsetAcrossLeapDay() {
        #expect(date(2024, 2, 28, 23, 30).adding(minutes: 60).isoString == "2024-02-29T00:30:00")
        #expect(date(2023, 2, 28, 23, 30).adding(minutes: 60).isoString == "2023-03-01T00:30:00")
        #expect(date(2024, 3, 1, 0, 10, 59).adding(minutes: -20).isoString == "2024-02-29T23:50:59")
        #expect(date(2100, 3, 1).adding(minutes: -1).isoString == "2100-02-28T23:59:00")
        #expect(date(2000, 3, 1).adding(minutes: -1).isoString == "2000-02-29T23:59:00")
        #expect(date(2024, 5, 1).adding(minutes: Int(Int16.min)).isoString == "2024-04-08T05:52:00")
        #expect(date(2024, 5, 1).adding(minutes: Int(Int16.max)).isoString == "2024-05-23T18:07:00")
    }

    @Test func trailingBytesAndReservedFlagsAreIgnored() throws {
        let m = try GlucoseMeasurement(bytes: hex("E0 01 00 E8 07 03 05 0E 1E 00 AA BB CC"))
        #expect(m.sequenceNumber == 1)
        #expect(m.concentration == nil && !m.contextFollows)
        #expect(m.encoded() == hex("00 01 00 E8 07 03 05 0E 1E 00"))
    }

    @Test func sequenceNumberIsUnsigned() throws {
        let m = try GlucoseMeasurement(bytes: hex("00 FF FF E8 07 03 05 0E 1E 00"))
        #expect(m.sequenceNumber == 65535)
    }

    @Test func unknownTypeAndLocationAreKeptRaw() throws {
        let m = try GlucoseMeasurement(bytes: hex("02 01 00 E8 07 03 05 0E 1E 00 6F B0 7C"))
        #expect(m.type == 12 && m.sampleLocation == 7)
        #expect(GlucoseMeasurement.typeName(12) == "reserved")
        #expect(GlucoseMeasurement.sampleLocationName(7) == "reserved")
    }

    @Test func controlSolutionIsRecognised() throws {
        #expect(try GlucoseMeasurement(bytes: hex("02 01 00 E8 07 03 05 0E 1E 00 6F B0 4A")).isControlSolution)
        #expect(try !GlucoseMeasurement(bytes: hex("02 01 00 E8 07 03 05 0E 1E 00 6F B0 11")).isControlSolution)
    }

    struct Malformed: CustomTestStringConvertible, Sendable {
        var name: String
        var bytes: String
        var kind: GlucoseDecodingError.Kind
        var field: String
        var offset: Int
        var testDescription: String { name }
    }

    static let malformed: [Malformed] = [
        Malformed(name: "empty", bytes: "", kind: .truncated, field: "Flags", offset: 0),
        Malformed(name: "no sequence", bytes: "00 01", kind: .truncated, field: "Sequence Number", offset: 1),
        Malformed(name: "short base time", bytes: "00 01 00 E8 07 03 05 0E 1E", kind: .truncated, field: "Base Time", offset: 3),
        Malformed(name: "time offset announced, missing", bytes: "01 01 00 E8 07 03 05 0E 1E 00 3C", kind: .truncated, field: "Time Offset", offset: 10),
        Malformed(name: "concentration announced, missing", bytes: "02 01 00 E8 07 03 05 0E 1E 00", kind: .truncated, field: "Glucose Concentration", offset: 10),
        Malformed(name: "type-location missing", bytes: "02 01 00 E8 07 03 05 0E 1E 00 6F B0", kind: .truncated, field: "Type-Sample Location", offset: 12),
        Malformed(name: "status missing", bytes: "0B 01 00 E8 07 03 05 0E 1E 00 00 00 6F B0 11 40", kind: .truncated, field: "Sensor Status Annunciation", offset: 15),
        Malformed(name: "month 13 (i-SENS firmware bug)", bytes: "00 01 00 E8 07 0D 05 0E 1E 00", kind: .invalidValue, field: "Base Time month", offset: 5),
        Malformed(name: "month 0 (unknown)", bytes: "00 01 00 E8 07 00 05 0E 1E 00", kind: .invalidValue, field: "Base Time month", offset: 5),
        Malformed(name: "year 0 (unknown)", bytes: "00 01 00 00 00 03 05 0E 1E 00", kind: .invalidValue, field: "Base Time year", offset: 3),
        Malformed(name: "February 30", bytes: "00 01 00 E8 07 02 1E 0E 1E 00", kind: .invalidValue, field: "Base Time day", offset: 6),
        Malformed(name: "February 29 in 2023", bytes: "00 01 00 E7 07 02 1D 0E 1E 00", kind: .invalidValue, field: "Base Time day", offset: 6),
        Malformed(name: "hour 24", bytes: "00 01 00 E8 07 03 05 18 1E 00", kind: .invalidValue, field: "Base Time hours", offset: 7),
        Malformed(name: "minute 60", bytes: "00 01 00 E8 07 03 05 0E 3C 00", kind: .invalidValue, field: "Base Time minutes", offset: 8),
        Malformed(name: "second 60", bytes: "00 01 00 E8 07 03 05 0E 1E 3C", kind: .invalidValue, field: "Base Time seconds", offset: 9),
    ]

    @Test(arguments: malformed)
    func malformedValuesAreTypedErrors(_ c: Malformed) {
        let error = decodingError { () throws(GlucoseDecodingError) in try GlucoseMeasurement(bytes: hex(c.bytes)) }
        #expect(error?.kind == c.kind)
        #expect(error?.field == c.field)
        #expect(error?.offset == c.offset)
        #expect(error.map { !$0.description.contains("\n") && $0.description.hasPrefix(c.field) } == true)
    }

    @Test func everyTruncatedPrefixOfAFullRecordFails() {
        let full = hex("1B 34 12 E8 07 03 05 0E 1E 0F 3C 00 6F B0 11 01 00")
        for length in 0..<full.count {
            let error = decodingError { () throws(GlucoseDecodingError) in try GlucoseMeasurement(bytes: full[0..<length]) }
            #expect(error?.kind == .truncated, "prefix of \(length) bytes")
        }
    }
}
