import Dispatch
@testable import SQLiteStore

// What the tests look at inside a store, on its own connection and queue: the store's internals, reached
// through a testable import, so the product carries no code that exists only for tests.

extension SQLiteStore {
    /// Runs raw SQL on the store's own connection (pragmas such as `max_page_count`).
    public func executeForTesting(_ sql: String) throws {
        try openConnection().executeScript(sql)
    }

    /// Rows `PRAGMA foreign_key_check` reports: references to rows that do not exist.
    public func foreignKeyViolationsForTesting() throws -> Int {
        try openConnection().query("PRAGMA foreign_key_check") { _ in 1 }.count
    }

    /// The connection's journal mode, synchronous level and foreign-key switch.
    public func pragmaValuesForTesting() throws -> [String: String] {
        let db = try openConnection()
        var values: [String: String] = [:]
        for name in ["journal_mode", "synchronous", "foreign_keys"] {
            values[name] = try db.queryFirst("PRAGMA \(name)") { $0.text(0) }
        }
        return values
    }

    /// Pages in the database file (to set `max_page_count` just above it).
    public func pageCountForTesting() throws -> Int {
        try openConnection().queryFirst("PRAGMA page_count") { $0.int(0) } ?? 0
    }
}

extension SQLiteStore {
    /// The plan SQLite chooses for the claim query (the queue must be read through its index).
    public func claimQueryPlanForTesting() throws -> [String] {
        try openConnection().query("EXPLAIN QUERY PLAN " + Self.claimSQL, [.text("nightscout"), .integer(1)]) { $0.text(3) }
    }

    /// The plans of the statements that mark claimed rows in flight, acknowledge and release rows (tests:
    /// each must reach its rows through an index, never by scanning the history).
    public func outboxUpdatePlansForTesting() throws -> [String: [String]] {
        let db = try openConnection()
        return [
            "in_flight": try db.query("EXPLAIN QUERY PLAN " + Self.markInFlightSQL, [.integer(1), .text("nightscout"), .integer(1)]) { $0.text(3) },
            "acknowledge": try db.query("EXPLAIN QUERY PLAN " + Self.acknowledgeSQL, [.integer(1), .text("[1]")]) { $0.text(3) },
            "release": try db.query("EXPLAIN QUERY PLAN " + Self.releaseSQL, [.text("[1]")]) { $0.text(3) },
            "requeue": try db.query("EXPLAIN QUERY PLAN " + Self.requeueSQL) { $0.text(3) },
            "unsent counts": try db.query("EXPLAIN QUERY PLAN " + Self.unsentCountsSQL, [.text("nightscout")]) { $0.text(3) },
        ]
    }

    /// Every outbox row's state, attempts and times, by id.
    public func outboxRowsForTesting() throws -> [OutboxRowForTesting] {
        try openConnection().query("""
            SELECT id, destination, state, attempts, claimed_at, acknowledged_at, quarantined_at FROM outbox ORDER BY id
            """) { row in
            OutboxRowForTesting(id: row.int64(0), destination: row.text(1), state: row.text(2), attempts: row.int(3),
                                claimedAt: row.optionalInt64(4), acknowledgedAt: row.optionalInt64(5), quarantinedAt: row.optionalInt64(6))
        }
    }
}

/// One outbox row's bookkeeping as stored.
public struct OutboxRowForTesting: Sendable, Equatable {
    public var id: Int64
    public var destination: String
    public var state: String
    public var attempts: Int
    public var claimedAt: Int64?
    public var acknowledgedAt: Int64?
    public var quarantinedAt: Int64?
}

extension SQLiteStore {
    /// The bytes kept in `conflicting_record` for a meter, oldest first.
    public func conflictingRecordsForTesting(_ meter: String) throws -> [(sequence: Int, time: String, measurement: [UInt8], context: [UInt8]?)] {
        try openConnection().query(
            "SELECT sequence, user_facing_time, raw_measurement, raw_context FROM conflicting_record WHERE meter = ? ORDER BY id",
            [.text(meter)]
        ) { ($0.int(0), $0.text(1), $0.blob(2), $0.optionalBlob(3)) }
    }
}

extension SQLiteStore {
    /// The value for `key` on the queue the store's work runs on (which queue that is).
    public func queueSpecificForTesting<T: Sendable>(_ key: DispatchSpecificKey<T>) -> T? {
        DispatchQueue.getSpecific(key: key)
    }
}

extension SQLiteStore {
    /// The opcodes of `sql` as SQLite compiles it on this connection (which statements build
    /// temporary tables). The statement is compiled only, never run.
    public func opcodesForTesting(_ sql: String) throws -> [String] {
        try openConnection().query("EXPLAIN " + sql) { $0.text(1) }
    }
}
