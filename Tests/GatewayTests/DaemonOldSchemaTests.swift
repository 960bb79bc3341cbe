#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
@testable import SQLiteStore
import Testing
import TestSupport
@testable import Gateway
@testable import Meters

/// The daemon started on a database the gateway wrote before the lost-bond state existed (schema
/// version 1): a meter that lost its bond is found, stored as re-pair needed, and stays so across a restart.
@Suite("Daemon on a schema-1 database", .timeLimit(.minutes(1)))
struct DaemonOldSchemaTests {
    @Test func aLostBondOnAnUpgradedDatabaseIsKeptAcrossARestart() async throws {
        let meter = FakeMeter(address: "AA:BB:CC:DD:EE:01", script: FakeMeterScript(records: DaemonTests.records(1...3)))
        var template = Array("/tmp/gg-oldschema-XXXXXX".utf8CString)
        let directory = try #require(template.withUnsafeMutableBufferPointer { b in b.baseAddress.flatMap { mkdtemp($0) }.map { String(cString: $0) } })
        let path = directory + "/gateway.sqlite3"
        defer {
            for suffix in ["", "-wal", "-shm", ".lock"] { unlink(path + suffix) }
            rmdir(directory)
        }
        let old = try SQLiteConnection(path: path)
        try old.executeScript(Schema.migrations[0].sql)
        try old.executeScript("""
            INSERT INTO schema_migration (version, name, applied_at) VALUES (1, '\(Schema.migrations[0].name)', 1);
            INSERT INTO meter (address, name, manufacturer, model, time_zone, paired_at, highest_sequence)
            VALUES ('\(meter.address)', 'meter+1', 'Acme Diagnostics', 'GL-1', '\(DaemonTests.zone)', 1, NULL);
            PRAGMA user_version = 1;
            """)
        old.close()

        let clock = ManualClock()
        let radio = FakeMeterRadio(meters: [meter])
        radio.add(meter, paired: true)
        radio.setForgotBond(meter.address, true)
        let f = try await DaemonTests.Fixture(meters: [], clock: clock, directory: directory, radio: radio)
        #expect(try await f.store.schemaVersion() == Schema.migrations.count)
        try await DaemonBondLossTests.refusedTwice(f, clock, meter.address)
        #expect(try await f.store.meter(meter.address)?.bondLostAt != nil)
        await f.finish()

        let restarted = try await DaemonTests.Fixture(meters: [], clock: clock, directory: directory, radio: FakeMeterRadio(meters: [meter]))
        restarted.radio.add(meter, paired: true)
        restarted.radio.setForgotBond(meter.address, true)
        #expect(await restarted.daemon.currentSnapshot().repairNeeded == [meter.address])
        clock.advance(by: .seconds(600))
        await restarted.daemon.handle(.meterSeen(address: meter.address, connected: false))
        try await DaemonTests.Fixture.until("no session") { await restarted.daemon.currentSnapshot().activeSessions.isEmpty }
        #expect(!restarted.radio.calls.contains("connect \(meter.address)"))
        #expect(try await restarted.store.meter(meter.address)?.model == "GL-1")
        await restarted.finish()
    }
}
