import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// A database written by the gateway before the lost-bond state and the raw identity existed (schema
/// version 1, as every earlier release left it), opened by this one.
@Suite struct OldSchemaTests {
    /// Schema version 1 with one paired meter and one reading, as the earlier gateway wrote them.
    static func oldDatabase(_ path: String) throws {
        let db = try SQLiteConnection(path: path)
        defer { db.close() }
        try db.executeScript(Schema.migrations[0].sql)
        try db.executeScript("""
            INSERT INTO schema_migration (version, name, applied_at) VALUES (1, '\(Schema.migrations[0].name)', 1700000000000);
            INSERT INTO meter (address, name, manufacturer, model, serial, firmware, features, time_zone, paired_at,
                               highest_sequence, last_sync, last_seen, last_clock_skew_s)
            VALUES ('\(meterA)', 'meter+1', 'Ascensia', 'Contour', '7012', '1.0', 1024, 'Europe/Berlin', 1700000000000,
                    41, 1700000100000, 1700000100000, -30);
            PRAGMA user_version = 1;
            """)
    }

    @Test func aVersion1DatabaseMigratesAndKeepsTheBondLostStateAcrossRestarts() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.oldDatabase(dir.database)

        let store = try SQLiteStore(path: dir.database)
        #expect(try await store.schemaVersion() == Schema.migrations.count)
        let before = try #require(try await store.meter(meterA))
        #expect(before.bondLostAt == nil && before.bondLostMessage == nil)
        #expect(before.rawIdentity.isEmpty)
        #expect(before.highestSequence == 41 && before.lastClockSkewSeconds == -30 && before.timeZone == "Europe/Berlin")
        #expect(try await store.setBondLost(meterA, at: 1_700_000_200_000, message: "Authentication Failed"))
        await store.close()

        // A restart: the state is read back from the file.
        let again = try SQLiteStore(path: dir.database)
        let lost = try #require(try await again.meter(meterA))
        #expect(lost.bondLostAt == 1_700_000_200_000)
        #expect(lost.bondLostMessage == "Authentication Failed")
        #expect(try await again.pairedMeters().map(\.address) == [meterA])
        #expect(try await again.setBondLost(meterA, at: nil, message: "ignored"))
        await again.close()

        let third = try SQLiteStore(path: dir.database)
        let cleared = try #require(try await third.meter(meterA))
        #expect(cleared.bondLostAt == nil && cleared.bondLostMessage == nil)
        #expect(try await third.schemaVersion() == Schema.migrations.count)
        await third.close()
    }

    @Test func statusOpeningAWritableVersion1DatabaseMigratesItAndReadsTheMeterWhole() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.oldDatabase(dir.database)
        let reader = try SQLiteStore.openForReading(path: dir.database)
        let m = try #require(try await reader.meter(meterA))
        #expect(m.bondLostAt == nil && m.model == "Contour")
        #expect(try await reader.schemaVersion() == Schema.migrations.count)
        await reader.close()
    }

    @Test func aHandEditedRawIdentityColumnIsReadWithoutTrapping() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        try Self.oldDatabase(dir.database)
        let store = try SQLiteStore(path: dir.database)
        try await store.executeForTesting("""
            UPDATE meter SET identity_raw = 'manufacturer=zz,model=4142,=,serial=4,firmware=é1,x=00=11,,software=' WHERE address = '\(meterA)'
            """)
        let m = try #require(try await store.meter(meterA))
        #expect(m.rawIdentity["model"] == [0x41, 0x42])
        #expect(m.rawIdentity["manufacturer"] == nil)
        #expect(m.rawIdentity["serial"] == nil)
        await store.close()
    }
}
