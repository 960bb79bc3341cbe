#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Testing
import TestSupport
@testable import Gateway

@Suite("Daemon state file")
struct DaemonStateFileTests {
    @Test("status reads back what the daemon writes")
    func readsWhatTheDaemonWrites() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let database = dir.path + "/gateway.sqlite3"
        var s = DaemonSnapshot()
        s.pid = getpid()
        s.phase = .alert
        s.startedAt = 1_700_000_000_000
        s.updatedAt = 1_700_000_060_000
        s.watching = .profile
        s.activeSessions = ["AA:BB:CC:DD:EE:01"]
        s.counters.connects = 3
        s.counters.failures = ["timeout": 2, "store": 1]
        s.lastReactionMs = 42
        s.lastReloadError = "line 3: unknown key"
        s.alert = HeldAlert(code: DaemonAlert.databaseDamaged, message: "database is damaged")
        try dir.write("gateway.sqlite3.daemon.json", DaemonStateFile.json(s).compactText + "\n")

        let read = DaemonStateFile.read(database: database)
        #expect(read.running)
        #expect(read.pid == getpid())
        #expect(read.phase == .alert)
        #expect(read.startedAt == 1_700_000_000_000)
        #expect(read.updatedAt == 1_700_000_060_000)
        #expect(read.watching == "profile")
        #expect(read.activeSessions == ["AA:BB:CC:DD:EE:01"])
        #expect(read.counters["connects"] == 3)
        #expect(read.countersByReason["failures"] == ["timeout": 2, "store": 1])
        #expect(read.lastReactionMs == 42)
        #expect(read.lastReloadError == "line 3: unknown key")
        #expect(read.alert?.code == DaemonAlert.databaseDamaged)
        #expect(read.alert?.name == "DATABASE_DAMAGED")
        #expect(read.alert?.message == "database is damaged")
    }

    @Test("a stopped daemon, a missing file and a file that is not JSON read as not running")
    func notRunning() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let database = dir.path + "/gateway.sqlite3"
        #expect(!DaemonStateFile.read(database: database).running)
        #expect(DaemonStateFile.read(database: database).pid == nil)

        var s = DaemonSnapshot()
        s.pid = getpid()
        s.phase = .stopped
        try dir.write("gateway.sqlite3.daemon.json", DaemonStateFile.json(s).compactText)
        let stopped = DaemonStateFile.read(database: database)
        #expect(!stopped.running)
        #expect(stopped.pid == getpid())

        try dir.write("gateway.sqlite3.daemon.json", "{\"pid\": ")
        #expect(DaemonStateFile.read(database: database).pid == nil)
    }
}
