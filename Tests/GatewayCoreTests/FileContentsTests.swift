#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
import Testing
import TestSupport

/// The one file reader every layer uses: config and secret files, the daemon's state file, meter files,
/// zone files and /proc.
@Suite struct FileContentsTests {
    @Test func readsAWholeFileUpToTheLimit() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = try dir.write("state.json", String(repeating: "x", count: 40_000))
        #expect(FileContents.read(path, limit: 40_000)?.count == 40_000)
        #expect(FileContents.contents(of: path, limit: 39_999) == .failure(.tooLarge(limit: 39_999)))
        #expect(FileContents.read(path, limit: 39_999) == nil)
        #expect(FileContents.read(try dir.write("empty", "")) == [])
    }

    @Test func aMissingFileAndADirectoryAreNamed() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        #expect(FileContents.contents(of: dir.path + "/none", limit: 10) == .failure(.missing))
        #expect(FileContents.contents(of: dir.path, limit: 10) == .failure(.notRegular))
        #expect(FileContents.ReadError.notRegular.text == "is not a regular file")
    }

    /// A FIFO in place of a meter or state file used to block the reader until some writer came.
    @Test func aFIFOIsRefusedWithoutWaitingForAWriter() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let fifo = dir.path + "/meter.json"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(FileContents.contents(of: fifo, limit: 1 << 20) == .failure(.notRegular))
        #expect(FileContents.read(fifo) == nil)
    }

    @Test func procFilesAreRegularAndRead() {
        let status = FileContents.read("/proc/self/status", limit: 1 << 20).map { String(decoding: $0, as: UTF8.self) }
        #expect(status?.contains("VmRSS:") == true)
    }
}
