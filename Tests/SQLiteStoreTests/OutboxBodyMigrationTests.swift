import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// A database at schema version 4, whose outbox rows carry their bodies, opened by this gateway: the
/// bodies move to `outbox_body` byte for byte and the queue goes on as it was.
@Suite struct OutboxBodyMigrationTests {
    /// One outbox row as the version-4 gateway left it.
    struct OldRow {
        var id: Int64
        var destination: DestinationName
        var readingID: Int64
        var key: String
        var body: [UInt8]
        var state: OutboxState
        var attempts: Int
        var createdAt: Int64
    }

    /// Bodies of different lengths, with bytes no text would hold (NUL, 0xFF, a lone UTF-8 lead byte).
    static func body(_ n: Int) -> [UInt8] {
        var bytes = Array("{\"seq\":\(n),\"device\":\"meter+1\",\"mgdl\":\(70 + n)}".utf8)
        bytes += [0x00, 0xFF, 0xC3, UInt8(truncatingIfNeeded: n)]
        bytes += Array(repeating: UInt8(truncatingIfNeeded: n * 7), count: (n * 37) % 300)
        return bytes
    }

    /// Version 4 with 12 readings and a row for each of two destinations: every state, some retried.
    static func version4Database(_ path: String) throws -> [OldRow] {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        try db.executeScript("PRAGMA foreign_keys = ON")
        try Migrator(migrations: Array(Schema.migrations.prefix(4))).migrate(db, now: 1_700_000_000_000)
        #expect(try db.queryFirst("PRAGMA user_version") { $0.int(0) } == 4)
        try db.execute("INSERT INTO meter (address, name, time_zone) VALUES (?, 'meter+1', 'Europe/Berlin')", [.text(meterA)])
        var rows: [OldRow] = []
        let states: [OutboxState] = [.acknowledged, .acknowledged, .quarantined, .inFlight, .pending, .pending]
        try db.transaction {
            for sequence in 1...12 {
                let insert = try db.statement(ReadingColumns.insertSQL)
                defer { insert.reset() }
                try ReadingColumns.bind(sampleReading(sequence: sequence), to: insert)
                while try insert.step() {}
                let readingID = db.lastInsertRowID
                for destination in [DestinationName.nightscout, .fhir] {
                    let n = rows.count + 1
                    let state = states[(sequence + (destination == .fhir ? 3 : 0)) % states.count]
                    let row = OldRow(id: 0, destination: destination, readingID: readingID, key: "\(destination.rawValue)-\(sequence)",
                                     body: body(n), state: state, attempts: state == .pending ? n % 3 : 1, createdAt: 1_700_000_000_000 + Int64(n))
                    try db.execute("""
                        INSERT INTO outbox (destination, reading_id, idempotency_key, body, state, attempts, created_at,
                                            claimed_at, acknowledged_at, quarantined_at, last_answer)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """, [
                            .text(destination.rawValue), .integer(readingID), .text(row.key), .blob(row.body), .text(state.rawValue),
                            .integer(Int64(row.attempts)), .integer(row.createdAt),
                            state == .pending ? .null : .integer(1_700_000_100_000),
                            state == .acknowledged ? .integer(1_700_000_200_000 + Int64(n)) : .null,
                            state == .quarantined ? .integer(1_700_000_300_000) : .null,
                            state == .quarantined ? .text("422 Unprocessable Entity") : .null,
                        ])
                    var stored = row
                    stored.id = db.lastInsertRowID
                    rows.append(stored)
                }
            }
        }
        return rows
    }

