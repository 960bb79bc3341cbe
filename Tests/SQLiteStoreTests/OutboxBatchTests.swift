import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// Claims, acknowledgements and releases change a whole batch of outbox rows in one statement each; what
/// they change must be exactly what the row-by-row rules say.
@Suite struct OutboxBatchTests {
    /// Two destinations, one row each per reading: ids 1, 3, 5... are Nightscout's, 2, 4, 6... FHIR's.
    private func filledStore(readings: Int) async throws -> SQLiteStore {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)],
                                    now: { 5000 })
        try await store.insert((1...readings).map { sampleReading(sequence: $0) })
        return store
    }

    private func row(_ rows: [OutboxRowForTesting], _ id: Int64) -> OutboxRowForTesting? {
        rows.first { $0.id == id }
    }

    @Test func aClaimMarksExactlyTheRowsItReturnsAmongOtherStatesAndDestinations() async throws {
        let store = try await filledStore(readings: 8)
        let first = try await store.claimPending(.nightscout, limit: 3)
        #expect(first.map(\.id) == [1, 3, 5])
        try await store.acknowledge([1], at: 100)
        try await store.quarantine(3, answer: "400 Bad Request")
        try await store.release([5])
        let before = try await store.outboxRowsForTesting()

        // Pending Nightscout rows now: 5 (released), 7, 9, 11, 13, 15; 1 and 3 lie below them, settled.
        let claimed = try await store.claimPending(.nightscout, limit: 2)
        #expect(claimed.map(\.id) == [5, 7])
        #expect(claimed.map(\.state) == [.inFlight, .inFlight])
        #expect(claimed.map(\.attempts) == [1, 0])
        let after = try await store.outboxRowsForTesting()
        for old in before {
            let new = try #require(row(after, old.id))
            if [5, 7].contains(old.id) {
                #expect(new.state == "in_flight" && new.claimedAt == 5000 && new.attempts == old.attempts, "row \(old.id)")
            } else {
                #expect(new == old, "row \(old.id) changed")
            }
        }
        #expect(row(after, 1)?.state == "acknowledged" && row(after, 3)?.state == "quarantined")
        #expect(row(after, 9)?.state == "pending" && row(after, 2)?.state == "pending" && row(after, 2)?.claimedAt == nil)

        // The rest of the queue, then nothing; FHIR's queue is whole.
        #expect(try await store.claimPending(.nightscout, limit: 10).map(\.id) == [9, 11, 13, 15])
        #expect(try await store.claimPending(.nightscout, limit: 10).isEmpty)
        #expect(try await store.claimPending(.fhir, limit: 100).map(\.id) == [2, 4, 6, 8, 10, 12, 14, 16])
        await store.close()
    }

    @Test func acknowledgingTakesEveryStateButAcknowledgedWhoseFirstTimeStays() async throws {
        let store = try await filledStore(readings: 4)
        // Nightscout rows: 1 acknowledged at 100, 3 quarantined, 5 in flight, 7 pending.
        _ = try await store.claimPending(.nightscout, limit: 3)
        try await store.acknowledge([1], at: 100)
        try await store.quarantine(3, answer: "422")
        let before = try await store.outboxRowsForTesting()

        // Duplicates and ids that do not exist change nothing more.
        try await store.acknowledge([7, 5, 3, 1, 5, 999_999], at: 200)
        let after = try await store.outboxRowsForTesting()
        #expect(row(after, 1)?.acknowledgedAt == 100)
        for id: Int64 in [3, 5, 7] {
            #expect(row(after, id)?.state == "acknowledged" && row(after, id)?.acknowledgedAt == 200, "row \(id)")
            #expect(row(after, id)?.attempts == row(before, id)?.attempts, "row \(id)")
        }
        #expect(row(after, 3)?.quarantinedAt == row(before, 3)?.quarantinedAt)
        // FHIR's rows, never named, are untouched.
        #expect(after.filter { $0.destination == "fhir" } == before.filter { $0.destination == "fhir" })
        #expect(after.count == 8)
        await store.close()
    }

    @Test func releasingTouchesInFlightRowsOnly() async throws {
        let store = try await filledStore(readings: 5)
        // Nightscout rows: 1 acknowledged, 3 quarantined, 5 and 7 in flight, 9 pending.
        _ = try await store.claimPending(.nightscout, limit: 4)
        try await store.acknowledge([1], at: 100)
        try await store.quarantine(3, answer: "422")
        let before = try await store.outboxRowsForTesting()

        try await store.release([1, 3, 5, 9, 5, 2, 999_999])
        let after = try await store.outboxRowsForTesting()
        #expect(row(after, 5)?.state == "pending")
        #expect(row(after, 5)?.attempts == (row(before, 5)?.attempts ?? -1) + 1)
        for old in before where old.id != 5 {
            #expect(row(after, old.id) == old, "row \(old.id) changed")
        }
        #expect(row(after, 7)?.state == "in_flight")
        await store.close()
    }

    @Test func aLargeBatchIsAcknowledgedAndReleasedWhole() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout)], now: { 5000 })
        try await store.insert((1...1500).map { sampleReading(sequence: $0) })
        let claimed = try await store.claimPending(.nightscout, limit: 1500)
        #expect(claimed.count == 1500)
        try await store.release(Array(claimed.map(\.id).prefix(700)))
        #expect(try await store.counts(.nightscout) == OutboxCounts(pending: 700, inFlight: 800, oldestUnsent: 5000))
        try await store.acknowledge(claimed.map(\.id), at: 9000)
        #expect(try await store.counts(.nightscout) == OutboxCounts(acknowledged: 1500))
        await store.close()
    }

    @Test func theBatchStatementsReachTheirRowsThroughAnIndex() async throws {
        let store = try await filledStore(readings: 3)
        let plans = try await store.outboxUpdatePlansForTesting()
        let inFlight = try #require(plans["in_flight"])
        #expect(inFlight.contains { $0.contains("outbox_pending") }, "plan: \(inFlight)")
        // Requeueing what was left in flight and the unsent counts read the indexes of the rows not yet
        // acknowledged, never the whole table (a SCAN of a partial index reads only its rows).
        let requeue = try #require(plans["requeue"])
        #expect(requeue == ["SCAN outbox USING INDEX outbox_held"], "requeue: \(requeue)")
        let counts = try #require(plans["unsent counts"])
        #expect(counts.contains("SCAN outbox USING INDEX outbox_pending") && counts.contains("SCAN outbox USING INDEX outbox_held")
                && !counts.contains("SCAN outbox"), "unsent counts: \(counts)")
        for name in ["acknowledge", "release"] {
            let plan = try #require(plans[name])
            #expect(plan.contains { $0.contains("SEARCH outbox USING INTEGER PRIMARY KEY") }, "\(name): \(plan)")
            #expect(!plan.contains { $0.contains("SCAN outbox") }, "\(name): \(plan)")
        }
        await store.close()
    }
}
