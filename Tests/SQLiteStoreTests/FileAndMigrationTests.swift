#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

@Suite struct FileAndMigrationTests {
    @Test func databaseAndItsCompanionsAreMode0600() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        try await store.insert([sampleReading(sequence: 1)])
        // While the connection is open, WAL mode keeps both companion files on disk.
        #expect(fileMode(dir.database) == 0o600)
        #expect(fileMode(dir.database + "-wal") == 0o600)
        #expect(fileMode(dir.database + "-shm") == 0o600)
        await store.close()
    }

    @Test func looserModesLeftByAnotherProgramAreTightened() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let fd = open(dir.database, O_RDWR | O_CREAT, 0o644)
        #expect(fd >= 0)
        close(fd)
        chmod(dir.database, 0o644)
        #expect(fileMode(dir.database) == 0o644)
        let store = try SQLiteStore(path: dir.database)
        #expect(fileMode(dir.database) == 0o600)
        await store.close()
    }

    @Test func missingDirectoriesAreCreatedPrivate() async throws {
        let dir = try TemporaryDirectory()
        let nested = dir.path + "/var/lib"
        defer {
            for suffix in ["", "-wal", "-shm"] { unlink(nested + "/gateway.sqlite3" + suffix) }
            rmdir(nested)
            rmdir(dir.path + "/var")
            dir.remove()
        }
        let store = try SQLiteStore(path: nested + "/gateway.sqlite3")
        #expect(fileMode(dir.path + "/var") == 0o700)
        #expect(fileMode(nested + "/gateway.sqlite3") == 0o600)
        await store.close()
    }

    @Test func uncreatableFileIsATypedOneLineError() throws {
        let error = #expect(throws: SQLiteStoreError.self) {
            _ = try SQLiteStore(path: "/proc/no-such-dir/gateway.sqlite3")
        }
        let text = error.map { String(describing: $0) } ?? ""
        #expect(text.contains("/proc/no-such-dir"))
        #expect(!text.contains("\n"))
    }

    @Test func migratesAnEmptyDatabaseFromVersionZero() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        // A database SQLite itself created, at user_version 0 with no tables.
        let raw = try SQLiteConnection(path: dir.database)
        #expect(try raw.queryFirst("PRAGMA user_version") { $0.int(0) } == 0)
        try raw.executeScript("CREATE TABLE unrelated (x INTEGER)")
        raw.close()

        let store = try SQLiteStore(path: dir.database)
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        try await store.insert([sampleReading(sequence: 1)])
        await store.close()

        let check = try SQLiteConnection(path: dir.database)
        let names = try check.query("SELECT name FROM schema_migration ORDER BY version") { $0.text(0) }
        #expect(names == Schema.migrations.map(\.name))
        let tables = try check.query("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name") { $0.text(0) }
        #expect(tables == ["conflicting_record", "destination_state", "event", "meter", "meter_clock", "outbox", "outbox_body", "reading",
                          "reading_clock", "schema_migration", "undecodable_value", "unrelated"])
        check.close()

        // Opening again applies nothing twice and keeps the data.
        let reopened = try SQLiteStore(path: dir.database)
        #expect(try await reopened.readingCount() == 1)
        #expect(try await reopened.schemaVersion() == Schema.migrations.count)
        await reopened.close()
    }

    @Test func aFailedMigrationLeavesTheDatabaseAtItsLastVersion() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let error = #expect(throws: SQLiteError.self) {
            _ = try SQLiteStore(path: dir.database, faults: [SQLiteFault(.exec, sqlContains: "CREATE TABLE meter", code: .full)])
        }
        #expect(error?.isFull == true)
        let check = try SQLiteConnection(path: dir.database)
        #expect(try check.queryFirst("PRAGMA user_version") { $0.int(0) } == 0)
        #expect(try check.query("SELECT name FROM sqlite_schema WHERE type = 'table'") { $0.text(0) }.isEmpty)
        check.close()
        let store = try SQLiteStore(path: dir.database)
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        await store.close()
    }

    @Test func aNewerDatabaseIsRefused() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        try await store.insert([sampleReading(sequence: 1)])
        try await store.executeForTesting("PRAGMA user_version = 99")
        await store.close()
        let error = #expect(throws: SQLiteStoreError.self) {
            _ = try SQLiteStore(path: dir.database)
        }
        #expect(error == .schemaTooNew(found: 99, supported: Schema.migrations.count))
    }

    /// Readings are stored without the per-row foreign-key lookups: every reference they write must hold,
    /// and enforcement must be back on afterwards, also after an insert that failed half-way.
    @Test func foreignKeysHoldAfterInsertsAndAreEnforcedAgain() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)],
                                    now: { 5000 })
        let first = sampleReading(sequence: 7)
        var otherMeter = sampleReading(sequence: 7)
        otherMeter.meterAddress = meterB
        #expect(try await store.insertReadings([first, sampleReading(sequence: 8), otherMeter]).inserted == 3)
        #expect(try await store.counts(.nightscout).pending == 3)
        // A resend and a conflicting record (kept aside, the stored one withheld).
        let outcome = try await store.insertReadings([first, ConflictingRecordTests.other(first)])
        #expect(outcome.conflicts.count == 1)
        #expect(try await store.counts(.nightscout).pending == 2)
        try await store.executeForTesting("""
            CREATE TRIGGER refuse BEFORE INSERT ON outbox_body BEGIN SELECT RAISE(ABORT, 'refused'); END
            """)
        await #expect(throws: (any Error).self) { try await store.insertReadings([sampleReading(sequence: 9), sampleReading(sequence: 10)]) }
        try await store.executeForTesting("DROP TRIGGER refuse")
        #expect(try await store.foreignKeyViolationsForTesting() == 0)
        #expect(try await store.pragmaValuesForTesting()["foreign_keys"] == "1")
        await #expect(throws: (any Error).self) {
            try await store.executeForTesting("INSERT INTO outbox_body (outbox_id, body) VALUES (999999, x'00')")
        }
        await #expect(throws: (any Error).self) {
            try await store.executeForTesting("""
                INSERT INTO outbox (destination, reading_id, idempotency_key, state, created_at) VALUES ('nightscout', 999999, 'k', 'pending', 1)
                """)
        }
        // The failed insert left nothing: the outbox rows of readings 2 and 3 (those of the withheld first went).
        let pending = (try await store.counts(.nightscout).pending, try await store.counts(.fhir).pending)
        #expect(pending == (2, 2))
        await store.close()
    }

    @Test func pragmasAreSetOnOpen() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database)
        let values = try await store.pragmaValuesForTesting()
        #expect(values == ["journal_mode": "wal", "synchronous": "2", "foreign_keys": "1"])
        await store.close()
    }
}
