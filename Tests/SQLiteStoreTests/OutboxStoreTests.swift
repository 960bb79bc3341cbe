import GatewayCore
import Synchronization
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

@Suite struct OutboxStoreTests {
    private func filledStore(_ path: String, readings: Int) async throws -> SQLiteStore {
        let store = try SQLiteStore(path: path, builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)], now: { 5000 })
        try await store.insert((1...readings).map { sampleReading(sequence: $0) })
        return store
    }

    @Test func claimTakesOldestPendingRowsOfOneDestination() async throws {
        let store = try await filledStore(":memory:", readings: 5)
        let first = try await store.claimPending(.nightscout, limit: 3)
        #expect(first.map(\.state) == [.inFlight, .inFlight, .inFlight])
        #expect(first.map(\.destination) == [.nightscout, .nightscout, .nightscout])
        let firstReadings = try await first.asyncMap { try await store.reading(id: $0.readingID)?.reading.sequence }
        #expect(firstReadings == [1, 2, 3])
        let second = try await store.claimPending(.nightscout, limit: 3)
        #expect(second.count == 2)
        #expect(try await store.claimPending(.nightscout, limit: 3).isEmpty)
        let counts = try await store.counts(.nightscout)
        #expect(counts == OutboxCounts(pending: 0, inFlight: 5, acknowledged: 0, quarantined: 0, oldestUnsent: 5000))
        // The other destination's queue is untouched.
        #expect(try await store.counts(.fhir).pending == 5)
        await store.close()
    }

    /// A claim's items carry the destination asked for: rows of a name with the same characters in
    /// other bytes (a canonically equivalent name) are another queue, neither claimed nor relabelled.
    @Test func claimedItemsCarryTheirQueuesOwnDestination() async throws {
        let composed = DestinationName(rawValue: "ns-\u{E9}")
        let decomposed = DestinationName(rawValue: "ns-e\u{301}")
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: composed), StubBuilder(destination: decomposed)],
                                    now: { 5000 })
        try await store.insert((1...3).map { sampleReading(sequence: $0) })
        let first = try await store.claimPending(composed, limit: 10)
        #expect(first.count == 3)
        #expect(first.allSatisfy { Array($0.destination.rawValue.utf8) == Array(composed.rawValue.utf8) && $0.state == .inFlight })
        #expect(try await store.counts(decomposed).pending == 3)
        let second = try await store.claimPending(decomposed, limit: 10)
        #expect(second.count == 3)
        #expect(second.allSatisfy { Array($0.destination.rawValue.utf8) == Array(decomposed.rawValue.utf8) && $0.state == .inFlight })
        #expect(Set(first.map(\.id)).isDisjoint(with: second.map(\.id)))
        await store.close()
    }

    @Test func acknowledgeReleaseAndCounts() async throws {
        let store = try await filledStore(":memory:", readings: 4)
        let items = try await store.claimPending(.nightscout, limit: 4)
        try await store.acknowledge([items[0].id, items[1].id], at: 9000)
        try await store.release([items[2].id, items[3].id])
        let counts = try await store.counts(.nightscout)
        #expect(counts.acknowledged == 2)
        #expect(counts.pending == 2)
        #expect(counts.inFlight == 0)
        let again = try await store.claimPending(.nightscout, limit: 10)
        #expect(again.map(\.id) == [items[2].id, items[3].id])
        #expect(again.map(\.attempts) == [1, 1])
        // Retries carry exactly the bytes and key frozen at insert.
        #expect(again.map(\.body) == [items[2].body, items[3].body])
        #expect(again.map(\.key) == [items[2].key, items[3].key])
        try await store.acknowledge(again.map(\.id), at: 9100)
        #expect(try await store.counts(.nightscout) == OutboxCounts(acknowledged: 4))
        await store.close()
    }

    @Test func countsTakeEachStateAndTheOldestUnsentOfOneDestination() async throws {
        final class Clock: Sendable { let now = Mutex<UnixMillis>(1000) }
        let clock = Clock()
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)],
                                    now: { clock.now.withLock { $0 } })
        // Queued at 1000, 2000, ... 6000: the oldest two end acknowledged and quarantined, so the oldest
        // unsent is the third (pending or in flight), whatever the other destination holds.
        for sequence in 1...6 {
            clock.now.withLock { $0 = UnixMillis(sequence) * 1000 }
            try await store.insert([sampleReading(sequence: sequence)])
        }
        #expect(try await store.counts(.nightscout) == OutboxCounts(pending: 6, oldestUnsent: 1000))
        let items = try await store.claimPending(.nightscout, limit: 4)
        try await store.acknowledge([items[0].id], at: 9000)
        try await store.quarantine(items[1].id, answer: "400")
        try await store.release([items[3].id])
        #expect(try await store.counts(.nightscout)
                == OutboxCounts(pending: 3, inFlight: 1, acknowledged: 1, quarantined: 1, oldestUnsent: 3000))
        // The unsent counts are the same but for the acknowledged rows, which they do not read.
        #expect(try await store.unsentCounts(.nightscout) == OutboxCounts(pending: 3, inFlight: 1, quarantined: 1, oldestUnsent: 3000))
        #expect(try await store.counts(.fhir) == OutboxCounts(pending: 6, oldestUnsent: 1000))
        #expect(try await store.unsentCounts(.fhir) == OutboxCounts(pending: 6, oldestUnsent: 1000))
        let rest = try await store.claimPending(.nightscout, limit: 10)
        try await store.acknowledge(rest.map(\.id) + [items[2].id], at: 9100)
        #expect(try await store.counts(.nightscout) == OutboxCounts(acknowledged: 5, quarantined: 1))
        #expect(try await store.unsentCounts(.nightscout) == OutboxCounts(quarantined: 1))
        #expect(try await store.unsentCounts(DestinationName(rawValue: "elsewhere")) == OutboxCounts())
        await store.close()
    }

    @Test func quarantineKeepsTheAnswerAndRedriveRequeues() async throws {
        let store = try await filledStore(":memory:", readings: 3)
        let items = try await store.claimPending(.fhir, limit: 3)
        try await store.quarantine(items[1].id, answer: "422 Unprocessable Entity: invalid code")
        try await store.release([items[0].id, items[2].id])
        #expect(try await store.counts(.fhir).quarantined == 1)
        let aside = try await store.quarantined(.fhir)
        #expect(aside.map(\.item.id) == [items[1].id])
        #expect(aside.first?.answer == "422 Unprocessable Entity: invalid code")
        // A quarantined row is never claimed again on its own.
        let claimed = try await store.claimPending(.fhir, limit: 10)
        #expect(claimed.map(\.id) == [items[0].id, items[2].id])
        #expect(try await store.redrive(.fhir) == 1)
        #expect(try await store.redrive(.fhir) == 0)
        let redriven = try await store.claimPending(.fhir, limit: 10)
        #expect(redriven.map(\.id) == [items[1].id])
        #expect(redriven.first?.body == items[1].body)
        await store.close()
    }

    @Test func inFlightRowsReturnToPendingAfterARestart() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await filledStore(dir.database, readings: 3)
        let claimed = try await store.claimPending(.nightscout, limit: 2)
        #expect(claimed.count == 2)
        await store.close()

        let reopened = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        #expect(try await reopened.counts(.nightscout).inFlight == 2)
        #expect(try await reopened.requeueInFlight() == 2)
        #expect(try await reopened.counts(.nightscout) == OutboxCounts(pending: 3, oldestUnsent: 5000))
        let again = try await reopened.claimPending(.nightscout, limit: 10)
        #expect(again.map(\.id) == claimed.map(\.id) + [again[2].id])
        #expect(again.prefix(2).map(\.body) == claimed.map(\.body))
        await reopened.close()
    }

    /// The claim commits with `synchronous = NORMAL`; every other commit (the acknowledgement, the
    /// readings) must find the connection at FULL again, also after a claim that failed.
    @Test func aClaimLeavesTheConnectionAtFullSync() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await filledStore(dir.database, readings: 3)
        #expect(try await store.claimPending(.nightscout, limit: 2).count == 2)
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.injectFaults([SQLiteFault(.step, sqlContains: "COMMIT", code: ResultCode(rawValue: 778))])  // SQLITE_IOERR_WRITE
        await #expect(throws: SQLiteError.self) { try await store.claimPending(.nightscout, limit: 2) }
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        #expect(try await store.counts(.nightscout).pending == 1)
        #expect(try await store.claimPending(.nightscout, limit: 2).count == 1)
        #expect(try await store.claimPending(.nightscout, limit: 2).isEmpty)
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.close()
    }

    /// An acknowledgement without a sync of its own asks for `synchronous = NORMAL` for its commit (a
    /// synced one never does) and leaves the connection at FULL, also after a commit that failed; what it
    /// committed is there after closing and reopening.
    @Test func anUnsyncedAcknowledgementLeavesTheConnectionAtFullSync() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try await filledStore(dir.database, readings: 3)
        let items = try await store.claimPending(.nightscout, limit: 3)
        try #require(items.count == 3)
        await store.injectFaults([SQLiteFault(.step, sqlContains: "synchronous = NORMAL", code: .ioError)])
        try await store.acknowledge([items[0].id], at: 7)
        await #expect(throws: SQLiteError.self) { try await store.acknowledge([items[1].id], at: 8, synced: false) }
        #expect(try await store.counts(.nightscout) == OutboxCounts(inFlight: 2, acknowledged: 1, oldestUnsent: 5000))
        try await store.acknowledge([items[1].id], at: 8, synced: false)
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.injectFaults([SQLiteFault(.step, sqlContains: "COMMIT", code: ResultCode(rawValue: 778))])  // SQLITE_IOERR_WRITE
        await #expect(throws: SQLiteError.self) { try await store.acknowledge([items[2].id], at: 9, synced: false) }
        #expect(try await store.pragmaValuesForTesting()["synchronous"] == "2")
        await store.close()

        let reopened = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        #expect(try await reopened.counts(.nightscout) == OutboxCounts(inFlight: 1, acknowledged: 2, oldestUnsent: 5000))
        await reopened.close()
    }

    /// A connection that cannot be set back to FULL after a claim is closed, never left committing
    /// without fsync.
    @Test func aClaimThatCannotRestoreFullSyncClosesTheConnection() async throws {
        let store = try await filledStore(":memory:", readings: 2)
        await store.injectFaults([SQLiteFault(.step, sqlContains: "synchronous = FULL", code: .ioError)])
        await #expect(throws: SQLiteError.self) { try await store.claimPending(.nightscout, limit: 2) }
        let error = await #expect(throws: SQLiteStoreError.self) { try await store.acknowledge([1], at: 1) }
        #expect(error == .closed)
    }

    @Test func nothingIsDeletedWhenAcknowledged() async throws {
        let store = try await filledStore(":memory:", readings: 2)
        let items = try await store.claimPending(.nightscout, limit: 2)
        try await store.acknowledge(items.map(\.id), at: 1)
        #expect(try await store.outboxItems(.nightscout).count == 2)
        #expect(try await store.readingCount() == 2)
        await store.close()
    }

    @Test func claimingReadsThePendingIndexNotTheHistory() async throws {
        let store = try await filledStore(":memory:", readings: 3)
        let plan = try await store.claimQueryPlanForTesting()
        #expect(plan.contains { $0.contains("outbox_pending") }, "plan: \(plan)")
        #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "no sort: \(plan)")
        await store.close()
    }

    @Test func destinationStateRoundTrips() async throws {
        let store = try SQLiteStore(path: ":memory:")
        #expect(try await store.destinationState(.nightscout) == nil)
        var state = DestinationState(destination: .nightscout, state: .retrying)
        state.lastErrorCode = 1002
        state.lastErrorMessage = "NETWORK_TIMEOUT"
        state.lastErrorAt = 77
        try await store.saveDestinationState(state)
        #expect(try await store.destinationState(.nightscout) == state)
        state.state = .ok
        state.lastErrorCode = nil
        state.lastSuccessAt = 99
        try await store.saveDestinationState(state)
        #expect(try await store.destinationState(.nightscout) == state)
        #expect(try await store.destinations() == [.nightscout])
        await store.close()
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var out: [T] = []
        for element in self { out.append(try await transform(element)) }
        return out
    }
}
