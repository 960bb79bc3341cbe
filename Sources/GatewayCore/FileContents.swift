#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads small files (state files, meter descriptions, zone files) through POSIX calls, so commands need no
/// Foundation (which costs the gateway several megabytes of resident memory).
public enum FileContents {
    /// The whole file, or nil when it cannot be read or is larger than `limit` bytes.
    public static func read(_ path: String, limit: Int = 16 << 20) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var result: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while result.count <= limit {
            let n = chunk.withUnsafeMutableBytes { buffer in
                #if canImport(Glibc)
                Glibc.read(fd, buffer.baseAddress, buffer.count)
                #else
                Darwin.read(fd, buffer.baseAddress, buffer.count)
                #endif
            }
            if n < 0 {
                if errno == EINTR { continue }
                return nil
            }
            if n == 0 { break }
            result.append(contentsOf: chunk[0..<n])
        }
        return result.count <= limit ? result : nil
    }
}
