#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

@Suite struct FailureTests {
    private let builders: [any OutboxBodyBuilder] = [StubBuilder(destination: .nightscout), StubBuilder(destination: .fhir)]

    @Test func aFailedOutboxRowLeavesNeitherReadingNorOutboxRow() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: builders)
        try await store.insert([sampleReading(sequence: 1)])
        // The second destination's row of the second reading fails: the whole batch goes.
        await store.injectFaults([SQLiteFault(.step, sqlContains: "INSERT INTO outbox", code: .full, skip: 3)])
        let error = await #expect(throws: SQLiteError.self) {
            try await store.insert([sampleReading(sequence: 2), sampleReading(sequence: 3)])
        }
        #expect(error?.isFull == true)
        #expect(error?.sql?.contains("INSERT INTO outbox") == true)
        #expect(try await store.readingCount() == 1)
        #expect(try await store.counts(.nightscout).pending == 1)
        #expect(try await store.counts(.fhir).pending == 1)
        #expect(try await store.highestSequence(meterA) == 1)
        // Nothing is left half done: the same batch succeeds once the disk has room.
        #expect(try await store.insert([sampleReading(sequence: 2), sampleReading(sequence: 3)]) == 2)
        #expect(try await store.counts(.fhir).pending == 3)
        #expect(try await store.integrityCheck() == ["ok"])
        await store.close()
    }

    @Test func aFailedCommitRollsBackAndReportsTheCommitError() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: builders)
        await store.injectFaults([SQLiteFault(.step, sqlContains: "COMMIT", code: ResultCode(rawValue: 778))])  // SQLITE_IOERR_WRITE
        let error = await #expect(throws: SQLiteError.self) {
            try await store.insert([sampleReading(sequence: 1)])
        }
        #expect(error?.code == ResultCode(rawValue: 778))
        #expect(error?.code.primary == .ioError)
        #expect(try await store.readingCount() == 0)
        #expect(try await store.outboxItems(.nightscout).isEmpty)
    }

    @Test func forcedBusyIsATypedOneLineError() async throws {
        let store = try SQLiteStore(path: ":memory:")
        await store.injectFaults([SQLiteFault(.step, sqlContains: "BEGIN IMMEDIATE", code: .busy)])
        let error = await #expect(throws: SQLiteError.self) {
            try await store.insert([sampleReading(sequence: 1)])
        }
        #expect(error?.isBusy == true)
        let line = error.map { String(describing: $0) } ?? ""
        #expect(line.contains("locked by another process"))
        #expect(!line.contains("\n"))
        #expect(try await store.insert([sampleReading(sequence: 1)]) == 1)
    }

    @Test func lockHeldByAnotherConnectionGivesBusyAndLosesNothing() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: builders, busyTimeoutMilliseconds: 100)
        try await store.insert([sampleReading(sequence: 1)])
        let other = try SQLiteConnection(path: dir.database)
        try other.executeScript("BEGIN IMMEDIATE")
        let error = await #expect(throws: SQLiteError.self) {
            try await store.insert([sampleReading(sequence: 2)])
        }
        #expect(error?.code ~= .busy)
        #expect(error.map { String(describing: $0) }?.contains("\n") == false)
        // Readers still see every committed reading while the writer is locked out.
        #expect(try await store.readingCount() == 1)
        try other.executeScript("ROLLBACK")
        other.close()
        #expect(try await store.insert([sampleReading(sequence: 2)]) == 1)
        #expect(try await store.counts(.nightscout).pending == 2)
        await store.close()
    }

    @Test func aFullDatabaseKeepsEverythingCommitted() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let store = try SQLiteStore(path: dir.database, builders: builders)
        try await store.insert((1...20).map { sampleReading(sequence: $0) })
        // The page limit stands in for a full disk: SQLite answers SQLITE_FULL the same way.
        let pages = try await store.pageCountForTesting()
        try await store.executeForTesting("PRAGMA max_page_count = \(pages)")
        let error = await #expect(throws: SQLiteError.self) {
            try await store.insert((21...2000).map { sampleReading(sequence: $0) })
        }
        #expect(error?.isFull == true)
        #expect(error.map { String(describing: $0) }?.hasPrefix("disk full") == true)
        #expect(try await store.readingCount() == 20)
        #expect(try await store.counts(.fhir).pending == 20)
        #expect(try await store.integrityCheck() == ["ok"])
        await store.close()
    }

    @Test func everyOperationThroughTheChokePointCanFail() async throws {
        for operation in [SQLiteOperation.prepare, .bind, .step] {
            let store = try SQLiteStore(path: ":memory:", builders: builders)
            await store.injectFaults([SQLiteFault(operation, sqlContains: "reading", code: .noMemory)])
            await #expect(throws: SQLiteError.self) {
                try await store.insert([sampleReading(sequence: 1)])
            }
            #expect(try await store.readingCount() == 0)
            await store.close()
        }
        #expect(throws: SQLiteError.self) {
            _ = try SQLiteStore(path: ":memory:", faults: [SQLiteFault(.open, code: .cannotOpen)])
        }
    }

    @Test func aClosedStoreThrows() async throws {
        let store = try SQLiteStore(path: ":memory:")
        await store.close()
        await #expect(throws: SQLiteStoreError.closed) {
            try await store.insert([sampleReading(sequence: 1)])
        }
    }
}

