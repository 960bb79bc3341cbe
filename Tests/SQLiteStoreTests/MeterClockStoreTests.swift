import GatewayCore
import GlucoseProfile
import Testing
@testable import SQLiteStore

/// The meter's clock history and where each reading was placed, as the store keeps them.
@Suite struct MeterClockStoreTests {
    @Test func theHistoryComesBackOldestFirstWithTheGatewaysWrites() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        let read = ClockSync(at: 1_729_600_000_000, offsetSeconds: 7800, highestSequence: 4)
        let written = ClockSync(at: 1_729_600_000_000, offsetSeconds: 7200, highestSequence: 4, setByGateway: true)
        let later = ClockSync(at: 1_730_200_000_000, offsetSeconds: 7201, highestSequence: nil)
        try await store.rememberClock(meterA, [later])
        try await store.rememberClock(meterA, [read, written])
        #expect(try await store.clockHistory(meterA) == [read, written, later])
        #expect(try await store.clockHistory(meterB).isEmpty)
        await store.close()
    }

    @Test func aReadingsFirstPlacementStays() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        let time = testWallTime("2024-10-20T08:00:00")
        let first = ReadingClock(sequence: 3, userFacingTime: time, offsetSeconds: 7200, since: 1_729_400_000_000, reason: "same clock")
        let uncertain = ReadingClock(sequence: 4, userFacingTime: time, offsetSeconds: nil, since: nil, reason: "clock changed between syncs",
                                     candidates: [1_729_400_000_000, 1_729_403_600_000])
        try await store.rememberPlacements(meterA, [first, uncertain])
        var other = first
        other.offsetSeconds = 3600
        try await store.rememberPlacements(meterA, [other])
        #expect(try await store.placements(meterA) == [first, uncertain])
        await store.close()
    }
}
