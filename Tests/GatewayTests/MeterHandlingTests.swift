import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// Per-meter handling: chosen from the identity a meter shows, applied by the download.
@Suite("Meter handling", .timeLimit(.minutes(1)))
struct MeterHandlingTests {
    static let address = "AA:BB:CC:DD:EE:07"

    static func time(_ day: Int, _ hour: Int, _ minute: Int = 0, year: Int = 2026, month: Int = 11) -> GlucoseDateTime {
        guard let t = GlucoseDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: 0) else {
            preconditionFailure("not a time")
        }
        return t
    }

    static func millis(_ t: GlucoseDateTime) -> UnixMillis { t.naiveSeconds * 1000 }

    /// A meter's chronological memory: (time, mg/dL), oldest first.
    typealias Memory = [(GlucoseDateTime, Int)]

    /// The records a TaiDoc 1.2.4 sends for `memory`: number 0 is the newest.
    static func newestFirst(_ memory: Memory) -> [FakeRecord] {
        let n = memory.count
        return memory.enumerated().map { i, entry in
            FakeRecord(measurement: GlucoseMeasurement(
                sequenceNumber: UInt16(n - 1 - i), baseTime: entry.0, timeOffset: 0,
                concentration: .value(mantissa: Int16(entry.1), exponent: -5), unit: .kilogramPerLitre,
                type: 1, sampleLocation: 1))
        }.sorted { $0.sequence < $1.sequence }
    }

    static func memory(_ count: Int, from start: Int = 0) -> Memory {
        (0..<count).map { i in (time(1 + (start + i) / 24, (start + i) % 24), 90 + start + i) }
    }

    struct Fixture {
        let meter: FakeMeter
        let store: SQLiteStore
        var name: String? = nil

        func download(at now: GlucoseDateTime = MeterHandlingTests.time(28, 12)) async throws -> DownloadReport {
            var info = MeterInfo(address: meter.address, timeZone: "UTC")
            info.name = name
            let at = MeterHandlingTests.millis(now)
            return try await MeterDownload(store: store, options: DownloadOptions(), logger: .silent, now: { at })
                .run(link: meter.connect(), meter: info)
        }

        /// (time, mg/dL) of every stored reading, oldest first.
        func stored() async throws -> [(String, Double?)] {
            try await store.readings(ReadingFilter(meterAddress: meter.address))
                .map { ($0.reading.userFacingTime.isoString, $0.reading.mgdl) }
                .sorted { $0.0 < $1.0 }
        }

        func positions() async throws -> [Int] {
            try await store.readings(ReadingFilter(meterAddress: meter.address)).map(\.reading.sequence).sorted()
        }

        func writes() -> [String] { meter.callLog.filter { $0.hasPrefix("write ") } }
    }

    static func taiDoc(_ memory: Memory, firmware: String = "1.2.4") async throws -> Fixture {
        var script = FakeMeterScript(records: newestFirst(memory))
        script.manufacturer = "TaiDoc Technology"
        script.model = "DM30b"
        script.firmware = firmware
        script.characteristics.remove(.glucoseMeasurementContext)
        let meter = FakeMeter(address: address, script: script)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: address, timeZone: "UTC"))
        return Fixture(meter: meter, store: store)
    }

    static func expected(_ memory: Memory) -> [(String, Double?)] {
        memory.map { ($0.0.isoString, Double($0.1)) }
    }

    static func same(_ a: [(String, Double?)], _ b: [(String, Double?)]) -> Bool {
        a.count == b.count && zip(a, b).allSatisfy { $0.0 == $1.0 && $0.1 == $1.1 }
    }

    // MARK: - Choosing

    struct ChoiceCase: CustomTestStringConvertible, Sendable {
        var label: String
        var name: String?
        var manufacturer: String?
        var firmware: String?
        var raw: [String: [UInt8]] = [:]
        var expected: [MeterHandling.Kind]
        var testDescription: String { label }
    }

    @Test(arguments: [
        ChoiceCase(label: "TaiDoc 1.2.4", manufacturer: "TaiDoc Technology", firmware: "1.2.4", expected: [.reversedSequence]),
        ChoiceCase(label: "TaiDoc v1.2.4", manufacturer: "TAIDOC", firmware: "V1.2.4", expected: [.reversedSequence]),
        ChoiceCase(label: "TaiDoc other firmware", manufacturer: "TaiDoc Technology", firmware: "1.3.0", expected: []),
        ChoiceCase(label: "TaiDoc no firmware", manufacturer: "TaiDoc Technology", firmware: nil, expected: []),
        ChoiceCase(label: "firmware 1.2.4 of another maker", manufacturer: "Roche", firmware: "1.2.4", expected: []),
        ChoiceCase(label: "Fora without manufacturer", name: "TNG VOICE 3A1F", expected: [.memoryFullMarker]),
        ChoiceCase(label: "Fora with manufacturer", name: "TNG VOICE", manufacturer: "ForaCare", expected: [.memoryFullMarker]),
        ChoiceCase(label: "TNG name of another maker", name: "TNG", manufacturer: "Roche", expected: []),
        ChoiceCase(label: "Contour with NUL bytes", manufacturer: "Ascensia Diabetes Care",
                   raw: ["manufacturer": Array("Ascensia Diabetes Care\u{0}".utf8)], expected: [.identityStringsCleaned]),
        ChoiceCase(label: "spec meter", name: "meter+1", manufacturer: "Simulated Meters", firmware: "1.0", expected: []),
    ])
    func handlingIsChosenFromTheStoredIdentity(_ c: ChoiceCase) {
        var m = MeterInfo(address: Self.address, timeZone: "UTC")
        m.name = c.name
        m.manufacturer = c.manufacturer
        m.firmware = c.firmware
        m.rawIdentity = c.raw
        #expect(m.handling.kinds == c.expected)
        #expect(m.handling.description == (c.expected.isEmpty ? "none" : c.expected.map(\.rawValue).joined(separator: ", ")))
    }

    struct CleanCase: CustomTestStringConvertible, Sendable {
        var bytes: [UInt8]
        var text: String?
        var changed: Bool
        var testDescription: String { hexString(bytes) }
    }

    @Test(arguments: [
        CleanCase(bytes: Array("Roche".utf8), text: "Roche", changed: false),
        CleanCase(bytes: Array("Ascensia Diabetes Care".utf8) + [0, 0], text: "Ascensia Diabetes Care", changed: true),
        CleanCase(bytes: Array("Ascensia".utf8) + [0] + Array("Diabetes Care".utf8), text: "AscensiaDiabetes Care", changed: true),
        CleanCase(bytes: [0x01] + Array("A\tB\n".utf8) + [0x7F, 0xC2, 0x85], text: "AB", changed: true),
        CleanCase(bytes: [0, 0, 0], text: nil, changed: true),
        CleanCase(bytes: Array("  Model Number ".utf8), text: "Model Number", changed: true),
        CleanCase(bytes: Array("Accu-Chek® Guide".utf8), text: "Accu-Chek® Guide", changed: false),
    ])
    func identityTextLosesNULAndControlCharacters(_ c: CleanCase) {
        let (text, changed) = IdentityText.clean(c.bytes)
        #expect(text == c.text)
        #expect(changed == c.changed)
    }

    // MARK: - Reversed sequence numbers

    @Test func aMeterThatNumbersNewestFirstIsDownloadedOnceAndThenOnlyForNewRecords() async throws {
        var mem = Self.memory(5)
        let f = try await Self.taiDoc(mem)
        let first = try await f.download()
        #expect(first.stored == 5)
        #expect(Self.same(try await f.stored(), Self.expected(mem)))
        // Stored under their position from the oldest: the oldest is 0.
        #expect(try await f.positions() == [0, 1, 2, 3, 4])
        let oldest = try await f.store.readings(ReadingFilter(meterAddress: Self.address)).first { $0.reading.sequence == 0 }
        #expect(oldest?.reading.userFacingTime == mem[0].0)
        // The number the meter sent (4 for its oldest) stays in the raw bytes.
        #expect(oldest.map { Array($0.reading.rawMeasurement[1...2]) } == [4, 0])

        // Two new measurements: every number moves up by two.
        mem += [(Self.time(2, 9), 201), (Self.time(2, 10), 202)]
        let records = Self.newestFirst(mem)
        f.meter.update { $0.records = records }
        let before = f.writes().count
        let second = try await f.download()
        #expect(second.stored == 2)
        #expect(second.received == 3)   // the two new ones and the newest stored one
        #expect(Array(f.writes().dropFirst(before)) == ["write 04 01", "write 01 02 01 02 00"])
        #expect(Self.same(try await f.stored(), Self.expected(mem)))
        #expect(try await f.positions() == [0, 1, 2, 3, 4, 5, 6])

        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(third.received == 1)
        #expect(Self.same(try await f.stored(), Self.expected(mem)))
        #expect(try await f.store.highestSequence(Self.address) == 6)
    }

    @Test func withoutTheHandlingTheSameMeterGetsDuplicatesAndMissesNewRecords() async throws {
        // What the profile's procedure does with such a meter (another firmware keeps the profile): shown so
        // that the handling above is known to matter.
        var mem = Self.memory(5)
        let f = try await Self.taiDoc(mem, firmware: "1.3.0")
        _ = try await f.download()
        mem += [(Self.time(2, 9), 201)]
        let records = Self.newestFirst(mem)
        f.meter.update { $0.records = records }
        _ = try await f.download()
        let stored = try await f.stored()
        #expect(!Self.same(stored, Self.expected(mem)))
        #expect(!stored.contains { $0.0 == Self.time(2, 9).isoString })
    }

    @Test func aWrappedMemoryIsDownloadedWholeAndEachReadingStaysOnce() async throws {
        var mem = Self.memory(6)
        let f = try await Self.taiDoc(mem)
        _ = try await f.download()
        // The memory is full: two new measurements push the two oldest out, the count stays 6.
        let all = mem + [(Self.time(3, 1), 211), (Self.time(3, 2), 212)]
        mem = Array(all.suffix(6))
        let records = Self.newestFirst(mem)
        f.meter.update { $0.records = records }
        let second = try await f.download()
        #expect(second.stored == 2)
        #expect(Self.same(try await f.stored(), Self.expected(all)))
        #expect(f.writes().contains("write 01 01"))   // the full report after the check failed
        let third = try await f.download()
        #expect(third.stored == 0)
        #expect(Self.same(try await f.stored(), Self.expected(all)))
    }

    @Test func aMeterClearedAndRefilledIsDownloadedWhole() async throws {
        let f = try await Self.taiDoc(Self.memory(6))
        _ = try await f.download()
        let fresh = Self.memory(3, from: 100)
        f.meter.update { $0.records = Self.newestFirst(fresh) }
        let second = try await f.download()
        #expect(second.stored == 3)
        #expect(try await f.stored().count == 9)
        #expect(try await f.store.highestSequence(Self.address) == 2)
        // Incremental again: one new record, and only it and the newest stored one are sent.
        f.meter.update { $0.records = Self.newestFirst(fresh + [(Self.time(20, 1), 150)]) }
        let third = try await f.download()
        #expect(third.stored == 1 && third.received == 2)
        #expect(try await f.stored().count == 10)
    }

    @Test func aReportCutShortStoresNothingAndTheNextSyncTakesEverythingOnce() async throws {
        let mem = Self.memory(8)
        let f = try await Self.taiDoc(mem)
        f.meter.update { $0.disconnectAfterRecords = 3 }
        let cut = try await f.download()
        #expect(cut.stored == 0)
        #expect(try await f.stored().isEmpty)
        #expect(try await f.store.highestSequence(Self.address) == nil)
        f.meter.update { $0.disconnectAfterRecords = nil }
        let again = try await f.download()
        #expect(again.stored == 8)
        #expect(Self.same(try await f.stored(), Self.expected(mem)))
    }

    @Test func aStrayIndicationDuringTheReportIsNotItsAnswer() async throws {
        let mem = Self.memory(4)
        let f = try await Self.taiDoc(mem)
        f.meter.update { $0.indicationBeforeReport = RACPResponse.numberOfRecords(4).encoded() }
        let report = try await f.download()
        #expect(report.stored == 4)
        #expect(Self.same(try await f.stored(), Self.expected(mem)))
        #expect(f.writes() == ["write 04 01", "write 01 01"])
    }

    /// While a report of such a meter is running, records wait for its end: the commit interval is no
    /// deadline then, so a silent meter wakes the session only at the inactivity timeout.
    @Test func aSilentReversedMeterWakesTheSessionOnlyAtTheTimeout() async throws {
        let f = try await Self.taiDoc(Self.memory(8))
        f.meter.update { $0.silentAfterRecords = 3 }
        let manual = ManualClock()
        let clock = MeterDownloadTests.CountingClock(clock: manual)
        let (progress, onProgress) = MeterDownloadTests.progressStream()
        let options = DownloadOptions(inactivityTimeout: .seconds(30))
        let meter = f.meter, store = f.store
        let task = Task {
            try await MeterDownload(store: store, options: options, logger: .silent, now: { MeterHandlingTests.millis(MeterHandlingTests.time(28, 12)) },
                                    clock: clock)
                .run(link: meter.connect(), meter: MeterInfo(address: meter.address, timeZone: "UTC"), progress: onProgress)
        }
        await MeterDownloadTests.received(3, on: progress)
        await MeterDownloadTests.timerSleeping(manual)
        let armed = clock.sleeps
        for _ in 0..<29 {
            manual.advance(by: .seconds(1))
            await Task.yield()
        }
        await MeterDownloadTests.timerSleeping(manual)
        #expect(clock.sleeps == armed)
        #expect(try await f.stored().isEmpty)
        manual.advance(by: .seconds(1))
        let result = try await task.value
        #expect(result.outcome == .timedOut)
        #expect(result.stored == 0)
        #expect(try await f.stored().isEmpty)
    }

    // MARK: - Identity strings

    @Test func nulAndControlCharactersAreStrippedAndTheBytesKept() async throws {
        var script = FakeMeterScript(records: [FakeRecord.glucose(1, mgdl: 111, at: Self.time(1, 8))])
        script.manufacturer = "Ascensia\u{0}Diabetes Care\u{0}\u{0}"
        script.model = "Contour Next One\u{0}"
        script.serial = "7012345"
        let meter = FakeMeter(address: Self.address, script: script)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: Self.address, timeZone: "UTC"))
        _ = try await Fixture(meter: meter, store: store).download()
        let row = try #require(try await store.meter(Self.address))
        #expect(row.manufacturer == "AscensiaDiabetes Care")
        #expect(row.model == "Contour Next One")
        #expect(row.serial == "7012345")
        #expect(row.rawIdentity == ["manufacturer": Array(script.manufacturer.utf8), "model": Array(script.model.utf8)])
        #expect(row.handling.kinds == [.identityStringsCleaned])
    }

    @Test func pairingStoresTheCleanedIdentityAndTheBytes() async throws {
        let (meter, radio, store) = MeterPairingTests.setup()
        meter.update { $0.manufacturer = "Ascensia Diabetes Care\u{0}"; $0.model = "Contour\u{1}" }
        let result = try await MeterPairing(radio: radio, store: store, logger: .silent)
            .run(address: meter.address, passkey: 654_321, timeZone: "UTC")
        #expect(result.meter.manufacturer == "Ascensia Diabetes Care")
        #expect(result.meter.model == "Contour")
        let row = try #require(try await store.meter(meter.address))
        #expect(row.rawIdentity["manufacturer"] == Array("Ascensia Diabetes Care\u{0}".utf8))
        #expect(row.rawIdentity["model"] == Array("Contour\u{1}".utf8))
        #expect(row.handling.contains(.identityStringsCleaned))
    }

    // MARK: - Fora memory-full marker

    static func foraRecords() -> [FakeRecord] {
        [
            FakeRecord(measurement: GlucoseMeasurement(sequenceNumber: 1, baseTime: time(1, 8), timeOffset: 0,
                                                       concentration: .value(mantissa: 104, exponent: -5),
                                                       unit: .kilogramPerLitre, type: 1, sampleLocation: 1)),
            FakeRecord(measurement: GlucoseMeasurement(sequenceNumber: 2, baseTime: time(1, 0, 0, year: 2037, month: 1), timeOffset: 0,
                                                       concentration: .positiveInfinity, unit: .kilogramPerLitre,
                                                       type: 1, sampleLocation: 1, sensorStatus: [.resultTooHigh])),
        ]
    }

    @Test func theFora2037RecordHasItsOwnExclusionThatNoSkewReleases() async throws {
        var script = FakeMeterScript(records: Self.foraRecords())
        script.manufacturer = ""   // Fora sends no manufacturer string: read as nothing
        script.model = "Model Number"
        let meter = FakeMeter(address: Self.address, script: script)
        let store = try SQLiteStore(path: ":memory:", builders: [FutureReleaseTests.InstantBuilder()])
        try await store.saveMeter(MeterInfo(address: Self.address, timeZone: "UTC"))
        var f = Fixture(meter: meter, store: store)
        f.name = "TNG VOICE 3A1F"
        _ = try await f.download()
        var bySeq: [Int: NewReading] = [:]
        for r in try await store.readings(ReadingFilter(meterAddress: Self.address)) { bySeq[r.reading.sequence] = r.reading }
        #expect(bySeq[1]?.exclusion == nil && bySeq[1]?.mgdl == 104)
        #expect(bySeq[2]?.exclusion == .memoryFullMarker)
        // A clock eleven years fast, as if to explain the record: nothing is released, nothing uploaded.
        meter.update { s in
            s.characteristics.insert(.currentTime)
            s.clockValue = FakeMeterScript.currentTime(Self.time(28, 12, year: 2037, month: 11))
        }
        let second = try await f.download()
        #expect(second.skew != nil)
        let after = try await store.readings(ReadingFilter(meterAddress: Self.address)).first { $0.reading.sequence == 2 }
        #expect(after?.reading.exclusion == .memoryFullMarker)
        #expect(try await store.outboxItems(DestinationName(rawValue: "test")).count == 1)
    }

    @Test func theSameRecordFromAnotherMeterStaysTimeInFuture() async throws {
        let meter = FakeMeter(address: Self.address, script: FakeMeterScript(records: Self.foraRecords()))
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: Self.address, timeZone: "UTC"))
        _ = try await Fixture(meter: meter, store: store).download()
        let r = try await store.readings(ReadingFilter(meterAddress: Self.address)).first { $0.reading.sequence == 2 }
        #expect(r?.reading.exclusion == .timeInFuture)
    }

    // MARK: - Month 13

    @Test func aMonth13BaseTimeStaysUnresolvedWhateverTheClockSays() async throws {
        var m = GlucoseMeasurement(sequenceNumber: 5, baseTime: Self.time(1, 8), timeOffset: 0,
                                   concentration: .value(mantissa: 104, exponent: -5), unit: .kilogramPerLitre,
                                   type: 1, sampleLocation: 1)
        m.timeOffset = 0
        var raw = m.encoded()
        raw[5] = 13   // the month byte of the base time
        var script = FakeMeterScript(records: [FakeRecord(rawMeasurement: raw, sequence: 5),
                                               FakeRecord.glucose(6, mgdl: 99, at: Self.time(1, 9))])
        script.manufacturer = "i-SENS"
        script.characteristics.insert(.currentTime)
        script.clockValue = FakeMeterScript.currentTime(Self.time(28, 13))   // an hour fast: a correction applies
        let meter = FakeMeter(address: Self.address, script: script)
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: Self.address, timeZone: "UTC"))
        let report = try await Fixture(meter: meter, store: store).download()
        #expect(report.stored == 2)
        let r = try #require(try await store.readings(ReadingFilter(meterAddress: Self.address)).first { $0.reading.sequence == 5 })
        #expect(r.reading.exclusion == .timeUnresolved)
        #expect(r.reading.instant == nil && r.reading.meterInstant == nil)
        #expect(r.reading.baseTime.month == 13)
        #expect(r.reading.rawMeasurement == raw)
    }
}
