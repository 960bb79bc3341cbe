#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
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
            #expect(error.description == "cannot replace \(path): exists and is not a regular file")
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

    /// A FIFO, a character device (made in the temporary directory, a stand-in for /dev/null, when the
    /// process may make one) or a socket where the file should be is left as it is: the write fails with
    /// a clear error instead of replacing it with a regular file. A symbolic link is replaced itself,
    /// never what it points at.
    @Test func aDeviceFIFOOrSocketIsNeverReplaced() throws {
        let dir = try TempDirectory()
        defer { dir.remove() }
        var paths = [dir.path + "/fifo"]
        #expect(mkfifo(paths[0], 0o600) == 0)
        if mknod(dir.path + "/null", S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0 { paths.append(dir.path + "/null") }
        let socketPath = dir.path + "/socket"
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in socketPath.utf8.enumerated() where i < raw.count - 1 { raw[i] = b }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        defer { close(fd) }
        #expect(bound == 0)
        paths.append(socketPath)
        for path in paths {
            var before = stat()
            #expect(lstat(path, &before) == 0)
            do {
                try AtomicFile.write("glucose_gateway_up 1\n", to: path, mode: 0o644)
                Issue.record("\(path) was replaced")
            } catch {
                #expect(error.description == "cannot replace \(path): exists and is not a regular file")
            }
            var after = stat()
            #expect(lstat(path, &after) == 0 && after.st_mode == before.st_mode && after.st_ino == before.st_ino && after.st_rdev == before.st_rdev)
            #expect(access(path + ".tmp.\(getpid())", F_OK) != 0)
        }
        // A link to a FIFO: the link is replaced by the file, the FIFO stays.
        let link = dir.path + "/link"
        #expect(symlink(paths[0], link) == 0)
        try AtomicFile.write("x", to: link)
        #expect(FileContents.read(link) == Array("x".utf8))
        var fifo = stat()
        #expect(lstat(paths[0], &fifo) == 0 && fifo.st_mode & S_IFMT == S_IFIFO)
    }
}
