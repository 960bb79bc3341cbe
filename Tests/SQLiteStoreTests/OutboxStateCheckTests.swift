import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// The outbox's state CHECK as comparisons (migration 5): the same rows and rules, without a temporary
/// table built for every row written.
@Suite(.timeLimit(.minutes(1))) struct OutboxStateCheckTests {
    /// The row's columns, its body from the row itself before migration 6 and from `outbox_body` after.
    static func columns(bodyInRow: Bool) -> String {
        let body = bodyInRow ? "hex(body)" : "hex((SELECT body FROM outbox_body WHERE outbox_id = outbox.id))"
        return "id, destination, reading_id, idempotency_key, \(body), state, attempts, created_at, claimed_at, acknowledged_at, quarantined_at, last_answer"
    }

    /// Schema version 4 with one reading and an outbox row in each state, as the earlier gateway left it.
    static func version4Database(_ path: String) throws {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        for migration in Schema.migrations[0..<4] { try db.executeScript(migration.sql) }
        try db.executeScript("""
            INSERT INTO meter (address, time_zone) VALUES ('\(meterA)', 'UTC');
            INSERT INTO reading (id, meter, sequence, base_time, time_offset_min, user_facing_time, unit, analyte,
                                 has_context, raw_measurement, received_at)
            VALUES (7, '\(meterA)', 1, '2024-03-05T07:30:00', 0, '2024-03-05T07:30:00', 'mg/dL', 'capillary-whole-blood',
                    0, X'0201', 1700000000000);
            INSERT INTO outbox (id, destination, reading_id, idempotency_key, body, state, attempts, created_at,
                                claimed_at, acknowledged_at, quarantined_at, last_answer) VALUES
                (3, 'nightscout', 7, 'k-pending', X'7B7D', 'pending', 0, 1700000000001, NULL, NULL, NULL, NULL),
                (5, 'fhir', 7, 'k-flight', X'7B2261223A317D', 'in_flight', 1, 1700000000002, 1700000000010, NULL, NULL, NULL),
                (8, 'mqtt', 7, 'k-ack', X'00FF', 'acknowledged', 2, 1700000000003, 1700000000011, 1700000000012, NULL, NULL),
                (9, 'other', 7, 'k-quarantined', X'41', 'quarantined', 3, 1700000000004, NULL, NULL, 1700000000013, 'HTTP 400: bad');
            PRAGMA user_version = 4;
            """)
    }

    static func rows(_ path: String) throws -> [String] {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        let bodyInRow = try db.queryFirst("SELECT count(*) FROM pragma_table_info('outbox') WHERE name = 'body'") { $0.int(0) } == 1
        return try db.query("SELECT \(columns(bodyInRow: bodyInRow)) FROM outbox ORDER BY id") { row in
            (0..<12).map { row.optionalText($0) ?? "NULL" }.joined(separator: "|")
        }
    }

    @Test func aVersion4OutboxMigratesRowForRow() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.version4Database(dir.database)
        let before = try Self.rows(dir.database)
        #expect(before.count == 4)

        let store = try SQLiteStore(path: dir.database)
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        #expect(try await store.integrityCheck() == ["ok"])
        // The queue is read through its index again, and claims what was pending.
        #expect(try await store.claimQueryPlanForTesting().contains { $0.contains("outbox_pending") })
        // The rows already in flight or quarantined are in the index migration 7 built over them.
        #expect(try await store.unsentCounts(.fhir) == OutboxCounts(inFlight: 1, oldestUnsent: 1700000000002))
        #expect(try await store.unsentCounts(DestinationName(rawValue: "other")) == OutboxCounts(quarantined: 1))
        #expect(try await store.unsentCounts(DestinationName(rawValue: "mqtt")) == OutboxCounts())
        #expect(try await store.claimPending(.nightscout, limit: 10).map(\.key) == ["k-pending"])
        // The CHECK still refuses a state that is none of the four.
        await #expect(throws: SQLiteError.self) {
            try await store.executeForTesting("INSERT INTO outbox (destination, reading_id, idempotency_key, state, created_at) VALUES ('nightscout', 7, 'k', 'sent', 1)")
        }
        await store.close()

        var after = try Self.rows(dir.database)
        // Only the claim above changed a row: the pending one is in flight now.
        #expect(after[0].hasPrefix("3|nightscout|7|k-pending|7B7D|in_flight|0|1700000000001|"))
        after[0] = before[0]
        #expect(after == before)
        // New rows take ids after the highest, as before.
        let db = try SQLiteConnection(path: dir.database)
        defer { db.close() }
        try db.execute("INSERT INTO outbox (destination, reading_id, idempotency_key, state, created_at) VALUES ('nightscout', 7, 'k-new', 'pending', 2)")
        #expect(db.lastInsertRowID == 10)
    }

    /// Writing an outbox row or changing one row's state builds no temporary table. (A batch's one
    /// UPDATE collects its rows in one, once per batch: that is not what this is about.)
    @Test func writingRowsBuildsNoTemporaryTable() async throws {
        let store = try SQLiteStore(path: ":memory:")
        for sql in [SQLiteStore.insertOutboxSQL, SQLiteStore.quarantineSQL] {
            let opcodes = try await store.opcodesForTesting(sql)
            #expect(!opcodes.isEmpty)
            #expect(!opcodes.contains("OpenEphemeral"), "\(sql)")
        }
        await store.close()
    }
}
