import GatewayCore
import GlucoseProfile
import SQLiteStore
import Support
import Testing
import TestSupport
@testable import Gateway
@testable import Meters
import SQLiteStoreTestSupport

/// Two different records a meter sends with the same number and the same time.
@Suite("Same number, same time, different records", .timeLimit(.minutes(1)))
struct SameNumberSameTimeTests {
    typealias H = MeterHandlingTests

    static func record(_ seq: UInt16, mgdl: Int16) -> FakeRecord {
        FakeRecord(measurement: GlucoseMeasurement(sequenceNumber: seq, baseTime: H.time(5, 5), timeOffset: 0,
                                                   concentration: .value(mantissa: mgdl, exponent: -5), unit: .kilogramPerLitre,
                                                   type: 1, sampleLocation: 1))
    }

    @Test func onAProfileMeterNeitherIsDroppedSilently() async throws {
        let meter = FakeMeter(address: H.address, script: FakeMeterScript(records: [Self.record(1, mgdl: 100), Self.record(1, mgdl: 250)]))
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: H.address, timeZone: "UTC"))
        let report = try await H.Fixture(meter: meter, store: store).download()
        let stored = try await store.readings(ReadingFilter(meterAddress: H.address)).map { $0.reading.mgdl }
        #expect(stored.count == 2 || report.duplicates == 0, "stored \(stored), duplicates \(report.duplicates)")
    }

    @Test func onANewestFirstMeterNeitherIsDroppedSilently() async throws {
        let f = try await H.taiDoc([])
        f.meter.update { $0.records = [Self.record(0, mgdl: 100), Self.record(0, mgdl: 250)] }
        let report = try await f.download()
        let stored = try await f.stored()
        #expect(stored.count == 2 || report.duplicates == 0, "stored \(stored), duplicates \(report.duplicates)")
    }

    /// A download into a store with an upload destination, its log kept.
    static func download(_ meter: FakeMeter, _ store: SQLiteStore, sink: MemoryLogSink) async throws -> DownloadReport {
        let at = H.millis(H.time(28, 12))
        return try await MeterDownload(store: store, options: DownloadOptions(), logger: Logger(label: "test", minimumLevel: .debug, sink: sink),
                                       now: { at })
            .run(link: meter.connect(), meter: MeterInfo(address: meter.address, timeZone: "UTC"))
    }

    static func store() async throws -> SQLiteStore {
        let store = try SQLiteStore(path: ":memory:", builders: [FutureReleaseTests.InstantBuilder()])
        try await store.saveMeter(MeterInfo(address: H.address, timeZone: "UTC"))
        return store
    }

    /// What both paths must show after the two records: a conflict, no duplicate, the stored reading
    /// withheld with nothing queued, one warning and one event, neither with a glucose value.
    static func expectWithheld(_ report: DownloadReport, _ store: SQLiteStore, _ sink: MemoryLogSink) async throws {
        #expect(report.conflicts == 1)
        #expect(report.duplicates == 0)
        #expect(report.stored == 1)
        let stored = try await store.readings(ReadingFilter(meterAddress: H.address))
        #expect(stored.map(\.reading.exclusion) == [.conflictingRecord])
        #expect(try await store.outboxItems(DestinationName(rawValue: "test")).isEmpty)
        #expect(try await store.conflictingRecordsForTesting(H.address).count == 1)
        let events = try await store.recentEvents(limit: 20, kind: .conflictingRecord)
        #expect(events.count == 1)
        let lines = sink.entries.filter { $0.contains("other bytes") }
        #expect(lines.count == 1)
        for text in lines + events.map(\.message) {
            #expect(text.contains("withheld from upload"), "\(text)")
            #expect(!text.contains("100") && !text.contains("250") && !text.contains("mg"), "\(text)")
        }
    }

    @Test func onAProfileMeterTheStoredOneIsWithheldAndTheOtherKept() async throws {
        let meter = FakeMeter(address: H.address, script: FakeMeterScript(records: [Self.record(1, mgdl: 100), Self.record(1, mgdl: 250)]))
        let store = try await Self.store()
        let sink = MemoryLogSink()
        let report = try await Self.download(meter, store, sink: sink)
        try await Self.expectWithheld(report, store, sink)
    }

    @Test func onANewestFirstMeterTheStoredOneIsWithheldAndTheOtherKept() async throws {
        var script = FakeMeterScript(records: [Self.record(0, mgdl: 100), Self.record(0, mgdl: 250)])
        script.manufacturer = "TaiDoc Technology"
        script.model = "DM30b"
        script.firmware = "1.2.4"
        script.characteristics.remove(.glucoseMeasurementContext)
        let meter = FakeMeter(address: H.address, script: script)
        let store = try await Self.store()
        let sink = MemoryLogSink()
        let report = try await Self.download(meter, store, sink: sink)
        try await Self.expectWithheld(report, store, sink)
        // The next download brings both again: nothing more is kept, nothing is queued.
        let again = try await Self.download(meter, store, sink: MemoryLogSink())
        #expect(again.conflicts == 0)
        #expect(try await store.conflictingRecordsForTesting(H.address).count == 1)
        #expect(try await store.outboxItems(DestinationName(rawValue: "test")).isEmpty)
    }

    @Test func anExactResendOnAProfileMeterIsADuplicate() async throws {
        let meter = FakeMeter(address: H.address, script: FakeMeterScript(records: [Self.record(1, mgdl: 100), Self.record(1, mgdl: 100)]))
        let store = try await Self.store()
        let report = try await Self.download(meter, store, sink: MemoryLogSink())
        #expect(report.conflicts == 0 && report.stored == 1, "\(report)")
        #expect(report.stored + report.duplicates == report.received, "\(report)")
        #expect(try await store.readings(ReadingFilter(meterAddress: H.address)).map(\.reading.exclusion) == [nil])
        #expect(try await store.outboxItems(DestinationName(rawValue: "test")).count == 1)
    }
}
