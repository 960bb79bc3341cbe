import Testing
@testable import GlucoseProfile

@Suite("SFLOAT (IEEE 11073 16-bit)")
struct SFloatTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var bits: UInt16
        var expected: SFloat
        var double: Double?
        var text: String?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "111e-5 kg/L (Accu-Chek, 111 mg/dL)", bits: 0xB06F, expected: .value(mantissa: 111, exponent: -5), double: 0.00111, text: "0.00111"),
        Case(name: "55e-4 mol/L (5.5 mmol/L)", bits: 0xC037, expected: .value(mantissa: 55, exponent: -4), double: 0.0055, text: "0.0055"),
        Case(name: "-162e-1 (negative mantissa)", bits: 0xFF5E, expected: .value(mantissa: -162, exponent: -1), double: -16.2, text: "-16.2"),
        Case(name: "36e2 (positive exponent)", bits: 0x2024, expected: .value(mantissa: 36, exponent: 2), double: 3600, text: "3600"),
        Case(name: "90e-3 kg carbohydrate", bits: 0xD05A, expected: .value(mantissa: 90, exponent: -3), double: 0.09, text: "0.09"),
        Case(name: "zero", bits: 0x0000, expected: .value(mantissa: 0, exponent: 0), double: 0, text: "0"),
        Case(name: "most negative mantissa, exponent -8", bits: 0x8800, expected: .value(mantissa: -2048, exponent: -8), double: -2048e-8, text: "-0.00002048"),
        Case(name: "largest mantissa, exponent 7", bits: 0x77FF, expected: .value(mantissa: 2047, exponent: 7), double: 2047e7, text: "20470000000"),
        Case(name: "NaN", bits: 0x07FF, expected: .nan, double: nil, text: nil),
        Case(name: "NRes", bits: 0x0800, expected: .nres, double: nil, text: nil),
        Case(name: "+INFINITY (HI)", bits: 0x07FE, expected: .positiveInfinity, double: nil, text: nil),
        Case(name: "-INFINITY (LO)", bits: 0x0802, expected: .negativeInfinity, double: nil, text: nil),
        Case(name: "reserved", bits: 0x0801, expected: .reserved, double: nil, text: nil),
    ]

    @Test(arguments: cases)
    func decodes(_ c: Case) {
        let value = SFloat(bits: c.bits)
        #expect(value == c.expected)
        #expect(value.bits == c.bits)
        #expect(value.doubleValue == c.double)
        #expect(value.decimalString == c.text)
        #expect(value.isNumber == (c.double != nil))
    }

    @Test func specialNamesAreDistinct() {
        let names = [SFloat.nan, .nres, .positiveInfinity, .negativeInfinity, .reserved].compactMap(\.specialName)
        #expect(names == ["nan", "nres", "+inf", "-inf", "reserved"])
        #expect(SFloat.value(mantissa: 1, exponent: 0).specialName == nil)
    }

    @Test func everyPatternRoundTrips() {
        var mismatches = 0
        for bits in 0...UInt16.max {
            let value = SFloat(bits: bits)
            if value.bits != bits || SFloat(bits: value.bits) != value { mismatches += 1 }
            if case let .value(m, e) = value, !((-2048...2047).contains(m) && (-8...7).contains(e)) { mismatches += 1 }
            if value.isNumber == (value.specialName != nil) { mismatches += 1 }
        }
        #expect(mismatches == 0)
    }

    @Test func encoderRoundsAndRefusesWhatDoesNotFit() {
        #expect(SFloat(0.00111, exponent: -5) == .value(mantissa: 111, exponent: -5))
        #expect(SFloat(5.55, exponent: -1) == .value(mantissa: 56, exponent: -1))
        #expect(SFloat(-0.25, exponent: -1) == .value(mantissa: -3, exponent: -1))
        #expect(SFloat(2045, exponent: 0) == .value(mantissa: 2045, exponent: 0))
        #expect(SFloat(2046, exponent: 0) == nil)
        #expect(SFloat(-2046, exponent: 0) == nil)
        #expect(SFloat(1, exponent: 8) == nil)
        #expect(SFloat(1, exponent: -9) == nil)
        #expect(SFloat(.nan, exponent: 0) == .nan)
        #expect(SFloat(.infinity, exponent: 0) == .positiveInfinity)
        #expect(SFloat(-.infinity, exponent: 0) == .negativeInfinity)
    }

    @Test func scaledValuesAreExact() {
        #expect(SFloat(bits: 0xB06F).scaledDouble(powerOfTen: 5) == 111)
        #expect(SFloat(bits: 0xC037).scaledDouble(powerOfTen: 3) == 5.5)
        #expect(SFloat.nan.scaledDouble(powerOfTen: 5) == nil)
    }
}
