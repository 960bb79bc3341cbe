#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reads small files (config and secret files, state files, meter files, zone files, /proc) through
/// POSIX calls, so commands need no Foundation (which costs the gateway several megabytes of resident
/// memory). Only a regular file of at most `limit` bytes is read: a FIFO, device or directory is refused
/// without blocking (the open does not wait for a writer), and a larger file is refused, not truncated.
public enum FileContents {
    public enum ReadError: Error, Equatable, Sendable {
        case missing
        case notRegular
        case tooLarge(limit: Int)
        case system(String)

        /// Says what is wrong with the file, to follow "cannot read PATH: ".
        public var text: String {
            switch self {
            case .missing: "does not exist"
            case .notRegular: "is not a regular file"
            case .tooLarge(let limit): "is larger than \(limit) bytes"
            case .system(let s): s
            }
        }
    }

    /// The whole file, or nil when it cannot be read, is not a regular file or is larger than `limit` bytes.
    public static func read(_ path: String, limit: Int = 16 << 20) -> [UInt8]? {
        try? contents(of: path, limit: limit).get()
    }

    /// The whole regular file of at most `limit` bytes, or why not.
    public static func contents(of path: String, limit: Int) -> Result<[UInt8], ReadError> {
        // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses anything not regular.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        if fd < 0 {
            let code = errno
            return .failure(code == ENOENT ? .missing : .system(errorText(code)))
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .failure(.system(errorText(errno))) }
        guard UInt32(st.st_mode) & UInt32(S_IFMT) == UInt32(S_IFREG) else { return .failure(.notRegular) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = chunk.withUnsafeMutableBytes { buffer -> Int in
                guard let base = buffer.baseAddress else { return -1 }
                #if canImport(Glibc)
                return Glibc.read(fd, base, buffer.count)
                #else
                return Darwin.read(fd, base, buffer.count)
                #endif
            }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(.system(errorText(errno)))
            }
            if n == 0 { break }
            out.append(contentsOf: chunk[0..<n])
            if out.count > limit { return .failure(.tooLarge(limit: limit)) }
        }
        return .success(out)
    }

    /// The C library's text for an errno value.
    public static func errorText(_ code: Int32) -> String {
        guard let s = strerror(code) else { return "error \(code)" }
        return String(cString: s)
    }
}
