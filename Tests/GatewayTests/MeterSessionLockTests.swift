#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import Meters

@Suite("Meter session lock")
struct MeterSessionLockTests {
    static func temporaryDatabase() -> String {
        var template = Array("/tmp/gg-lock-XXXXXX".utf8CString)
        let dir = template.withUnsafeMutableBufferPointer { String(cString: mkdtemp($0.baseAddress!)) }
        return dir + "/gateway.sqlite3"
    }

    @Test func oneHolderPerMeter() throws {
        let db = Self.temporaryDatabase()
        let first = try #require(try MeterSessionLock.acquire(database: db, address: "aa:bb:cc:dd:ee:01"))
        // flock locks belong to the open file description: a second open in this process conflicts too.
        #expect(try MeterSessionLock.acquire(database: db, address: "AA:BB:CC:DD:EE:01") == nil)
        #expect(try MeterSessionLock.acquire(database: db, address: "AA:BB:CC:DD:EE:02") != nil)
        #expect(first.path.hasSuffix(".meter-AABBCCDDEE01.lock"))
        var info = stat()
        #expect(stat(first.path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        withExtendedLifetime(first) {}
    }

    @Test func releasedWhenTheHolderGoes() throws {
        let db = Self.temporaryDatabase()
        do {
            let held = try MeterSessionLock.acquire(database: db, address: "AA:BB:CC:DD:EE:01")
            #expect(held != nil)
        }
        #expect(try MeterSessionLock.acquire(database: db, address: "AA:BB:CC:DD:EE:01") != nil)
    }

    @Test("withLock holds the lock for its body only; the body does not run while another holder has it")
    func scopedLock() async throws {
        let db = Self.temporaryDatabase()
        let inside = await MeterSessionLock.withLock(database: db, address: "AA:BB:CC:DD:EE:01") {
            let second = await MeterSessionLock.withLock(database: db, address: "AA:BB:CC:DD:EE:01") { "ran" }
            #expect(second == .held)
            return "inside"
        }
        #expect(inside == .ran("inside"))
        // Released when the body returned.
        #expect(await MeterSessionLock.withLock(database: db, address: "AA:BB:CC:DD:EE:01") { 1 } == .ran(1))
        // And when it threw.
        struct Failure: Error {}
        await #expect(throws: Failure.self) {
            _ = try await MeterSessionLock.withLock(database: db, address: "AA:BB:CC:DD:EE:01") { () throws(Failure) -> Int in throw Failure() }
        }
        #expect(try MeterSessionLock.acquire(database: db, address: "AA:BB:CC:DD:EE:01") != nil)
        let unopenable = await MeterSessionLock.withLock(database: "/nonexistent-dir/x/gateway.sqlite3", address: "AA:BB:CC:DD:EE:01") { 1 }
        guard case .unavailable(let error) = unopenable else {
            Issue.record("expected the lock file to be unavailable, got \(unopenable)")
            return
        }
        #expect(error.errno == ENOENT)
    }

    @Test func unopenableLockFileIsAnError() {
        #expect(throws: MeterSessionLockError.self) {
            _ = try MeterSessionLock.acquire(database: "/nonexistent-dir/x/gateway.sqlite3", address: "AA:BB:CC:DD:EE:01")
        }
    }
}
