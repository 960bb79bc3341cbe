import GatewayCore
import Testing
@testable import SQLiteStore

/// Values the meter sent that the codec could not decode: kept as sent with the reason, once per meter,
/// characteristic and bytes, never a reading and never queued for upload.
@Suite struct UndecodableValueTests {
    static func truncated(_ meter: String = meterA, receivedAt: UnixMillis = 1000) -> UndecodableValue {
        UndecodableValue(meterAddress: meter, characteristic: .glucoseMeasurement, raw: [0x03, 0x07, 0x00, 0xE8, 0x07],
                         reason: "Base Time month: value too short at byte 5 (needs 1 byte, 0 left)", receivedAt: receivedAt)
    }

    static func store(_ path: String = ":memory:") throws -> SQLiteStore {
        try SQLiteStore(path: path, builders: [StubBuilder(destination: .nightscout)], now: { 5000 })
    }

    @Test func theSameBytesFromTheSameMeterAreKeptOnce() async throws {
        let store = try Self.store()
        #expect(try await store.keepUndecodable([Self.truncated()]) == 1)
        // A re-download delivers the same bytes again, later: nothing new, the first arrival stays.
        #expect(try await store.keepUndecodable([Self.truncated(receivedAt: 9000)]) == 0)
        // Within one batch too.
        #expect(try await store.keepUndecodable([Self.truncated(receivedAt: 9000), Self.truncated(receivedAt: 9001)]) == 0)
        let kept = try await store.undecodableValues()
        #expect(kept.count == 1)
        let v = try #require(kept.first?.value)
        #expect(v == Self.truncated())
        #expect(v.sequence == 7)
        #expect(v.reason.contains("value too short at byte 5"))
        #expect(v.characteristic == .glucoseMeasurement)
    }

    @Test func otherBytesAnotherCharacteristicOrAnotherMeterAreEachKept() async throws {
        let store = try Self.store()
        var context = Self.truncated()
        context.characteristic = .glucoseMeasurementContext
        var other = Self.truncated()
        other.raw.append(0x01)
        let short = UndecodableValue(meterAddress: meterA, characteristic: .glucoseMeasurement, raw: [0x01], reason: "x", receivedAt: 2000)
        #expect(try await store.keepUndecodable([Self.truncated(), context, other, Self.truncated(meterB), short]) == 5)
        let kept = try await store.undecodableValues(ReadingFilter(meterAddress: meterA))
        #expect(kept.count == 4)
        // Too short to carry a sequence number: none is made up.
        #expect(kept.first { $0.value.raw == [0x01] }?.value.sequence == nil)
        #expect(try await store.undecodableValues(ReadingFilter(since: 1500)).map(\.value.raw) == [[0x01]])
        #expect(try await store.undecodableValues(ReadingFilter(limit: 2)).count == 2)
    }

    @Test func theyAreNeitherReadingsNorUploads() async throws {
        let store = try Self.store()
        try await store.insert([sampleReading(sequence: 1)])
        #expect(try await store.keepUndecodable([Self.truncated()]) == 1)
        #expect(try await store.readingCount() == 1)
        #expect(try await store.readingTotals().stored == 1)
        #expect(try await store.counts(.nightscout).pending == 1)
    }

    @Test func aMeterWithoutARowGetsOneAndTheFileStaysPrivate() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Self.store(dir.database)
        #expect(try await store.keepUndecodable([Self.truncated(meterB)]) == 1)
        #expect(try await store.meters().contains { $0.info.address == meterB })
        await store.close()
        #expect(fileMode(dir.database) == 0o600)
        // Kept across a reopen, and still only once.
        let again = try Self.store(dir.database)
        #expect(try await again.keepUndecodable([Self.truncated(meterB)]) == 0)
        #expect(try await again.undecodableValues().count == 1)
        await again.close()
    }
}
