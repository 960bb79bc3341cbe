import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing

private func time(_ h: Int, _ m: Int = 0, day: Int = 5) -> GlucoseDateTime {
    GlucoseDateTime(year: 2024, month: 3, day: day, hour: h, minute: m, second: 0)!
}

/// A meter with five records, sequence 4...8, the third with a meal context.
private func sampleMeter(faults: MeterFaults = MeterFaults()) -> MeterDescription {
    var records: [MeterRecord] = []
    for (i, seq) in (4...8).enumerated() {
        var r = MeterRecord(sequenceNumber: UInt16(seq), baseTime: time(8 + i), timeOffset: 60, result: .mgPerDL(Double(100 + i)))
        if seq == 6 { r.context = GlucoseMeasurementContext(sequenceNumber: 0, meal: 1) }
        records.append(r)
    }
    return MeterDescription(address: "C0:26:DA:00:00:01", name: "meter+1", passkey: 123456, records: records, faults: faults)
}

private func subscribedServer(_ meter: MeterDescription = sampleMeter(), context: Bool = true) -> GlucoseServer {
    var s = GlucoseServer(meter: meter)
    s.setSubscribed(.glucoseMeasurement, true)
    if context { s.setSubscribed(.glucoseMeasurementContext, true) }
    s.setSubscribed(.recordAccessControlPoint, true)
    return s
}

private func drain(_ s: inout GlucoseServer) -> [GlucoseServer.Output] {
    var out: [GlucoseServer.Output] = []
    while let o = s.nextOutput() { out.append(o) }
    return out
}

/// Sequence numbers of the measurements among `outputs`.
private func sequences(_ outputs: [GlucoseServer.Output]) throws -> [UInt16] {
    try outputs.compactMap { o -> UInt16? in
        guard case .value(.glucoseMeasurement, let bytes) = o else { return nil }
        return try GlucoseMeasurement(bytes: bytes).sequenceNumber
    }
}

private func racp(_ outputs: [GlucoseServer.Output]) -> [[UInt8]] {
    outputs.compactMap { o in
        guard case .value(.recordAccessControlPoint, let bytes) = o else { return nil }
        return bytes
    }
}

private func seqOperand(_ v: UInt16) -> [UInt8] { [1, UInt8(v & 0xFF), UInt8(v >> 8)] }

@Suite struct GlucoseServerTests {
    @Test func reportAllSendsEveryRecordInOrderThenSuccess() throws {
        var s = subscribedServer()
        try s.writeRACP([0x01, 0x01])
        #expect(s.isProcedureRunning)
        let out = drain(&s)
        #expect(try sequences(out) == [4, 5, 6, 7, 8])
        #expect(racp(out) == [[0x06, 0x00, 0x01, 0x01]])
        // The context of record 6 follows its measurement, before record 7.
        let idx6 = try #require(out.firstIndex { if case .value(.glucoseMeasurementContext, _) = $0 { true } else { false } })
        guard case .value(_, let ctx) = out[idx6] else { Issue.record("no context"); return }
        #expect(try GlucoseMeasurementContext(bytes: ctx).sequenceNumber == 6)
        guard case .value(_, let before) = out[idx6 - 1] else { return }
        #expect(try GlucoseMeasurement(bytes: before).sequenceNumber == 6)
        #expect(try GlucoseMeasurement(bytes: before).contextFollows)
        #expect(!s.isProcedureRunning)
    }

    @Test func contextBeforeItsMeasurementAsAFault() throws {
        var s = subscribedServer(sampleMeter(faults: MeterFaults(contextOrder: .before)))
        try s.writeRACP([0x01, 0x01])
        let out = drain(&s)
        let idx = try #require(out.firstIndex { if case .value(.glucoseMeasurementContext, _) = $0 { true } else { false } })
        guard case .value(.glucoseMeasurement, let next) = out[idx + 1] else { Issue.record("no measurement after context"); return }
        #expect(try GlucoseMeasurement(bytes: next).sequenceNumber == 6)
    }

    @Test func contextIsNotSentWithoutItsSubscription() throws {
        var s = subscribedServer(context: false)
        try s.writeRACP([0x01, 0x01])
        let out = drain(&s)
        #expect(!out.contains { if case .value(.glucoseMeasurementContext, _) = $0 { true } else { false } })
        #expect(try sequences(out).count == 5)
    }

