#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support
import Testing
import TestSupport

@Suite struct LockFileTests {
    /// A lock file is a regular file: a FIFO, a directory or a character device (a stand-in for /dev/null
    /// made in the temporary directory, when the process may make one) at its path is refused with a clear
    /// error, never opened for writing or replaced.
    @Test func onlyARegularFileIsALockFile() throws {
        let dir = try TempDirectory()
        defer {
            rmdir(dir.path + "/directory")
            dir.remove()
        }
        var paths = [dir.path + "/fifo", dir.path + "/directory"]
        #expect(mkfifo(paths[0], 0o600) == 0)
        #expect(mkdir(paths[1], 0o700) == 0)
        if mknod(dir.path + "/null", S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0 { paths.append(dir.path + "/null") }
        for path in paths {
            #expect(throws: LockFileError(path: path, errno: EEXIST, notRegular: true)) { _ = try LockFile.acquire(path: path) }
            #expect(LockFileError(path: path, errno: EEXIST, notRegular: true).description
                    == "cannot lock \(path): exists and is not a regular file")
        }
        let lock = try #require(try LockFile.acquire(path: dir.path + "/upload.lock"))
        withExtendedLifetime(lock) {}
    }
}
