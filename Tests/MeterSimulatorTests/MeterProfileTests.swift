import GatewayCore
import GlucoseProfile
@testable import MeterSimulator
import Testing

private func server(_ meter: MeterDescription, subscribe: [GATTUUID] = [.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint]) -> GlucoseServer {
    var s = GlucoseServer(meter: meter)
    for uuid in subscribe { s.setSubscribed(uuid, true) }
    return s
}

private func drain(_ s: inout GlucoseServer) -> [GlucoseServer.Output] {
    var out: [GlucoseServer.Output] = []
    while let o = s.nextOutput() { out.append(o) }
    return out
}

private func measurements(_ outputs: [GlucoseServer.Output]) throws -> [GlucoseMeasurement] {
    try outputs.compactMap { o -> GlucoseMeasurement? in
        guard case .value(.glucoseMeasurement, let bytes) = o else { return nil }
        return try GlucoseMeasurement(bytes: bytes, options: .keepingInvalidBaseTime)
    }
}

private func racp(_ outputs: [GlucoseServer.Output]) -> [[UInt8]] {
    outputs.compactMap { o in
        guard case .value(.recordAccessControlPoint, let bytes) = o else { return nil }
        return bytes
    }
}

private func at(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int) -> GlucoseDateTime {
    GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: 0)!
}

