#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads and writes of small files (meter files, the bonds file) with POSIX calls, so the executable does
/// not need Foundation (and ICU) for them.
public enum SmallFile {
    /// The whole file, or nil when it cannot be opened or read or is larger than `limit` bytes.
    public static func read(_ path: String, limit: Int = 16 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { _ = close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if n == 0 { return out }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit { return nil }
        }
    }

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