@Suite struct ConcurrentAccessTests {
    @Test func aReaderOpensWhileAnotherProcessHoldsTheWriteLock() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let writer = try SQLiteStore(path: dir.database, builders: [StubBuilder(destination: .nightscout)])
        try await writer.insert([sampleReading(sequence: 1)])
        let other = try SQLiteConnection(path: dir.database)
        try other.executeScript("BEGIN IMMEDIATE; INSERT INTO event (at, kind, message) VALUES (1, 'error', 'uncommitted');")
        // `status` opening the database meanwhile: no migration to run, so no write lock is needed.
        let reader = try SQLiteStore(path: dir.database, busyTimeoutMilliseconds: 50)
        #expect(try await reader.readingCount() == 1)
        #expect(try await reader.counts(.nightscout).pending == 1)
        #expect(try await reader.recentEvents().isEmpty)
        try other.executeScript("COMMIT")
        other.close()
        #expect(try await reader.recentEvents().map(\.message) == ["uncommitted"])
        await reader.close()
        await writer.close()
    }

    @Test func aFileThatIsNotADatabaseIsRefusedUntouched() async throws {
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let text = Array(String(repeating: "not a database, just some notes. ", count: 200).utf8)
        let fd = open(dir.database, O_RDWR | O_CREAT, 0o600)
        #expect(fd >= 0)
        _ = text.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let error = #expect(throws: SQLiteError.self) {
            _ = try SQLiteStore(path: dir.database)
        }
        #expect(error?.code ~= .notADatabase)
        var info = stat()
        #expect(stat(dir.database, &info) == 0)
        #expect(Int(info.st_size) == text.count)
    }

    @Test func concurrentCallersAreSerialized() async throws {
        let store = try SQLiteStore(path: ":memory:", builders: [StubBuilder(destination: .nightscout)])
        try await withThrowingTaskGroup(of: Int.self) { group in
            for task in 0..<8 {
                group.addTask {
                    var added = 0
                    for batch in 0..<10 {
                        let base = task * 1000 + batch * 10
                        added += try await store.insert((base..<base + 10).map { sampleReading(sequence: $0) })
                        _ = try await store.claimPending(.nightscout, limit: 3)
                    }
                    return added
                }
            }
            var total = 0
            for try await added in group { total += added }
            #expect(total == 800)
        }
        let counts = try await store.counts(.nightscout)
        #expect(counts.pending + counts.inFlight == 800)
        #expect(counts.inFlight == 240)
        await store.close()
    }
}
