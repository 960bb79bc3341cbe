#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes of small files (the bonds file) with POSIX calls, so the executable does not need Foundation
/// (and ICU) for them; they are read with `FileContents`.
public enum SmallFile {
    /// Writes `bytes` to `path` through a temporary file and a rename, with the given mode.
    public static func writeAtomically(_ path: String, _ bytes: [UInt8], mode: mode_t = 0o600) -> Bool {
        let tmp = path + ".tmp"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { return false }
        var offset = 0
        var ok = true
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress.map { $0 + offset }, bytes.count - offset) }
            if n < 0 {
                if errno == EINTR { continue }
                ok = false
                break
            }
            offset += n
        }
        ok = ok && fchmod(fd, mode) == 0 && fsync(fd) == 0
        _ = close(fd)
        guard ok, rename(tmp, path) == 0 else {
            _ = unlink(tmp)
            return false
        }
        return true
    }
}
