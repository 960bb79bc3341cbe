import Testing
@testable import GlucoseProfile
import TestSupport

@Suite("Units and documented rounding")
struct UnitsTests {
    @Test func wireUnitsScaleByPowersOfTen() {
        #expect(GlucoseUnits.mgPerDL(SFloat(bits: 0xB06F), unit: .kilogramPerLitre) == 111)
        #expect(GlucoseUnits.mmolPerL(SFloat(bits: 0xC037), unit: .molePerLitre) == 5.5)
        #expect(GlucoseUnits.mgPerDL(fromKgPerL: 0.001) == 100)
        #expect(GlucoseUnits.mmolPerL(fromMolPerL: 0.0055) == 5.5)
        #expect(GlucoseUnits.mgPerDL(.positiveInfinity, unit: .kilogramPerLitre) == nil)
        #expect(GlucoseUnits.mmolPerL(.nan, unit: .molePerLitre) == nil)
    }

    @Test func molarMassOfGlucose() {
        #expect(GlucoseUnits.mgPerDLPerMmolPerL == 18.0156)
        #expect(GlucoseUnits.mgPerDL(fromMmolPerL: 10) == 180.156)
        #expect(abs(GlucoseUnits.mmolPerL(fromMgPerDL: 180.156) - 10) < 1e-12)
        // Not Nordic's 18.2, not xDrip's 18.01559, not the 64.458 of haemoglobin.
        #expect(GlucoseUnits.rounded(SFloat.value(mantissa: 100, exponent: -4), unit: .molePerLitre, to: .mgPerDL)?.description == "180.2")
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var sfloat: SFloat
        var unit: ConcentrationUnit
        var mgdl: String
        var mmol: String
        var testDescription: String { "\(sfloat) \(unit.rawValue) -> \(mgdl) mg/dL, \(mmol) mmol/L" }
    }

    static let cases: [Case] = [
        Case(sfloat: .value(mantissa: 111, exponent: -5), unit: .kilogramPerLitre, mgdl: "111.0", mmol: "6.16"), // 6.1613...
        Case(sfloat: .value(mantissa: 20, exponent: -5), unit: .kilogramPerLitre, mgdl: "20.0", mmol: "1.11"),
        Case(sfloat: .value(mantissa: 600, exponent: -5), unit: .kilogramPerLitre, mgdl: "600.0", mmol: "33.30"), // 33.3050...
        Case(sfloat: .value(mantissa: 1234, exponent: -6), unit: .kilogramPerLitre, mgdl: "123.4", mmol: "6.85"),
        Case(sfloat: .value(mantissa: 55, exponent: -4), unit: .molePerLitre, mgdl: "99.1", mmol: "5.50"), // 99.0858
        Case(sfloat: .value(mantissa: 333, exponent: -5), unit: .molePerLitre, mgdl: "60.0", mmol: "3.33"), // 59.99194...
        Case(sfloat: .value(mantissa: -5, exponent: -4), unit: .molePerLitre, mgdl: "-9.0", mmol: "-0.50"), // half away from zero
        Case(sfloat: .value(mantissa: 0, exponent: 3), unit: .kilogramPerLitre, mgdl: "0.0", mmol: "0.00"),
        Case(sfloat: .value(mantissa: 2047, exponent: 7), unit: .kilogramPerLitre, mgdl: "2047000000000000.0", mmol: "113623748307022.80"),
    ]

    @Test(arguments: cases)
    func roundedHalfAwayFromZero(_ c: Case) {
        #expect(GlucoseUnits.rounded(c.sfloat, unit: c.unit, to: .mgPerDL)?.description == c.mgdl)
        #expect(GlucoseUnits.rounded(c.sfloat, unit: c.unit, to: .mmolPerL)?.description == c.mmol)
    }

    @Test func exactHalvesRoundAwayFromZero() {
        // 18.0156 x 0.25 = 4.5039 -> 4.5; with 3 decimals 4.504; 0.25 mmol/L in mg/dL at 0 decimals: 5 (4.5039).
        let quarter = SFloat.value(mantissa: 25, exponent: -5)
        #expect(GlucoseUnits.rounded(quarter, unit: .molePerLitre, to: .mgPerDL, decimals: 3)?.description == "4.504")
        // 0.25 mg/dL to 1 decimal is an exact half: 0.3; -0.25 -> -0.3.
        #expect(GlucoseUnits.rounded(.value(mantissa: 25, exponent: -7), unit: .kilogramPerLitre, to: .mgPerDL)?.description == "0.3")
        #expect(GlucoseUnits.rounded(.value(mantissa: -25, exponent: -7), unit: .kilogramPerLitre, to: .mgPerDL)?.description == "-0.3")
        #expect(GlucoseUnits.rounded(.value(mantissa: 5, exponent: -6), unit: .kilogramPerLitre, to: .mgPerDL, decimals: 0)?.description == "1")
    }

    @Test func specialValuesHaveNoRounding() {
        for special in [SFloat.nan, .nres, .positiveInfinity, .negativeInfinity, .reserved] {
            #expect(GlucoseUnits.rounded(special, unit: .kilogramPerLitre, to: .mgPerDL) == nil)
        }
    }

    @Test func fixedDecimalAgreesWithDouble() {
        var rng = SplitMix(seed: 18_0156)
        var failures = 0
        for _ in 0..<5_000 {
            let s = SFloat(bits: rng.uint16())
            guard s.isNumber else { continue }
            for unit in ConcentrationUnit.allCases {
                guard let fixed = GlucoseUnits.rounded(s, unit: unit, to: .mgPerDL, decimals: 1),
                      let exact = GlucoseUnits.mgPerDL(s, unit: unit) else { failures += 1; continue }
                if abs(fixed.doubleValue - exact) > 0.05 + abs(exact) * 1e-12 { failures += 1 }
            }
        }
        #expect(failures == 0)
    }
}
