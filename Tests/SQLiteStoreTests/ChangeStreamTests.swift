import GatewayCore
import Testing
@testable import SQLiteStore

/// The store's change stream: what its own commits changed, in commit order; other connections' commits
/// are found by asking.
@Suite(.timeLimit(.minutes(1))) struct ChangeStreamTests {
    private let builders: [any OutboxBodyBuilder] = [StubBuilder(destination: .nightscout)]

    /// Everything a stream holds once its store is closed (closing ends it).
    private func drained(_ stream: AsyncStream<StoreChange>) async -> [StoreChange] {
        var seen: [StoreChange] = []
        for await change in stream { seen.append(change) }
        return seen
    }

    @Test func eachCommitEmitsWhatItChangedAndWritesThatChangeNothingEmitNothing() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: builders)
        let changes = store.changes()

        try await store.saveMeter(MeterInfo(address: meterA, timeZone: "Europe/Berlin"))
        try await store.insert([sampleReading(sequence: 1), sampleReading(sequence: 2)])
        // Already stored: nothing new.
        #expect(try await store.insert([sampleReading(sequence: 1)]) == 0)
        let claimed = try await store.claimPending(.nightscout, limit: 10)
        #expect(claimed.count == 2)
        // An empty queue: nothing claimed.
        #expect(try await store.claimPending(.nightscout, limit: 10).isEmpty)
        try await store.acknowledge(claimed.map(\.id), at: 1_000)
        try await store.acknowledge([], at: 1_000)
        try await store.log(GatewayEvent(at: 1_000, kind: .downloadFinished, meterAddress: meterA, message: "2 new"))
        // A commit that fails rolls back: nothing to report.
        await store.injectFaults([SQLiteFault(.step, sqlContains: "COMMIT", code: ResultCode(rawValue: 778))])
        await #expect(throws: SQLiteError.self) { try await store.insert([sampleReading(sequence: 3)]) }
        #expect(try await store.readingCount() == 2)
        try await store.saveDestinationState(DestinationState(destination: .nightscout, state: .ok))
        try await store.resetHighestSequence(meterA, to: 1)
        #expect(try await store.unpair(meterB, at: 2_000) == false)
        await store.close()

        #expect(await drained(changes) == [.meters, .readings, .uploads, .uploads, .events, .uploads, .meters])
    }

    @Test func everyStreamSeesTheCommitsAfterItOpensAndEndsWithTheStore() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: builders)
        let early = store.changes()
        try await store.insert([sampleReading(sequence: 1)])
        let late = store.changes()
        _ = try await store.requeueInFlight()
        _ = try await store.claimPending(.nightscout, limit: 1)
        _ = try await store.requeueInFlight()
        await store.close()
        #expect(await drained(early) == [.readings, .uploads, .uploads])
        #expect(await drained(late) == [.uploads, .uploads])
        // Opened after the close: ends at once.
        #expect(await drained(store.changes()) == [])
    }

    @Test func anotherConnectionsCommitIsNotOnTheStreamAndIsSeenWhenAsked() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let daemon = try SQLiteStore(path: dir.database, builders: builders)
        let other = try SQLiteStore(path: dir.database, builders: builders)
        let daemonChanges = daemon.changes()
        let otherChanges = other.changes()

        try await other.insert([sampleReading(sequence: 1)])
        #expect(try await daemon.changedByOtherProcesses() == true)
        let totals = try await daemon.readingTotals()
        #expect(totals.stored == 1 && totals.excluded == 0)
        try await daemon.log(GatewayEvent(at: 1_000, kind: .connected, meterAddress: meterA, message: "connected"))
        #expect(try await daemon.changedByOtherProcesses() == false)
        await other.close()
        await daemon.close()

        #expect(await drained(daemonChanges) == [.events])
        #expect(await drained(otherChanges) == [.readings])
    }
}
