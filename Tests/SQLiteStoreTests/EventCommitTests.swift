import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// The event log's two cheaper commits: a meter's bookkeeping with its event in one transaction, and an
/// event whose loss to a power cut is harmless committed without a sync of its own.
@Suite struct EventCommitTests {
    static func meter(name: String) -> MeterInfo {
        var info = MeterInfo(address: meterA, timeZone: "UTC")
        info.name = name
        return info
    }

    @Test func theMeterRowAndItsEventCommitTogether() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        try await store.saveMeter(Self.meter(name: "first"))
        let finished = GatewayEvent(at: 5, kind: .downloadFinished, meterAddress: meterA, message: "completed: 2 new")
        try await store.saveMeter(Self.meter(name: "second"), logging: finished)
        #expect(try await store.meter(meterA)?.name == "second")
        #expect(try await store.recentEvents(meterAddress: meterA) == [finished])
        await store.close()

        // The reopened file has both.
        let reopened = try SQLiteStore(path: dir.database)
        #expect(try await reopened.meter(meterA)?.name == "second")
        #expect(try await reopened.recentEvents(meterAddress: meterA) == [finished])
        await reopened.close()
    }

    @Test func aRefusedMeterRowTakesItsEventWithIt() async throws {
        let store = try SQLiteStore(path: ":memory:")
        try await store.saveMeter(Self.meter(name: "first"))
        await store.injectFaults([SQLiteFault(.step, sqlContains: "INSERT INTO meter", code: .full)])
        await #expect(throws: SQLiteError.self) {
            try await store.saveMeter(Self.meter(name: "second"), logging: GatewayEvent(at: 5, kind: .downloadFinished, meterAddress: meterA, message: "x"))
        }
        #expect(try await store.meter(meterA)?.name == "first")
        #expect(try await store.recentEvents(meterAddress: meterA).isEmpty)
        // A refused event takes the row with it too.
        await store.injectFaults([SQLiteFault(.step, sqlContains: "INSERT INTO event", code: .full)])
        await #expect(throws: SQLiteError.self) {
            try await store.saveMeter(Self.meter(name: "third"), logging: GatewayEvent(at: 6, kind: .downloadFinished, meterAddress: meterA, message: "y"))
        }
        #expect(try await store.meter(meterA)?.name == "first")
        #expect(try await store.recentEvents(meterAddress: meterA).isEmpty)
        await store.close()
    }

    /// `logWithoutSync` commits with `synchronous = NORMAL`; every commit after it finds FULL again,
    /// also after one that failed, and the event survives closing and reopening.
    @Test func anEventWithoutSyncLeavesTheConnectionAtFullSync() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        let connected = GatewayEvent(at: 1, kind: .connected, meterAddress: meterA, message: "connected for download")
        try await store.logWithoutSync(connected)
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.injectFaults([SQLiteFault(.step, sqlContains: "INSERT INTO event", code: .full)])
        await #expect(throws: SQLiteError.self) {
            try await store.logWithoutSync(GatewayEvent(at: 2, kind: .connected, meterAddress: meterA, message: "lost"))
        }
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.close()
        let reopened = try SQLiteStore(path: dir.database)
        #expect(try await reopened.recentEvents(meterAddress: meterA) == [connected])
        await reopened.close()
    }

    /// A connection that cannot be set back to FULL is closed, never left committing without fsync.
    @Test func anEventWithoutSyncThatCannotRestoreFullSyncClosesTheConnection() async throws {
        let store = try SQLiteStore(path: ":memory:")
        await store.injectFaults([SQLiteFault(.step, sqlContains: "synchronous = FULL", code: .ioError)])
        await #expect(throws: SQLiteError.self) {
            try await store.logWithoutSync(GatewayEvent(at: 1, kind: .connected, meterAddress: meterA, message: "connected"))
        }
        let error = await #expect(throws: SQLiteStoreError.self) { try await store.saveMeter(Self.meter(name: "x")) }
        #expect(error == .closed)
    }
}