    @Test func version4BodiesMoveByteForByteAndTheQueueGoesOnAsBefore() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let old = try Self.version4Database(dir.database)
        #expect(Set(old.map(\.state)) == [.pending, .inFlight, .acknowledged, .quarantined])
        #expect(Set(old.map(\.body)).count == old.count)

        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)],
                                    now: { 1_800_000_000_000 })
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        #expect(try await store.integrityCheck() == ["ok"])
        for destination in [DestinationName.nightscout, .fhir] {
            let expected = old.filter { $0.destination == destination }
            let items = try await store.outboxItems(destination)
            #expect(items.map(\.id) == expected.map(\.id))
            #expect(items.map(\.body) == expected.map(\.body))
            #expect(items.map(\.key) == expected.map(\.key))
            #expect(items.map(\.state) == expected.map(\.state))
            #expect(items.map(\.attempts) == expected.map(\.attempts))
            #expect(items.map(\.readingID) == expected.map(\.readingID))
            #expect(items.map(\.createdAt) == expected.map(\.createdAt))
            let counts = try await store.counts(destination)
            #expect(counts.pending == expected.filter { $0.state == .pending }.count)
            #expect(counts.inFlight == expected.filter { $0.state == .inFlight }.count)
            #expect(counts.acknowledged == expected.filter { $0.state == .acknowledged }.count)
            #expect(counts.quarantined == expected.filter { $0.state == .quarantined }.count)
            let aside = try await store.quarantined(destination)
            #expect(aside.map(\.item.body) == expected.filter { $0.state == .quarantined }.map(\.body))
            #expect(aside.allSatisfy { $0.answer == "422 Unprocessable Entity" && $0.quarantinedAt == 1_700_000_300_000 })
        }
        let before = try await store.outboxRowsForTesting()
        #expect(before.filter { $0.state == "acknowledged" }.map(\.acknowledgedAt) == old.filter { $0.state == .acknowledged }.map { row in
            1_700_000_200_000 + Int64((old.firstIndex { $0.id == row.id } ?? 0) + 1)
        })

        // Claiming returns the same rows in the same order, then the in-flight ones once requeued.
        let pending = old.filter { $0.destination == .nightscout && $0.state == .pending }
        let claimed = try await store.claimPending(.nightscout, limit: 100)
        #expect(claimed.map(\.id) == pending.map(\.id))
        #expect(claimed.map(\.body) == pending.map(\.body))
        #expect(try await store.requeueInFlight() == old.filter { $0.state == .inFlight }.count + pending.count)
        let all = old.filter { $0.destination == .fhir && ($0.state == .pending || $0.state == .inFlight) }
        let fhir = try await store.claimPending(.fhir, limit: 100)
        #expect(fhir.map(\.id) == all.map(\.id))
        #expect(fhir.map(\.body) == all.map(\.body))
        try await store.acknowledge(fhir.map(\.id), at: 1_800_000_000_000)

        // New readings queue with their bodies as before.
        #expect(try await store.insert([sampleReading(sequence: 13)]) == 1)
        let fresh = try await store.claimPending(.fhir, limit: 100)
        #expect(fresh.count == 1)
        let freshBody = String(decoding: fresh.first?.body ?? [], as: UTF8.self)
        #expect(freshBody.contains("\"seq\":13"))
        await store.close()

        // The queue rows no longer carry the body; every body belongs to a row.
        let check = try SQLiteConnection(path: dir.database)
        defer { check.close() }
        let columns = try check.query("SELECT name FROM pragma_table_info('outbox')") { $0.text(0) }
        #expect(!columns.contains("body") && columns.contains("idempotency_key"))
        #expect(try check.queryFirst("SELECT count(*) FROM outbox_body") { $0.int(0) } == old.count + 2)
        #expect(try check.query("PRAGMA foreign_key_check") { $0.text(0) }.isEmpty)
        let names = try check.query("SELECT name FROM schema_migration ORDER BY version") { $0.text(0) }
        #expect(names == Schema.migrations.map(\.name))
    }

    @Test func aConflictDropsTheRowsAndTheirBodies() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)])
        let first = sampleReading(sequence: 7)
        #expect(try await store.insert([first, sampleReading(sequence: 8)]) == 2)
        let outcome = try await store.insertReadings([ConflictingRecordTests.other(first)])
        #expect(outcome.conflicts.count == 1)
        await store.close()
        let check = try SQLiteConnection(path: dir.database)
        defer { check.close() }
        #expect(try check.queryFirst("SELECT count(*) FROM outbox") { $0.int(0) } == 2)
        #expect(try check.queryFirst("SELECT count(*) FROM outbox_body") { $0.int(0) } == 2)
        #expect(try check.queryFirst("SELECT count(*) FROM outbox_body WHERE outbox_id NOT IN (SELECT id FROM outbox)") { $0.int(0) } == 0)
    }

    @Test func aRowWithoutItsBodyIsRefusedNotSkipped() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout)])
        try await store.insert([sampleReading(sequence: 1), sampleReading(sequence: 2)])
        try await store.executeForTesting("PRAGMA foreign_keys = OFF; DELETE FROM outbox_body WHERE outbox_id = 1; PRAGMA foreign_keys = ON;")
        let error = await #expect(throws: SQLiteStoreError.self) { try await store.claimPending(.nightscout, limit: 10) }
        #expect(error == .invalidColumn(table: "outbox_body", column: "body"))
        // Nothing was marked in flight.
        #expect(try await store.counts(.nightscout).pending == 2)
        await store.close()
    }
}
