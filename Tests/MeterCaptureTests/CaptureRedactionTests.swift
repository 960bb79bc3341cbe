import GatewayCore
import GlucoseProfile
import Support
import Testing
import TestSupport
@testable import MeterCapture

/// `--redact-values` and the session a capture records.
struct CaptureRedactionTests {
    static let time = GlucoseDateTime(year: 2024, month: 5, day: 1, hour: 8, minute: 17, second: 42)
        ?? GlucoseDateTime(naiveSeconds: 0)

    @Test func aMeasurementKeepsItsLayoutAndLosesItsValueAndTime() throws {
        let m = GlucoseMeasurement(sequenceNumber: 7, baseTime: Self.time, timeOffset: 60,
                                   concentration: .value(mantissa: 143, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1, sensorStatus: SensorStatus(rawValue: 0x0001), contextFollows: true)
        let bytes = m.encoded()
        let event = CaptureEvent(milliseconds: 1, kind: .value, uuid: .glucoseMeasurement, value: bytes)
        let out = try #require(Capture.redactingValues([event]).first?.value)
        #expect(out.count == bytes.count)
        let r = try GlucoseMeasurement(bytes: out)
        #expect(r.sequenceNumber == 7 && r.type == 1 && r.sensorStatus?.rawValue == 0x0001 && r.contextFollows)
        #expect(r.concentration == .nan)
        #expect(r.baseTime == GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 0, minute: 0, second: 0))
        #expect(r.timeOffset == 0)
    }

    @Test func aCutShortMeasurementKeepsOnlyFlagsAndSequence() throws {
        let bytes: [UInt8] = [0x03, 0x07, 0x00, 0xE8, 0x07, 5, 1, 8, 17]
        let event = CaptureEvent(milliseconds: 1, kind: .value, uuid: .glucoseMeasurement, value: bytes)
        #expect(Capture.redactingValues([event]).first?.value == [0x03, 0x07, 0x00, 0, 0, 0, 0, 0, 0])
    }

    @Test func aContextLosesItsAmounts() throws {
        let c = GlucoseMeasurementContext(sequenceNumber: 7, carbohydrateID: 1, carbohydrateKg: .value(mantissa: 45, exponent: -3),
                                          meal: 1, exerciseDurationSeconds: 1800, exerciseIntensityPercent: 60,
                                          medicationID: 1, medication: .value(mantissa: 4, exponent: -6),
                                          hba1cPercent: .value(mantissa: 65, exponent: -1))
        let bytes = c.encoded()
        let event = CaptureEvent(milliseconds: 1, kind: .value, uuid: .glucoseMeasurementContext, value: bytes)
        let out = try #require(Capture.redactingValues([event]).first?.value)
        let r = try GlucoseMeasurementContext(bytes: out)
        #expect(r.sequenceNumber == 7 && r.meal == 1)
        #expect(r.carbohydrateID == 1 && r.carbohydrateKg == .nan)
        #expect(r.exerciseDurationSeconds == 0 && r.exerciseIntensityPercent == 0)
        #expect(r.medicationID == 1 && r.medication == .nan)
        #expect(r.hba1cPercent == .nan)
    }

    @Test func theClockIsRedactedAndOtherValuesAreKept() {
        let clock = CaptureEvent(milliseconds: 1, kind: .read, uuid: .currentTime, value: [0xE8, 0x07, 5, 1, 8, 17, 42, 3, 0, 0])
        let racp = CaptureEvent(milliseconds: 2, kind: .value, uuid: .recordAccessControlPoint, value: [0x06, 0x00, 0x01, 0x01])
        let out = Capture.redactingValues([clock, racp])
        #expect(out[0].value == [0xD0, 0x07, 1, 1, 0, 0, 0, 3, 0, 0])
        #expect(out[1] == racp)
    }

    /// The session on a scripted meter: identity without the serial, features, every record and the
    /// RACP answer, the report asked for all records, and the link closed at the end.
    @Test func theSessionRecordsAReportOfAllRecords() async throws {
        var script = FakeMeterScript(records: (1...3).map { FakeRecord.glucose($0, mgdl: 100 + Int($0)) })
        script.serial = "SN-SECRET-42"
        let meter = FakeMeter(script: script)
        let events = await CaptureSession.run(on: meter.connect(), idleTimeout: .seconds(5))
        let text = Capture(origin: .meter, gatewayVersion: "0", bluezVersion: nil, redacted: [], events: events).text
        #expect(!text.contains(hexString(Array("SN-SECRET-42".utf8))))
        #expect(!text.contains("SN-SECRET-42"))
        #expect(!text.contains(meter.address))
        #expect(events.contains { $0.kind == .read && $0.uuid == .serialNumber && $0.withheld && $0.value == nil })
        #expect(events.contains { $0.kind == .write && $0.value == [0x01, 0x01] })
        #expect(events.filter { $0.kind == .value && $0.uuid == .glucoseMeasurement }.count == 3)
        #expect(events.contains { $0.kind == .value && $0.uuid == .recordAccessControlPoint && $0.value == [0x06, 0x00, 0x01, 0x01] })
        #expect(events.last?.kind == .disconnected)
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.milliseconds <= $1.milliseconds })
    }
}
