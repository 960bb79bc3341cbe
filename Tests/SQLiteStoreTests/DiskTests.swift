#if canImport(Glibc)
import Glibc
#endif
import CSQLite
import GatewayCore
import Testing
@testable import SQLiteStore

/// A full disk, a file that cannot be written, and a damaged file, at the store's level. The system tests
/// (SystemTests/test_daemon_disk.py) do the same with a real full file system and a read-only mount.
@Suite struct DiskTests {
    private let builders: [any OutboxBodyBuilder] = [StubBuilder(destination: .nightscout)]

    @Test func aDiskIOErrorCausedByENOSPCIsADiskFull() {
        // What a full disk does to a WAL open: the -shm file cannot grow.
        let shm = SQLiteError(code: ResultCode(rawValue: 4874), message: "disk I/O error", sql: "PRAGMA journal_mode = WAL", systemErrno: ENOSPC)
        #expect(shm.isFull)
        #expect(!shm.isNotWritable)
        #expect(String(describing: shm).hasPrefix("disk full: the change was not written, what was stored before is kept"))
        let readOnly = SQLiteError(code: .cannotOpen, message: "unable to open database file", systemErrno: EROFS)
        #expect(readOnly.isNotWritable)
        #expect(!readOnly.isFull)
        #expect(String(describing: readOnly).contains("cannot be written: Read-only file system"))
        let other = SQLiteError(code: .ioError, message: "disk I/O error", systemErrno: EIO)
        #expect(!other.isFull && !other.isNotWritable)
    }

    @Test func readingFallsBackToReadOnlyWhenTheReadWriteOpenFindsTheDiskFull() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writer = try SQLiteStore(path: dir.database, builders: builders)
        try await writer.insert([sampleReading(sequence: 1), sampleReading(sequence: 2)])
        await writer.close()

        let store = try SQLiteStore.openForReading(
            path: dir.database, faults: [SQLiteFault(.step, sqlContains: "journal_mode", code: .full)])
        guard case let .readOnly(reason) = store.readAccess else {
            Issue.record("opened \(store.readAccess)")
            return
        }
        #expect(reason.isFull)
        #expect(try await store.readingCount() == 2)
        #expect(try await store.counts(.nightscout).pending == 2)
        await #expect(throws: SQLiteError.self) { try await store.insert([sampleReading(sequence: 3)]) }
        await store.close()

        // Without a fault the same call opens read-write, as every other command.
        let again = try SQLiteStore.openForReading(path: dir.database)
        #expect(again.readAccess == .readWrite)
        await again.close()
    }

    @Test func theReadOnlyFallbackShowsCommitsStillInTheWAL() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writer = try SQLiteStore(path: dir.database, builders: builders)
        try await writer.insert([sampleReading(sequence: 1)])
        // The writer stays open (the daemon): its commit is in the WAL only, which the main file alone,
        // read as immutable, would not show.
        let mainFileOnly = try SQLiteConnection(path: DatabaseFile.uri(dir.database, "mode=ro&immutable=1"),
                                                flags: SQLITE_OPEN_READONLY | SQLITE_OPEN_URI)
        // (Here even the schema is still in the WAL.)
        let mainCount = (try? mainFileOnly.queryFirst("SELECT count(*) FROM reading") { $0.int(0) }) ?? nil
        #expect((mainCount ?? 0) == 0)
        mainFileOnly.close()

        let store = try SQLiteStore.openForReading(path: dir.database, faults: [SQLiteFault(.step, sqlContains: "journal_mode", code: .full)])
        #expect(store.readAccess != .readWrite)
        #expect(try await store.readingCount() == 1)
        await store.close()
        await writer.close()
    }

    @Test func aURIEncodesWhatSQLiteWouldTakeForSyntax() {
        #expect(DatabaseFile.uri("/var/lib/g g/a?b#c%d.sqlite3", "mode=ro") == "file:/var/lib/g%20g/a%3Fb%23c%25d.sqlite3?mode=ro")
    }

    @Test func theQuickCheckFindsADamagedReadingPage() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: builders)
        try await store.insert((1...300).map { sampleReading(sequence: $0) })
        #expect(try await store.quickCheck(milliseconds: 10_000) == .ok)
        await store.close()

        // Overwrite the page at the middle of the file that belongs to the reading table's b-tree.
        let pages = try Self.readingPages(dir.database)
        let victim = try #require(pages.dropFirst(pages.count / 2).first)
        let fd = open(dir.database, O_RDWR)
        #expect(fd >= 0)
        var garbage = (0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 131 &+ 7) }
        #expect(pwrite(fd, &garbage, garbage.count, off_t((victim - 1) * 4096)) == garbage.count)
        close(fd)

        let damaged = try SQLiteStore(path: dir.database, builders: builders)
        guard case let .damaged(findings) = try await damaged.quickCheck(milliseconds: 10_000) else {
            Issue.record("the damage was not found")
            return
        }
        #expect(!findings.isEmpty)
        await damaged.close()
    }

    @Test func theQuickCheckStopsAtItsTimeLimit() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: builders)
        try await store.insert((1...2000).map { sampleReading(sequence: $0) })
        #expect(try await store.quickCheck(milliseconds: 0) == .unfinished)
        // The limit is gone afterwards.
        #expect(try await store.readingCount() == 2000)
        #expect(try await store.quickCheck(milliseconds: 60_000) == .ok)
    }

    /// The leaf pages of the reading table (page size 4096), in file order.
    static func readingPages(_ path: String) throws -> [Int] {
        var info = stat()
        #expect(stat(path, &info) == 0)
        let count = Int(info.st_size) / 4096
        // Page 1 holds the schema; the reading table's pages are those whose cells hold the raw
        // measurement bytes of sampleReading (0x1B ... 0xE8 0x07 0x03 0x05).
        let fd = open(path, O_RDONLY)
        defer { close(fd) }
        var found: [Int] = []
        var page = [UInt8](repeating: 0, count: 4096)
        for n in 2...max(2, count) {
            guard pread(fd, &page, 4096, off_t((n - 1) * 4096)) == 4096 else { continue }
            guard page[0] == 0x0D else { continue }
            let needle: [UInt8] = [0xE8, 0x07, 0x03, 0x05, 0x0E, 0x1E]
            if (0..<(4096 - needle.count)).contains(where: { i in page[i..<(i + needle.count)].elementsEqual(needle) }) {
                found.append(n)
            }
        }
        return found
    }
}
