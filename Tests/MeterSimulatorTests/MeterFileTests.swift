import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Support
import Testing

@Suite struct MeterRecordTests {
    let t = GlucoseDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0)!

    @Test func mgPerDLAsKgPerLitre() throws {
        let r = MeterRecord(sequenceNumber: 4, baseTime: t, timeOffset: 60, result: .mgPerDL(111))
        #expect(r.concentration == .value(mantissa: 111, exponent: -5))
        #expect(r.concentration?.bits == 0xB06F)
        let m = try GlucoseMeasurement(bytes: r.measurementBytes)
        #expect(m.sequenceNumber == 4)
        #expect(m.timeOffset == 60)
        #expect(m.unit == .kilogramPerLitre)
        #expect(m.type == 1 && m.sampleLocation == 1)
        #expect(m.sensorStatus == nil)
        #expect(!m.contextFollows)
    }

    @Test func mmolPerLAsMolePerLitre() {
        let r = MeterRecord(sequenceNumber: 1, baseTime: t, result: .mmolPerL(5.5), unit: .molePerLitre)
        #expect(r.concentration?.bits == 0xC037)
    }

    @Test func crossUnitConversions() {
        // 111 mg/dL on a mol/L meter: 6.2 mmol/L at 0.1 resolution.
        let a = MeterRecord(sequenceNumber: 1, baseTime: t, result: .mgPerDL(111), unit: .molePerLitre)
        #expect(a.concentration == .value(mantissa: 62, exponent: -4))
        // 5.5 mmol/L on a kg/L meter: 99 mg/dL.
        let b = MeterRecord(sequenceNumber: 1, baseTime: t, result: .mmolPerL(5.5))
        #expect(b.concentration == .value(mantissa: 99, exponent: -5))
    }

    @Test func largeAndFractionalValuesStayExact() {
        #expect(SFloat.encoding(2500, baseExponent: -5) == .value(mantissa: 250, exponent: -4))
        #expect(SFloat.encoding(5.25, baseExponent: -3) == .value(mantissa: 525, exponent: -5))
        #expect(SFloat.encoding(100.5, baseExponent: -5) == .value(mantissa: 1005, exponent: -6))
    }

    @Test func highAndLowAreInfinitiesWithStatusBits() throws {
        let hi = try GlucoseMeasurement(bytes: MeterRecord(sequenceNumber: 1, baseTime: t, result: .high).measurementBytes)
        #expect(hi.concentration == .positiveInfinity)
        #expect(hi.sensorStatus?.rawValue == 0x0020)
        let lo = try GlucoseMeasurement(bytes: MeterRecord(sequenceNumber: 1, baseTime: t, result: .low, sensorStatus: 0x0001).measurementBytes)
        #expect(lo.concentration?.bits == 0x0802)
        #expect(lo.sensorStatus?.rawValue == 0x0041)
    }

    @Test func controlSolutionAndAbsentConcentration() throws {
        let c = MeterRecord(sequenceNumber: 1, baseTime: t, result: .mgPerDL(120), type: 10, sampleLocation: 4)
        #expect(c.isControlSolution)
        let bytes = c.measurementBytes
        #expect(bytes[12] == 0x4A)
        let none = try GlucoseMeasurement(bytes: MeterRecord(sequenceNumber: 1, baseTime: t, result: .absent).measurementBytes)
        #expect(none.concentration == nil)
    }

    @Test func contextTakesTheRecordsSequenceNumber() throws {
        let r = MeterRecord(sequenceNumber: 77, baseTime: t, result: .mgPerDL(90),
                            context: GlucoseMeasurementContext(sequenceNumber: 0, meal: 2))
        let bytes = try #require(r.contextBytes)
        #expect(bytes == [0x02, 77, 0, 2])
        #expect(try GlucoseMeasurement(bytes: r.measurementBytes).contextFollows)
    }
}

@Suite struct MeterFileTests {
    static let example = """
    {
      "address": "c0:26:da:01:02:03",
      "name": "meter+06543210",
      "pin": "123456",
      "unit": "kg/L",
      "deviceInformation": {"manufacturer": "Roche", "model": "Accu-Chek Guide", "serial": "92534026466"},
      "features": ["highLow", "multipleBond"],
      "records": [
        {"sequence": 4, "time": "2024-03-05T07:30:00", "timeOffset": 60, "mgdl": 111, "type": 8, "location": 15},
        {"sequence": 5, "time": "2024-03-05T12:10", "mmol": 7.1, "unit": "mol/L", "context": {"meal": 2, "carbohydrateGrams": 45}},
        {"sequence": 6, "time": "2024-03-05T18:00:00", "result": "low"},
        {"sequence": 7, "time": "2024-03-05T19:00:00", "result": "high", "status": ["batteryLow"]},
        {"sequence": 8, "time": "2024-03-05T20:00:00", "mgdl": 122, "control": true}
      ],
      "newRecords": {"everySeconds": 30, "limit": 3},
      "advertising": {"onSeconds": 5, "offSeconds": 25},
      "faults": {"dropLinkAfter": 2, "notificationDelayMs": 20, "contextOrder": "before",
                 "malformed": [{"sequence": 7, "kind": "invalid-time"}]}
    }
    """

