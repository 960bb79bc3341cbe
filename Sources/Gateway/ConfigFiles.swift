#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The few file-system calls the config loader needs, over the C library (no Foundation).
enum ConfigFiles {
    enum ReadError: Error, Equatable {
        case missing
        case notRegular
        case tooLarge(limit: Int)
        case system(String)

        var text: String {
            switch self {
            case .missing: "does not exist"
            case .notRegular: "is not a regular file"
            case .tooLarge(let limit): "is larger than \(limit) bytes"
            case .system(let s): s
            }
        }
    }

    struct Info {
        var mode: UInt32
        var isRegular: Bool
        var isDirectory: Bool
    }

    static func info(_ path: String) -> Info? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        let type = UInt32(st.st_mode) & UInt32(S_IFMT)
        return Info(mode: UInt32(st.st_mode) & 0o7777, isRegular: type == UInt32(S_IFREG), isDirectory: type == UInt32(S_IFDIR))
    }

    static func exists(_ path: String) -> Bool { info(path) != nil }

    static func isExecutable(_ path: String) -> Bool {
        guard let i = info(path), i.isRegular else { return false }
        return access(path, X_OK) == 0
    }

    static func errorText(_ code: Int32) -> String {
        guard let s = strerror(code) else { return "error \(code)" }
        return String(cString: s)
    }

    /// Reads a whole regular file of at most `limit` bytes.
    static func read(_ path: String, limit: Int) -> Result<[UInt8], ReadError> {
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
                return systemRead(fd, base, buffer.count)
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

    static func octal(_ mode: UInt32) -> String {
        let s = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - s.count)) + s
    }

    /// The directory part of a path ("." when there is none).
    static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// `path` when absolute, else joined to `base`.
    static func resolve(_ path: String, relativeTo base: String) -> String {
        if path.hasPrefix("/") { return path }
        if base == "." { return path }
        return base.hasSuffix("/") ? base + path : base + "/" + path
    }
}

private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
    Glibc.read(fd, buffer, count)
    #else
    Darwin.read(fd, buffer, count)
    #endif
}
