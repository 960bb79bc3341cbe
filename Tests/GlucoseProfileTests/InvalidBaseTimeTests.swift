import Testing
@testable import GlucoseProfile

/// Decoding a record whose Base Time is not a date, civil date-time text, and the special values.
@Suite("Invalid base time and civil date-time text")
struct InvalidBaseTimeTests {
    struct Case: CustomStringConvertible, Sendable {
        var name: String
        var baseTime: [UInt8]
        var text: String
        var description: String { name }
    }

    static let cases: [Case] = [
        Case(name: "clock never set", baseTime: [0, 0, 0, 0, 0, 0, 0], text: "0000-00-00T00:00:00"),
        Case(name: "month 13", baseTime: [0xE8, 0x07, 13, 1, 8, 0, 0], text: "2024-13-01T08:00:00"),
        Case(name: "February 30", baseTime: [0xE8, 0x07, 2, 30, 8, 0, 0], text: "2024-02-30T08:00:00"),
        Case(name: "every field at its byte's maximum", baseTime: [0xFF, 0xFF, 255, 255, 255, 255, 255],
             text: "65535-255-255T255:255:255"),
    ]

    /// flags 0x03 (offset, concentration), sequence 7, the base time, offset +30, 111e-5 kg/L, type 1 location 1.
    static func record(_ baseTime: [UInt8]) -> [UInt8] {
        [0x03, 0x07, 0x00] + baseTime + [0x1E, 0x00, 0x6F, 0xB0, 0x11]
    }

    @Test(arguments: cases)
    func strictDecodingRefusesIt(_ c: Case) {
        guard case .failure(let error) = GlucoseMeasurement.decode(Self.record(c.baseTime)) else {
            Issue.record("decoded a record with base time \(c.text)")
            return
        }
        #expect(error.kind == .invalidValue)
    }

    @Test(arguments: cases)
    func theOptionKeepsTheFieldsAsSentAndDecodesTheRest(_ c: Case) throws {
        let m = try GlucoseMeasurement(bytes: Self.record(c.baseTime), options: .keepingInvalidBaseTime)
        #expect(!m.baseTime.isValid)
        #expect(m.baseTime.encoded() == c.baseTime)
        #expect(m.baseTime.isoString == c.text)
        #expect(m.sequenceNumber == 7)
        #expect(m.timeOffset == 30)
        #expect(m.mgPerDL == 111)
        #expect(m.type == 1 && m.sampleLocation == 1)
        // The text reads back to the same fields, only without date validation.
        #expect(GlucoseDateTime(isoString: c.text, requiringValidDate: false) == m.baseTime)
        #expect(GlucoseDateTime(isoString: c.text) == nil)
    }

    @Test func theOptionChangesNothingForAValidBaseTime() throws {
        let bytes = Self.record([0xE8, 0x07, 3, 5, 14, 30, 0])
        let strict = try GlucoseMeasurement(bytes: bytes)
        #expect(try GlucoseMeasurement(bytes: bytes, options: .keepingInvalidBaseTime) == strict)
        #expect(strict.baseTime.isValid)
    }

    @Test func theOptionStillNeedsEveryByte() {
        let bytes = Self.record([0xE8, 0x07, 13, 1, 8, 0, 0])
        for n in 0..<bytes.count {
            guard case .failure(let error) = GlucoseMeasurement.decode(Array(bytes.prefix(n)), options: .keepingInvalidBaseTime) else {
                Issue.record("decoded a prefix of \(n) bytes")
                continue
            }
            #expect(error.kind == .truncated, "prefix \(n)")
        }
    }

    @Test(arguments: ["2024-03-05T14:30:00", "1582-01-01T00:00:00", "9999-12-31T23:59:59", "2024-02-29T12:00:00"])
    func validTextRoundTrips(_ text: String) throws {
        let t = try #require(GlucoseDateTime(isoString: text))
        #expect(t.isValid)
        #expect(t.isoString == text)
        #expect(GlucoseDateTime(isoString: text, requiringValidDate: false) == t)
    }

    @Test(arguments: ["", "2024-03-05", "2024-03-05 14:30:00", "2024-03-05T14:30", "2024-03-05T14:30:00Z", "x024-03-05T14:30:00",
                      "2024--03-05T14:30:00", "2024-03-05T14:30:00:00", "2024-256-05T14:30:00", "65536-01-01T00:00:00",
                      "2024:03-05T14:30:00"])
    func otherTextIsRefused(_ text: String) {
        #expect(GlucoseDateTime(isoString: text, requiringValidDate: false) == nil)
    }

    @Test func naiveSecondsRoundTrip() {
        for seconds in stride(from: Int64(-12_219_292_800), to: 253_402_300_800, by: 7_777_777) {
            let t = GlucoseDateTime(naiveSeconds: seconds)
            #expect(t.isValid)
            #expect(t.naiveSeconds == seconds)
        }
    }

    @Test func specialValuesAreNamedAsInText() {
        let expected: [(SFloat, SFloat.Special, String)] = [
            (.nan, .nan, "nan"), (.nres, .nres, "nres"), (.positiveInfinity, .positiveInfinity, "+inf"),
            (.negativeInfinity, .negativeInfinity, "-inf"), (.reserved, .reserved, "reserved"),
        ]
        for (value, special, name) in expected {
            #expect(value.special == special)
            #expect(value.specialName == name)
            #expect(SFloat.Special(rawValue: name) == special)
        }
        #expect(SFloat.value(mantissa: 111, exponent: -5).special == nil)
        #expect(SFloat.Special.allCases.count == expected.count)
    }
}
