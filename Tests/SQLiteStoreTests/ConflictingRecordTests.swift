#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// Two different records with one sequence number and one user-facing time: neither is a duplicate of
/// the other, and which is right cannot be told.
@Suite struct ConflictingRecordTests {
    /// `sampleReading` with other measurement bytes (another value), same key.
    static func other(_ r: NewReading) -> NewReading {
        var o = r
        o.rawMeasurement[9] ^= 0x5A
        o.mgdl = 250
        o.receivedAt = r.receivedAt + 1000
        return o
    }

    static func store(_ path: String = ":memory:") throws -> SQLiteStore {
        try SQLiteStore(path: path, builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)], now: { 5000 })
    }

    @Test func aPendingReadingIsWithheldAndItsOutboxRowsDropped() async throws {
        let store = try Self.store()
        let first = sampleReading(sequence: 7)
        #expect(try await store.insert([first, sampleReading(sequence: 8)]) == 2)
        #expect(try await store.counts(.nightscout).pending == 2)

        let outcome = try await store.insertReadings([Self.other(first)])
        #expect(outcome.inserted == 0)
        #expect(outcome.conflicts.count == 1)
        #expect(outcome.conflicts.first?.sequence == 7 && outcome.conflicts.first?.acknowledgedBy == [])

        let stored = try await store.readings(ReadingFilter(meterAddress: meterA))
        #expect(stored.count == 2)
        #expect(stored.first { $0.reading.sequence == 7 }?.reading.exclusion == .conflictingRecord)
        #expect(stored.first { $0.reading.sequence == 7 }?.reading.rawMeasurement == first.rawMeasurement)
        #expect(stored.first { $0.reading.sequence == 8 }?.reading.exclusion == nil)
        // Only the other reading is left to upload, to either destination.
        let queued = try await store.claimPending(.nightscout, limit: 10) + store.claimPending(.fhir, limit: 10)
        #expect(queued.count == 2)
        #expect(queued.allSatisfy { $0.readingID == stored.first { $0.reading.sequence == 8 }?.id })
        let kept = try await store.conflictingRecordsForTesting(meterA)
        #expect(kept.count == 1)
        #expect(kept.first?.sequence == 7 && kept.first?.measurement == Self.other(first).rawMeasurement)
        #expect(kept.first?.time == first.userFacingTime.isoString && kept.first?.context == nil)
    }

    @Test func bothInOneBatchTheFirstIsWithheld() async throws {
        let store = try Self.store()
        let first = sampleReading(sequence: 3)
        let outcome = try await store.insertReadings([first, Self.other(first)])
        #expect(outcome.inserted == 1 && outcome.conflicts.count == 1)
        #expect(try await store.counts(.nightscout).pending == 0)
        #expect(try await store.counts(.fhir).pending == 0)
        #expect(try await store.readings(ReadingFilter(meterAddress: meterA)).map(\.reading.exclusion) == [.conflictingRecord])
        #expect(try await store.readingTotals() == (stored: 1, excluded: 1))
    }

    @Test func anAcknowledgedReadingIsKeptAndSaysByWhom() async throws {
        let store = try Self.store()
        let first = sampleReading(sequence: 7)
        #expect(try await store.insert([first]) == 1)
        let sent = try await store.claimPending(.nightscout, limit: 10)
        try await store.acknowledge(sent.map(\.id), at: 6000)

        let outcome = try await store.insertReadings([Self.other(first)])
        #expect(outcome.conflicts.map(\.acknowledgedBy) == [["nightscout"]])
        let stored = try await store.readings(ReadingFilter(meterAddress: meterA))
        #expect(stored.map(\.reading.exclusion) == [nil])
        #expect(try await store.counts(.nightscout).acknowledged == 1)
        #expect(try await store.counts(.fhir).pending == 1)
        #expect(try await store.conflictingRecordsForTesting(meterA).count == 1)
    }

    @Test func anExactResendStaysADuplicate() async throws {
        let store = try Self.store()
        var first = sampleReading(sequence: 7, context: ReadingContext())
        #expect(try await store.insert([first]) == 1)
        let same = try await store.insertReadings([first])
        #expect(same == InsertOutcome(inserted: 0, conflicts: []))
        // The same measurement with another context (or none) is the same record too.
        first.rawContext = nil
        #expect(try await store.insertReadings([first]) == InsertOutcome(inserted: 0, conflicts: []))
        #expect(try await store.readings(ReadingFilter(meterAddress: meterA)).map(\.reading.exclusion) == [nil])
        #expect(try await store.counts(.nightscout).pending == 1)
        #expect(try await store.conflictingRecordsForTesting(meterA).isEmpty)
    }

    @Test func conflictingBytesSentAgainAreKeptOnce() async throws {
        let store = try Self.store()
        let first = sampleReading(sequence: 7)
        #expect(try await store.insertReadings([first, Self.other(first)]).conflicts.count == 1)
        #expect(try await store.insertReadings([Self.other(first), first]) == InsertOutcome(inserted: 0, conflicts: []))
        #expect(try await store.conflictingRecordsForTesting(meterA).count == 1)
    }

    @Test func aConflictIsCommittedToTheFileAt0600() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try Self.store(dir.database)
        let first = sampleReading(sequence: 7)
        _ = try await store.insertReadings([first, Self.other(first)])
        await store.close()
        #expect(fileMode(dir.database) == 0o600)
        let again = try Self.store(dir.database)
        #expect(try await again.conflictingRecordsForTesting(meterA).count == 1)
        #expect(try await again.readings(ReadingFilter(meterAddress: meterA)).map(\.reading.exclusion) == [.conflictingRecord])
    }

    @Test func aVersion3DatabaseGetsTheTableAndKeepsItsReadings() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let first = sampleReading(sequence: 7)
        // What the release before the table left: schema version 3, a reading with its pending outbox row.
        let old = try SQLiteConnection(path: dir.database)
        try Migrator(migrations: Array(Schema.migrations.prefix(3))).migrate(old, now: 1_700_000_000_000)
        try old.execute("INSERT INTO meter (address, time_zone) VALUES (?, 'UTC')", [.text(meterA)])
        let insert = try old.statement(ReadingColumns.insertSQL)
        try ReadingColumns.bind(first, to: insert)
        while try insert.step() {}
        insert.reset()
        try old.execute("""
            INSERT INTO outbox (destination, reading_id, idempotency_key, body, state, created_at)
            VALUES ('nightscout', ?, 'key-7', X'7B7D', 'pending', 1)
            """, [.integer(old.lastInsertRowID)])
        old.close()

        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        #expect(try await store.counts(.nightscout).pending == 1)
        let outcome = try await store.insertReadings([Self.other(first)])
        #expect(outcome.conflicts.count == 1)
        #expect(try await store.readings(ReadingFilter(meterAddress: meterA)).map(\.reading.exclusion) == [.conflictingRecord])
        #expect(try await store.counts(.nightscout).pending == 0)
    }
}
