#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import Testing
import TestSupport
@testable import SQLiteStore

/// A writer process inserting numbered batches is killed with SIGKILL at random moments, over and over.
/// Afterwards the database is sound and every batch is there entirely or not at all, with no gap: every
/// batch the writer reported committed is present exactly once, with its outbox rows.
@Suite struct DurabilityTests {
    static let batchSize = 20
    static let rounds = 8

    @Test(.timeLimit(.minutes(1)))
    func killedWriterLosesNothingCommitted() async throws {
        let writer = try #require(Self.writerBinary(), "glucose-gateway-bench is built beside the test binary")
        let dir = try TempDirectory()
        let database = dir.path + "/gateway.sqlite3"
        defer { dir.remove() }
        var generator = SystemRandomNumberGenerator()
        var reported: [Int: Set<Int>] = [:]
        for round in 0..<Self.rounds {
            // Some kills land while the file is created or migrated, most in the middle of inserting.
            let delay = round == 0 ? Int.random(in: 0...20, using: &generator) : Int.random(in: 30...300, using: &generator)
            let lines = try ChildProcess.runAndKill(
                writer, ["store-writer", "--path", database, "--start", String(round * 10_000), "--batch", String(Self.batchSize)],
                afterMilliseconds: delay
            )
            for line in lines where line.hasPrefix("committed ") {
                let number = try #require(Int(line.dropFirst("committed ".count)))
                reported[round, default: []].insert(number)
            }
        }
        #expect(reported.values.reduce(0) { $0 + $1.count } > 0, "the writer committed at least one batch before being killed")

        let store = try SQLiteStore(path: database)
        #expect(try await store.integrityCheck() == ["ok"])
        let readings = try await store.readings()
        var perBatch: [Int: Int] = [:]
        var keys = Set<Int>()
        for stored in readings {
            let sequence = stored.reading.sequence
            #expect(keys.insert(sequence).inserted, "reading \(sequence) stored once")
            perBatch[sequence / Self.batchSize, default: 0] += 1
        }
        for (batch, count) in perBatch {
            #expect(count == Self.batchSize, "batch \(batch) is whole")
        }
        for round in 0..<Self.rounds {
            let present = perBatch.keys.filter { $0 / 10_000 == round }.sorted()
            // Present batches of a round are a prefix of its numbering: no committed batch vanished.
            #expect(present == Array((round * 10_000)..<(round * 10_000 + present.count)))
            for number in reported[round] ?? [] {
                #expect(perBatch[number] == Self.batchSize, "reported batch \(number) present")
            }
        }
        let counts = [try await store.counts(.nightscout), try await store.counts(.fhir)]
        #expect(counts.map(\.pending) == [readings.count, readings.count])
        await store.close()
    }

    /// The bench executable sits in the same build directory as the test binary.
    static func writerBinary() -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let length = readlink("/proc/self/exe", &buffer, buffer.count - 1)
        guard length > 0 else { return nil }
        let exe = String(decoding: buffer.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var directory = exe
        while let last = directory.last, last != "/" { directory.removeLast() }
        let candidate = directory + "glucose-gateway-bench"
        return access(candidate, X_OK) == 0 ? candidate : nil
    }
}

/// Starts a program with its stdout on a pipe, collects lines, and kills it (by its pid) after a delay.
enum ChildProcess {
    struct SpawnError: Error, CustomStringConvertible {
        var description: String
    }

    static func runAndKill(_ program: String, _ arguments: [String], afterMilliseconds delay: Int) throws -> [String] {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw SpawnError(description: "pipe failed: errno \(errno)") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, fds[1], 1)
        posix_spawn_file_actions_addclose(&actions, fds[0])
        posix_spawn_file_actions_addclose(&actions, fds[1])
        let argv = ([program] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, program, &actions, nil, argv, environ)
        close(fds[1])
        guard rc == 0 else {
            close(fds[0])
            throw SpawnError(description: "posix_spawn failed: \(rc)")
        }
        defer { close(fds[0]) }

        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        let start = monotonicMillis()
        var killed = false
        var open = true
        while open {
            let elapsed = monotonicMillis() - start
            if !killed && elapsed >= delay {
                kill(pid, SIGKILL)
                killed = true
            }
            if elapsed > 20_000 {
                if !killed { kill(pid, SIGKILL) }
                break
            }
            var poller = pollfd(fd: fds[0], events: Int16(POLLIN), revents: 0)
            let wait = killed ? 100 : max(1, delay - Int(elapsed))
            guard poll(&poller, 1, Int32(wait)) > 0 else { continue }
            let n = read(fds[0], &chunk, chunk.count)
            if n > 0 { output.append(contentsOf: chunk[0..<n]) } else if n == 0 || errno != EINTR { open = false }
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // Only whole lines count: a line cut by the kill was never fully reported.
        var lines = String(decoding: output, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        lines.removeLast()
        return lines
    }

    static func monotonicMillis() -> Int {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Int(now.tv_sec) * 1000 + Int(now.tv_nsec) / 1_000_000
    }
}