@Suite struct MeterProfileTests {
    @Test func everyProfileIsListedOnceWithEvidenceAndDistinctAddress() {
        let names = MeterProfile.names
        #expect(names == ["contour-next-one", "accu-chek-guide", "accu-chek-instant", "caresens", "fora-tng",
                          "taidoc-reversed", "generic-gls"])
        #expect(Set(MeterProfile.all.map(\.meter.address)).count == names.count)
        for p in MeterProfile.all {
            #expect(!p.summary.isEmpty && !p.evidence.isEmpty, "\(p.name)")
            #expect(MeterProfile.named(p.name)?.meter == p.meter)
            #expect(!p.meter.records.isEmpty, "\(p.name)")
            let seqs = p.meter.records.map(\.sequenceNumber)
            #expect(Set(seqs).count == seqs.count, "\(p.name) repeats a sequence number")
        }
        #expect(MeterProfile.named("contour") == nil)
    }

    @Test func contourDeviceInformationCarriesNULBytes() {
        let s = server(MeterProfile.contourNextOne.meter)
        #expect(s.read(.manufacturerName) == Array("Ascensia Diabetes Care".utf8) + [0, 0])
        #expect(s.read(.modelNumber) == Array("Contour Next One".utf8) + [0])
    }

    @Test func contourRACPStaysSilentWithoutIndicationsAndAnswersWithThem() throws {
        var s = server(MeterProfile.contourNextOne.meter, subscribe: [.glucoseMeasurement, .glucoseMeasurementContext])
        try s.writeRACP(RACPRequest.reportNumberAll.encoded())   // accepted: no ATT error
        #expect(drain(&s).isEmpty)
        #expect(!s.isProcedureRunning)
        s.setSubscribed(.recordAccessControlPoint, true)
        try s.writeRACP(RACPRequest.reportNumberAll.encoded())
        #expect(racp(drain(&s)) == [RACPResponse.numberOfRecords(12).encoded()])
    }

    @Test func contourSendsItsWholeHistoryForAllRecordsAndOnlyNewerForTheFilter() throws {
        var s = server(MeterProfile.contourNextOne.meter)
        try s.writeRACP(RACPRequest.reportAll.encoded())
        #expect(try measurements(drain(&s)).map(\.sequenceNumber) == Array(1...12))
        try s.writeRACP(RACPRequest.reportFrom(sequence: 12).encoded())
        #expect(try measurements(drain(&s)).map(\.sequenceNumber) == [12])
    }

    @Test func accuChekInstantRefusesRACPWithoutIndicationsAndHasNoContext() {
        let meter = MeterProfile.accuChekInstant.meter
        #expect(!meter.hasContextCharacteristic)
        #expect(GATTLayout(meter: meter).characteristic(.glucoseMeasurementContext) == nil)
        var s = server(meter, subscribe: [.glucoseMeasurement])
        #expect(throws: GlucoseServer.ATTError.cccdImproperlyConfigured) { try s.writeRACP(RACPRequest.reportAll.encoded()) }
    }

    struct RangeCase: CustomTestStringConvertible, Sendable {
        var profile: String
        var lowest: Double
        var testDescription: String { profile }
    }

    @Test(arguments: [RangeCase(profile: "accu-chek-guide", lowest: 20), RangeCase(profile: "accu-chek-instant", lowest: 10)])
    func accuChekRangeEndsAreValuesAndBeyondAreLOAndHI(_ c: RangeCase) throws {
        let meter = try #require(MeterProfile.named(c.profile)).meter
        var s = server(meter)
        try s.writeRACP(RACPRequest.reportFrom(sequence: 11).encoded())
        let m = try measurements(drain(&s))
        #expect(m.map(\.sequenceNumber) == [11, 12, 13, 14])
        #expect(m[0].mgPerDL == c.lowest)
        #expect(m[1].concentration == .negativeInfinity)
        #expect(m[1].sensorStatus?.contains(.resultTooLow) == true)
        #expect(m[2].concentration == .positiveInfinity)
        #expect(m[3].mgPerDL == 600)
        #expect(m.allSatisfy { $0.timeOffset == 60 })
    }

    @Test func careSensSendsMonth13OnRecord5AndAKetoneContext() throws {
        var s = server(MeterProfile.careSens.meter)
        try s.writeRACP(RACPRequest.reportAll.encoded())
        let out = drain(&s)
        let m = try measurements(out)
        let five = try #require(m.first { $0.sequenceNumber == 5 })
        #expect(five.baseTime.month == 13)
        #expect(m.filter { $0.baseTime.month == 13 }.count == 1)
        let contexts = try out.compactMap { o -> GlucoseMeasurementContext? in
            guard case .value(.glucoseMeasurementContext, let b) = o else { return nil }
            return try GlucoseMeasurementContext(bytes: b)
        }
        #expect(contexts.map(\.sequenceNumber) == [8])
        #expect(contexts.first?.meal == 6)
    }

    @Test func foraAddsABogusHIDated2037AfterItsRecordsAndHasNoManufacturer() throws {
        let meter = MeterProfile.foraTNG.meter
        #expect(meter.deviceInformation.manufacturer == nil)
        #expect(meter.name.hasPrefix("TNG VOICE"))
        var s = server(meter)
        try s.writeRACP(RACPRequest.reportRecords(.lastRecord).encoded())
        let last = try #require(try measurements(drain(&s)).first)
        #expect(last.sequenceNumber == 21)
        #expect(last.baseTime.year == 2037)
        #expect(last.concentration == .positiveInfinity)
    }

    @Test func taiDocNumbersNewestFirstAndANewRecordShiftsEveryNumber() throws {
        let meter = MeterProfile.taiDocReversed.meter
        #expect(meter.quirks.numbering == .newestFirst)
        #expect(!meter.hasContextCharacteristic)
        var s = server(meter)
        try s.writeRACP(RACPRequest.reportAll.encoded())
        let before = try measurements(drain(&s))
        #expect(before.map(\.sequenceNumber) == Array(0...9))
        // Ascending numbers are descending times: 0 is the newest (07:30 + 9 x 4 h).
        #expect(before.first?.baseTime == at(2024, 3, 6, 19, 30))
        #expect(before.last?.baseTime == at(2024, 3, 5, 7, 30))

        // "first record" is the newest, "last record" the oldest.
        try s.writeRACP(RACPRequest.reportRecords(.firstRecord).encoded())
        #expect(try measurements(drain(&s)).map(\.baseTime) == [at(2024, 3, 6, 19, 30)])

        let generated = s.addGeneratedRecord(minutesLater: 60)
        let added = try #require(generated)
        #expect(added.sequenceNumber == 0)
        #expect(added.baseTime == at(2024, 3, 6, 20, 30))
        try s.writeRACP(RACPRequest.reportAll.encoded())
        let after = try measurements(drain(&s))
        #expect(after.map(\.sequenceNumber) == Array(0...10))
        // Every earlier record kept its time and value under a number one higher.
        for old in before {
            let moved = try #require(after.first { $0.sequenceNumber == old.sequenceNumber + 1 })
            #expect(moved.baseTime == old.baseTime && moved.mgPerDL == old.mgPerDL)
        }
        // "greater than or equal 10" now selects the oldest record only: what was 9.
        try s.writeRACP(RACPRequest.reportFrom(sequence: 10).encoded())
        #expect(try measurements(drain(&s)).map(\.baseTime) == [at(2024, 3, 5, 7, 30)])
        #expect(s.nextSequenceNumber == 0)
    }

    @Test func meterFileProfileIsTheBaseAndKeysChangeIt() throws {
        let m = try MeterFile.parse(#"{"profile": "taidoc-reversed", "address": "aa:bb:cc:dd:ee:ff", "generate": {"count": 3}}"#)
        #expect(m.address == "AA:BB:CC:DD:EE:FF")
        #expect(m.name == MeterProfile.taiDocReversed.meter.name)
        #expect(m.quirks.numbering == .newestFirst)
        #expect(m.deviceInformation.firmware == "1.2.4")
        #expect(m.records.map(\.sequenceNumber) == [0, 1, 2])
        #expect(m.records.first?.baseTime == at(2024, 3, 5, 15, 30))   // 0 is the newest of the three

        let plain = try MeterFile.parse(#"{"profile": "contour-next-one"}"#)
        #expect(plain == MeterProfile.contourNextOne.meter)

        #expect(throws: MeterFileError.self) { try MeterFile.parse(#"{"profile": "nope"}"#) }
        #expect(throws: MeterFileError("address", "is required")) { try MeterFile.parse(#"{"name": "x", "pin": "123456"}"#) }
    }

    @Test(arguments: MeterProfile.names)
    func everyProfileSurvivesTheMeterFileFormat(_ name: String) throws {
        let meter = try #require(MeterProfile.named(name)).meter
        var again = try MeterFile.parse(MeterFile.json(meter).compactText)
        again.clock = meter.clock   // the written format leaves the clock out
        #expect(again == meter)
    }

    @Test func clockKindsFollowTheEvidence() {
        #expect(MeterProfile.contourNextOne.meter.clock.kind == .currentTime)
        #expect(MeterProfile.accuChekGuide.meter.clock.kind == .glsDateTime)
        #expect(MeterProfile.accuChekInstant.meter.clock.kind == .glsDateTime)
        #expect(MeterProfile.careSens.meter.clock.kind == .vendor)
        #expect(MeterProfile.taiDocReversed.meter.clock.kind == .none)
        #expect(MeterProfile.genericGLS.meter.clock.kind == .currentTime)
    }

    @Test func quirksInAMeterFile() throws {
        let m = try MeterFile.parse(#"{"address": "C0:26:DA:01:02:03", "name": "x", "pin": "123456", "quirks": {"numbering": "newest-first", "racpWithoutIndications": "silent"}}"#)
        #expect(m.quirks == MeterQuirks(numbering: .newestFirst, racpWithoutIndications: .silent))
        #expect(throws: MeterFileError("quirks.numbering", "must be \"oldest-first\" or \"newest-first\"")) {
            try MeterFile.parse(#"{"address": "C0:26:DA:01:02:03", "name": "x", "pin": "123456", "quirks": {"numbering": "backwards"}}"#)
        }
    }
}