    @Test func parsesTheFullFormat() throws {
        let m = try MeterFile.parse(Self.example)
        #expect(m.address == "C0:26:DA:01:02:03")
        #expect(m.passkey == 123456)
        #expect(m.deviceInformation.serial == "92534026466")
        #expect(m.features == 0x0420)
        #expect(m.records.map(\.sequenceNumber) == [4, 5, 6, 7, 8])
        #expect(m.records[0].type == 8 && m.records[0].sampleLocation == 15)
        #expect(m.records[1].unit == .molePerLitre)
        #expect(m.records[1].context?.meal == 2)
        #expect(m.records[1].context?.carbohydrateKg == .value(mantissa: 45, exponent: -3))
        #expect(m.records[2].result == .low)
        #expect(m.records[3].effectiveSensorStatus == 0x0021)
        #expect(m.records[4].isControlSolution)
        #expect(m.newRecords == NewRecordPlan(intervalSeconds: 30, limit: 3))
        #expect(m.advertising == .bursts(onSeconds: 5, offSeconds: 25))
        #expect(m.faults.dropLinkAfter == 2)
        #expect(m.faults.notificationDelay == 0.02)
        #expect(m.faults.contextOrder == .before)
        #expect(m.faults.malformed == [7: .invalidTime])
    }

    @Test func generatedSeries() throws {
        let m = try MeterFile.parse("""
        {"address": "C0:26:DA:01:02:04", "name": "m", "pin": "000001",
         "generate": {"count": 30, "firstSequence": 100, "start": "2024-01-01T00:00:00", "intervalMinutes": 60, "withContext": true}}
        """)
        #expect(m.records.count == 30)
        #expect(m.records.first?.sequenceNumber == 100)
        #expect(m.records.last?.sequenceNumber == 129)
        #expect(m.records.last?.baseTime == GlucoseDateTime(year: 2024, month: 1, day: 2, hour: 5, minute: 0, second: 0))
        #expect(m.records.allSatisfy { $0.context != nil })
    }

    struct Bad: Sendable, CustomTestStringConvertible {
        var json: String
        var field: String
        var testDescription: String { field.isEmpty ? json : field }
    }

    static let head = #""address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456""#

    static let bad: [Bad] = [
        Bad(json: "{", field: ""),
        Bad(json: #"{"name": "m", "pin": "123456"}"#, field: "address"),
        Bad(json: #"{"address": "C0:26:DA:01:02", "name": "m", "pin": "123456"}"#, field: "address"),
        Bad(json: #"{"address": "C0:26:DA:01:02:03", "name": "m", "pin": "12345"}"#, field: "pin"),
        Bad(json: "{\(head), \"colour\": 1}", field: "colour"),
        Bad(json: "{\(head), \"records\": [{\"time\": \"2024-03-05T07:30:00\", \"mgdl\": 1}]}", field: "records[0].sequence"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 70000, \"time\": \"2024-03-05T07:30:00\", \"mgdl\": 1}]}", field: "records[0].sequence"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-30T07:30:00\", \"mgdl\": 1}]}", field: "records[0].time"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-03T07:30:00\"}]}", field: "records[0]"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-03T07:30:00\", \"mgdl\": 1, \"mmol\": 2}]}", field: "records[0]"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-03T07:30:00\", \"mgdl\": 1, \"unit\": \"mg/dL\"}]}", field: "records[0].unit"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-03T07:30:00\", \"mgdl\": 1, \"status\": [\"x\"]}]}", field: "records[0].status[0]"),
        Bad(json: "{\(head), \"records\": [{\"sequence\": 1, \"time\": \"2024-02-03T07:30:00\", \"mgdl\": 1, \"context\": {\"meal\": \"x\"}}]}", field: "records[0].context.meal"),
        Bad(json: "{\(head), \"faults\": {\"contextOrder\": \"sideways\"}}", field: "faults.contextOrder"),
        Bad(json: "{\(head), \"faults\": {\"dropLinkAfterr\": 2}}", field: "faults.dropLinkAfterr"),
        Bad(json: "{\(head), \"faults\": {\"malformed\": [{\"sequence\": 1, \"kind\": \"weird\"}]}}", field: "faults.malformed[0].kind"),
        Bad(json: "{\(head), \"advertising\": \"sometimes\"}", field: "advertising"),
        Bad(json: "{\(head), \"newRecords\": {\"limit\": 2}}", field: "newRecords.everySeconds"),
    ]

    @Test(arguments: bad) func refusesWithTheFieldNamed(_ c: Bad) {
        #expect {
            try MeterFile.parse(c.json)
        } throws: { error in
            (error as? MeterFileError)?.field == c.field
        }
    }

    @Test func duplicateSequenceNumbersAreRefused() {
        #expect(throws: MeterFileError.self) {
            try MeterFile.parse("""
            {\(Self.head), "records": [{"sequence": 1, "time": "2024-03-05T07:30:00", "mgdl": 1},
                                       {"sequence": 1, "time": "2024-03-05T08:30:00", "mgdl": 2}]}
            """)
        }
    }
}

@Suite struct JSONValueTests {
    @Test func arbitraryBytesNeverCrash() {
        var rng = SystemRandomNumberGenerator()
        let alphabet = Array("{}[]\",:0123456789.-eEtrufalsn \\u".utf8)
        for _ in 0..<2000 {
            let n = Int.random(in: 0..<24, using: &rng)
            let bytes = (0..<n).map { _ in alphabet.randomElement(using: &rng) ?? 0 }
            _ = try? JSONValue.parse(bytes)
            _ = try? MeterFile.parse(bytes)
        }
    }
}
