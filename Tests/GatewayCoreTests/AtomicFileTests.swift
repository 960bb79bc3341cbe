#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Testing
import TestSupport

/// The one atomic writer: the daemon's state file, the metrics file, the stand-in's bonds file.
@Suite struct AtomicFileTests {
    @Test func replacesTheFileWithTheGivenModeWhateverTheUmask() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        let path = try dir.write("bonds.json", "old contents", mode: 0o644)
        let old = umask(0)
        defer { umask(old) }
        try AtomicFile.write(Array("{\"bonded\": []}\n".utf8), to: path, mode: 0o600)
        #expect(FileContents.read(path) == Array("{\"bonded\": []}\n".utf8))
        var st = stat()
        #expect(stat(path, &st) == 0)
        #expect(UInt32(st.st_mode) & 0o7777 == 0o600)
        #expect(access(path + ".tmp.\(getpid())", F_OK) != 0)
    }

    @Test func aFailedRenameLeavesTheOldFileAndNoTemporary() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        // A directory in place of the file: the rename over it fails after the temporary is written.
        let path = dir.path + "/state"
        #expect(mkdir(path, 0o700) == 0)
        #expect(throws: AtomicFile.WriteError.self) { try AtomicFile.write("new", to: path) }
        do {
            try AtomicFile.write("new", to: path)
        } catch {
            #expect(error.description.hasPrefix("cannot rename \(path).tmp.\(getpid()) to \(path): "))
        }
        #expect(access(path + ".tmp.\(getpid())", F_OK) != 0)
        var st = stat()
        #expect(stat(path, &st) == 0 && UInt32(st.st_mode) & UInt32(S_IFMT) == UInt32(S_IFDIR))
    }

    @Test func aMissingDirectoryIsNamed() {
        #expect(throws: AtomicFile.WriteError.self) { try AtomicFile.write("x", to: "/nonexistent-dir/f") }
        do {
            try AtomicFile.write("x", to: "/nonexistent-dir/f")
        } catch {
            #expect(error.description == "cannot create /nonexistent-dir/f.tmp.\(getpid()): No such file or directory")
        }
    }
}