    @Test func writeWithoutRACPIndicationsFailsWith0x81() {
        var s = GlucoseServer(meter: sampleMeter())
        s.setSubscribed(.glucoseMeasurement, true)
        #expect(throws: GlucoseServer.ATTError.cccdImproperlyConfigured) { try s.writeRACP([0x01, 0x01]) }
        #expect(s.nextOutput() == nil)
    }

    @Test func reportWithoutMeasurementNotificationsFailsWith0x81() {
        var s = GlucoseServer(meter: sampleMeter())
        s.setSubscribed(.recordAccessControlPoint, true)
        #expect(throws: GlucoseServer.ATTError.cccdImproperlyConfigured) { try s.writeRACP([0x01, 0x01]) }
        // A count needs only the RACP indications.
        #expect(throws: Never.self) { try s.writeRACP([0x04, 0x01]) }
    }

    @Test func secondRequestWhileRunningFailsWith0x80AndAbortStopsIt() throws {
        var s = subscribedServer()
        try s.writeRACP([0x01, 0x01])
        _ = s.nextOutput()
        #expect(throws: GlucoseServer.ATTError.procedureAlreadyInProgress) { try s.writeRACP([0x04, 0x01]) }
        try s.writeRACP([0x03, 0x00])
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [0x06, 0x00, 0x03, 0x01])])
        // Idle again: a new request is accepted.
        try s.writeRACP([0x04, 0x01])
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [0x05, 0x00, 0x05, 0x00])])
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var request: [UInt8]
        var sequences: [UInt16]
        var response: [UInt8]
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "all", request: [1, 1], sequences: [4, 5, 6, 7, 8], response: [6, 0, 1, 1]),
        Case(name: "<= 5", request: [1, 2] + seqOperand(5), sequences: [4, 5], response: [6, 0, 1, 1]),
        Case(name: ">= 7", request: [1, 3] + seqOperand(7), sequences: [7, 8], response: [6, 0, 1, 1]),
        Case(name: ">= 9 finds nothing", request: [1, 3] + seqOperand(9), sequences: [], response: [6, 0, 1, 6]),
        Case(name: "<= 3 finds nothing", request: [1, 2] + seqOperand(3), sequences: [], response: [6, 0, 1, 6]),
        Case(name: "within 5...7", request: [1, 4, 1, 5, 0, 7, 0], sequences: [5, 6, 7], response: [6, 0, 1, 1]),
        Case(name: "within 7...5 is an invalid operand", request: [1, 4, 1, 7, 0, 5, 0], sequences: [], response: [6, 0, 1, 5]),
        Case(name: "first", request: [1, 5], sequences: [4], response: [6, 0, 1, 1]),
        Case(name: "last", request: [1, 6], sequences: [8], response: [6, 0, 1, 1]),
        Case(name: "null operator is invalid", request: [1, 0], sequences: [], response: [6, 0, 1, 3]),
        Case(name: "missing operator is invalid", request: [1], sequences: [], response: [6, 0, 1, 3]),
        Case(name: "reserved operator is not supported", request: [1, 7], sequences: [], response: [6, 0, 1, 4]),
        Case(name: "all with an operand", request: [1, 1, 1, 0, 0], sequences: [], response: [6, 0, 1, 5]),
        Case(name: ">= without a filter", request: [1, 3], sequences: [], response: [6, 0, 1, 5]),
        Case(name: ">= with a short value", request: [1, 3, 1, 4], sequences: [], response: [6, 0, 1, 5]),
        Case(name: "unknown filter type", request: [1, 3, 3, 4, 0], sequences: [], response: [6, 0, 1, 9]),
        Case(name: "user-facing time >= 11:00 (base 10:00 + 60)", request: [1, 3, 2, 0xE8, 0x07, 3, 5, 11, 0, 0],
             sequences: [6, 7, 8], response: [6, 0, 1, 1]),
        Case(name: "user-facing time within 10:00...11:00", request: [1, 4, 2, 0xE8, 0x07, 3, 5, 10, 0, 0, 0xE8, 0x07, 3, 5, 11, 0, 0],
             sequences: [5, 6], response: [6, 0, 1, 1]),
        Case(name: "invalid time operand", request: [1, 3, 2, 0xE8, 0x07, 13, 5, 11, 0, 0], sequences: [], response: [6, 0, 1, 5]),
        Case(name: "delete is not supported", request: [2, 1], sequences: [], response: [6, 0, 2, 2]),
        Case(name: "reserved op code", request: [9, 1], sequences: [], response: [6, 0, 9, 2]),
        Case(name: "response op code written by a client", request: [6, 0, 1, 1], sequences: [], response: [6, 0, 6, 2]),
        Case(name: "abort with an operator", request: [3, 1], sequences: [], response: [6, 0, 3, 3]),
        Case(name: "abort when idle", request: [3, 0], sequences: [], response: [6, 0, 3, 1]),
        Case(name: "count all", request: [4, 1], sequences: [], response: [5, 0, 5, 0]),
        Case(name: "count >= 6", request: [4, 3] + seqOperand(6), sequences: [], response: [5, 0, 3, 0]),
        Case(name: "count >= 100 is zero", request: [4, 3] + seqOperand(100), sequences: [], response: [5, 0, 0, 0]),
        Case(name: "count with null operator", request: [4, 0], sequences: [], response: [6, 0, 4, 3]),
    ]

    @Test(arguments: cases) func racpRequest(_ c: Case) throws {
        var s = subscribedServer()
        try s.writeRACP(c.request)
        let out = drain(&s)
        #expect(try sequences(out) == c.sequences)
        #expect(racp(out) == [c.response])
    }

    @Test func emptyMeterAnswersNoRecordsFound() throws {
        var s = subscribedServer(MeterDescription(address: "C0:26:DA:00:00:02", name: "m", passkey: 1))
        try s.writeRACP([0x01, 0x01])
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x06])])
        try s.writeRACP([0x01, 0x06])
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [0x06, 0x00, 0x01, 0x06])])
    }

    @Test func zeroCountAsNoRecordsQuirk() throws {
        var s = subscribedServer(sampleMeter(faults: MeterFaults(zeroCountAsNoRecords: true)))
        try s.writeRACP([0x04, 0x03] + seqOperand(100))
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [0x06, 0x00, 0x04, 0x06])])
    }

    @Test func timeFilterRefusedWhenNotSupported() throws {
        var meter = sampleMeter()
        meter.supportsTimeFilter = false
        var s = subscribedServer(meter)
        try s.writeRACP([1, 3, 2, 0xE8, 0x07, 3, 5, 11, 0, 0])
        #expect(racp(drain(&s)) == [[6, 0, 1, 9]])
    }

    @Test func dropLinkAfterNRecordsOnceThenBehaves() throws {
        var s = subscribedServer(sampleMeter(faults: MeterFaults(dropLinkAfter: 2, dropLinkTimes: 1)))
        try s.writeRACP([0x01, 0x01])
        let first = drain(&s)
        #expect(try sequences(first) == [4, 5])
        #expect(first.last == .dropLink)
        #expect(racp(first).isEmpty)
        s.linkDown()
        #expect(s.subscriptions.isEmpty)
        s.setSubscribed(.glucoseMeasurement, true)
        s.setSubscribed(.recordAccessControlPoint, true)
        try s.writeRACP([0x01, 0x03] + seqOperand(6))
        let second = drain(&s)
        #expect(try sequences(second) == [6, 7, 8])
        #expect(racp(second) == [[6, 0, 1, 1]])
    }

    @Test func procedureNotCompletedAfterNRecords() throws {
        var s = subscribedServer(sampleMeter(faults: MeterFaults(failProcedureAfter: 3)))
        try s.writeRACP([0x01, 0x01])
        let out = drain(&s)
        #expect(try sequences(out) == [4, 5, 6])
        #expect(racp(out) == [[6, 0, 1, 8]])
    }

    @Test func malformedNotifications() throws {
        var faults = MeterFaults()
        faults.malformed = [5: .truncated, 7: .invalidTime, 8: .strayContext]
        var s = subscribedServer(sampleMeter(faults: faults))
        try s.writeRACP([0x01, 0x01])
        let out = drain(&s)
        let measurements = out.compactMap { o -> [UInt8]? in
            if case .value(.glucoseMeasurement, let b) = o { return b }
            return nil
        }
        #expect(measurements.count == 5)
        #expect(throws: GlucoseDecodingError.self) { try GlucoseMeasurement(bytes: measurements[1]) }
        #expect(measurements[1].count == 5)
        #expect(throws: GlucoseDecodingError.self) { try GlucoseMeasurement(bytes: measurements[3]) }
        let contexts = try out.compactMap { o -> UInt16? in
            if case .value(.glucoseMeasurementContext, let b) = o { return try GlucoseMeasurementContext(bytes: b).sequenceNumber }
            return nil
        }
        #expect(contexts == [6, 8 ^ 0x8000])
        #expect(racp(out) == [[6, 0, 1, 1]])
    }

    @Test func unsubscribingMidProcedureSkipsItsValues() throws {
        var s = subscribedServer()
        try s.writeRACP([0x01, 0x01])
        _ = s.nextOutput()
        s.setSubscribed(.glucoseMeasurement, false)
        s.setSubscribed(.glucoseMeasurementContext, false)
        #expect(drain(&s) == [.value(.recordAccessControlPoint, [6, 0, 1, 1])])
    }

    @Test func linkDownEndsTheProcedureSilently() throws {
        var s = subscribedServer()
        try s.writeRACP([0x01, 0x01])
        s.linkDown()
        #expect(s.nextOutput() == nil)
        #expect(!s.isProcedureRunning)
    }

    @Test func newRecordsContinueTheSequence() throws {
        var s = subscribedServer()
        let added = s.addGeneratedRecord(minutesLater: 30)
        let r = try #require(added)
        #expect(r.sequenceNumber == 9)
        #expect(r.baseTime == time(12, 30))
        #expect(r.timeOffset == 60)
        try s.writeRACP([0x01, 0x06])
        #expect(try sequences(drain(&s)) == [9])
    }

    @Test func sequenceNumbersWrapAt65535() {
        let meter = MeterDescription(address: "C0:26:DA:00:00:03", name: "m", passkey: 1, records: [
            MeterRecord(sequenceNumber: 65535, baseTime: time(8), result: .mgPerDL(100)),
        ])
        var s = GlucoseServer(meter: meter)
        #expect(s.nextSequenceNumber == 0)
        #expect(s.addGeneratedRecord()?.sequenceNumber == 0)
    }

    @Test func aCounterThatWrappedKeepsItsStorageOrder() throws {
        // 65532...65535, then 0...3, times in order, listed as stored.
        let listed = (0..<8).map { i in
            MeterRecord(sequenceNumber: UInt16(65532) &+ UInt16(i), baseTime: time(8 + i), result: .mgPerDL(100))
        }
        var s = subscribedServer(MeterDescription(address: "C0:26:DA:00:00:04", name: "m", passkey: 1, records: listed))
        #expect(s.meter.records.map(\.sequenceNumber) == [65532, 65533, 65534, 65535, 0, 1, 2, 3])
        #expect(s.meter.lastSequenceNumber == 3)
        // The next record is 4, and it is the newest, past the ones from before the wrap.
        #expect(s.nextSequenceNumber == 4)
        #expect(s.addGeneratedRecord()?.sequenceNumber == 4)
        #expect(s.addGeneratedRecord()?.sequenceNumber == 5)
        try s.writeRACP([0x01, 0x01])
        #expect(try sequences(drain(&s)) == [65532, 65533, 65534, 65535, 0, 1, 2, 3, 4, 5])
        // The last record is the most recent one, not the largest number.
        try s.writeRACP([0x01, 0x06])
        #expect(try sequences(drain(&s)) == [5])
        try s.writeRACP([0x01, 0x05])
        #expect(try sequences(drain(&s)) == [65532])
        // ">= 4" compares numbers: the records from before the wrap match too, in storage order.
        try s.writeRACP([0x01, 0x03] + seqOperand(4))
        #expect(try sequences(drain(&s)) == [65532, 65533, 65534, 65535, 4, 5])
        try s.writeRACP([0x01, 0x04, 0x01, 0x04, 0x00, 0x02, 0x80])
        #expect(try sequences(drain(&s)) == [4, 5])
        // Any other order is a list to sort: a wrap is only read into one that goes round the top.
        let shuffled = MeterDescription(address: "C0:26:DA:00:00:05", name: "m", passkey: 1, records: [listed[2], listed[0], listed[1]])
        #expect(shuffled.records.map(\.sequenceNumber) == [65532, 65533, 65534])
        let low = [5, 3, 4].map { MeterRecord(sequenceNumber: UInt16($0), baseTime: time($0), result: .mgPerDL(100)) }
        #expect(MeterDescription(address: "C0:26:DA:00:00:06", name: "m", passkey: 1, records: low).records.map(\.sequenceNumber) == [3, 4, 5])
    }

    @Test func reads() {
        var meter = sampleMeter()
        meter.features = 0x0420
        meter.deviceInformation = DeviceInformation(manufacturer: "Roche", model: "Guide", serial: "92534026466")
        let s = GlucoseServer(meter: meter)
        #expect(s.read(.glucoseFeature) == [0x20, 0x04])
        #expect(s.read(.serialNumber) == Array("92534026466".utf8))
        #expect(s.read(.softwareRevision) == nil)
        #expect(s.read(.glucoseMeasurement) == nil)
    }
}
