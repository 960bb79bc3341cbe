#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Testing
@testable import SQLiteStore

/// A second connection (another process in the product) writing to the daemon's database.
@Suite(.timeLimit(.minutes(1))) struct OtherWriterTests {
    private let builders: [any OutboxBodyBuilder] = [StubBuilder(destination: .nightscout)]

    @Test func commitsOfAnotherConnectionCountOwnWritesDoNot() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let daemon = try SQLiteStore(path: dir.database, builders: builders)
        let other = try SQLiteStore(path: dir.database, builders: builders)
        #expect(try await daemon.changedByOtherProcesses() == false)

        try await daemon.insert([sampleReading(sequence: 1)])
        #expect(try await daemon.changedByOtherProcesses() == false)

        try await other.insert([sampleReading(sequence: 2)])
        #expect(try await daemon.changedByOtherProcesses() == true)
        // Noted once: the same commit does not count twice.
        #expect(try await daemon.changedByOtherProcesses() == false)
        #expect(try await other.changedByOtherProcesses() == true)
        await other.close()
        await daemon.close()
    }

    @Test func theWatcherReportsAnotherConnectionsWrite() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let daemon = try SQLiteStore(path: dir.database, builders: builders)
        let watcher = try #require(DatabaseWatcher(database: dir.database))
        let other = try SQLiteStore(path: dir.database, builders: builders)
        let reported = Task { () -> Bool in
            for await _ in watcher.changes { return true }
            return false
        }
        try await other.insert([sampleReading(sequence: 7)])
        #expect(await reported.value)
        #expect(try await daemon.changedByOtherProcesses() == true)
        watcher.stop()
        await other.close()
        await daemon.close()
    }

    @Test func theWatcherFollowsASymbolicLinkToTheDatabase() async throws {
        let dir = try TemporaryDirectory()
        let elsewhere = try TemporaryDirectory()
        defer { dir.remove(); elsewhere.remove() }
        await (try SQLiteStore(path: elsewhere.database)).close()
        let link = dir.path + "/link.sqlite3"
        #expect(symlink(elsewhere.database, link) == 0)
        defer { unlink(link) }
        let daemon = try SQLiteStore(path: link, builders: builders)
        let watcher = try #require(DatabaseWatcher(database: link))
        let other = try SQLiteStore(path: link, builders: builders)
        let reported = Task { () -> Bool in
            for await _ in watcher.changes { return true }
            return false
        }
        try await other.insert([sampleReading(sequence: 1)])
        #expect(await reported.value)
        watcher.stop()
        await other.close()
        await daemon.close()
    }

    /// Files created, closed and deleted beside the database raise no event the watcher has to read: a
    /// thousand such cycles, then another connection's commit, which is reported, cost it only the
    /// events of the database's own files.
    @Test func unrelatedFilesBesideTheDatabaseAreNotRead() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let daemon = try SQLiteStore(path: dir.database, builders: builders)
        let other = try SQLiteStore(path: dir.database, builders: builders)
        let watcher = try #require(DatabaseWatcher(database: dir.database))
        for n in 0..<1000 {
            let path = dir.path + "/unrelated-\(n % 10).tmp"
            let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
            #expect(fd >= 0)
            close(fd)
            unlink(path)
        }
        let reported = Task { () -> Bool in
            for await _ in watcher.changes { return true }
            return false
        }
        try await other.insert([sampleReading(sequence: 3)])
        #expect(await reported.value)
        #expect(watcher.eventsRead < 100, "\(watcher.eventsRead) events read")
        watcher.stop()
        await other.close()
        await daemon.close()
    }

    @Test func stoppingTheWatcherEndsItsStream() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let watcher = try #require(DatabaseWatcher(database: dir.database))
        let ended = Task { () -> Int in
            var n = 0
            for await _ in watcher.changes { n += 1 }
            return n
        }
        watcher.stop()
        #expect(await ended.value == 0)
    }
}
