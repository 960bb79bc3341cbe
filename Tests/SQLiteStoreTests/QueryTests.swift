import GatewayCore
import Testing
@testable import SQLiteStore

@Suite struct QueryTests {
    @Test func exportFiltersByMeterAndInstantInOrder() async throws {
        let store = try SQLiteStore(path: ":memory:")
        var late = sampleReading(meter: meterB, sequence: 1)
        late.instant = 3_000
        var early = sampleReading(meter: meterA, sequence: 2)
        early.instant = 1_000
        var middle = sampleReading(meter: meterA, sequence: 3)
        middle.instant = 2_000
        let unresolved = sampleReading(meter: meterA, sequence: 4, instant: nil, exclusion: .timeUnresolved)
        try await store.insert([late, early, middle, unresolved])
        #expect(try await store.readings().map(\.reading.sequence) == [4, 2, 3, 1])
        #expect(try await store.readings(ReadingFilter(meterAddress: meterA)).map(\.reading.sequence) == [4, 2, 3])
        #expect(try await store.readings(ReadingFilter(since: 2_000)).map(\.reading.sequence) == [3, 1])
        #expect(try await store.readings(ReadingFilter(meterAddress: meterA, since: 1_500)).map(\.reading.sequence) == [3])
        #expect(try await store.readings(ReadingFilter(since: 0, until: 3_000, limit: 1)).map(\.reading.sequence) == [2])
        await store.close()
    }

    @Test func unpairKeepsReadingsAndPairingAgainRestoresTheMeter() async throws {
        let store = try SQLiteStore(path: ":memory:")
        var info = MeterInfo(address: meterA, timeZone: "Europe/Berlin")
        info.serial = "SN123"
        info.pairedAt = 10
        try await store.saveMeter(info)
        try await store.insert([sampleReading(sequence: 1)])
        #expect(try await store.unpair(meterA, at: 20))
        #expect(try await store.unpair(meterA, at: 21) == false)
        #expect(try await store.meter(meterA) == nil)
        #expect(try await store.meters().isEmpty)
        let all = try await store.meters(includingUnpaired: true)
        #expect(all.map(\.unpairedAt) == [20])
        #expect(try await store.readingCount(meterAddress: meterA) == 1)
        try await store.saveMeter(info)
        #expect(try await store.meter(meterA)?.serial == "SN123")
        await store.close()
    }

    @Test func syncBookkeeping() async throws {
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(MeterInfo(address: meterA, timeZone: "UTC"))
        try await store.recordSeen(meterA, at: 500)
        try await store.recordSync(meterA, at: 400, clockSkewSeconds: -93)
        var meter = try #require(try await store.meter(meterA))
        #expect(meter.lastSync == 400)
        #expect(meter.lastSeen == 500)
        #expect(meter.lastClockSkewSeconds == -93)
        try await store.recordSync(meterA, at: 600, clockSkewSeconds: nil)
        meter = try #require(try await store.meter(meterA))
        #expect(meter.lastSync == 600)
        #expect(meter.lastSeen == 600)
        #expect(meter.lastClockSkewSeconds == -93)
        await store.close()
    }

    @Test func recentEventsNewestFirst() async throws {
        let store = try SQLiteStore(path: ":memory:")
        try await store.log(GatewayEvent(at: 1, kind: .connected, meterAddress: meterA, message: "connected"))
        try await store.log(GatewayEvent(at: 2, kind: .network, code: 1001, message: "NETWORK_NOT_CONNECTED"))
        try await store.log(GatewayEvent(at: 3, kind: .clockSkew, meterAddress: meterA, code: 120, message: "meter clock ahead"))
        let events = try await store.recentEvents(limit: 2)
        #expect(events.map(\.at) == [3, 2])
        #expect(events.last == GatewayEvent(at: 2, kind: .network, code: 1001, message: "NETWORK_NOT_CONNECTED"))
        #expect(try await store.recentEvents(meterAddress: meterA).map(\.kind) == [.clockSkew, .connected])
        #expect(try await store.recentEvents(kind: .network).count == 1)
        await store.close()
    }
}
