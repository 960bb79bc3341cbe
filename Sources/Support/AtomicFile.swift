#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes a whole file or nothing: a temporary file beside it (`PATH.tmp.PID`) created with `mode` and
/// given that mode (whatever the umask), written, fsync'ed, then renamed over `path`. Readers (the `status`
/// command, node_exporter's textfile collector, the stand-in's bonds file) never see half a file; on any
/// failure the temporary file is removed and `path` is left as it was.
public enum AtomicFile {
    public struct WriteError: Error, CustomStringConvertible, Sendable {
        public var path: String
        public var operation: String
        public var errno: Int32
        /// Said instead of the C library's text for `errno`.
        public var reason: String?
        public var description: String {
            let reason = reason ?? strerror(errno).map { String(cString: $0) } ?? "error \(errno)"
            return "cannot \(operation) \(path): \(reason)"
        }
    }

    /// Whether `path` may be replaced: nil when nothing is there, or a regular file or a symbolic link
    /// (the rename replaces the link, never its target); else why not. A device (`/dev/null` named by a
    /// config), FIFO, socket or directory is never replaced by a regular file.
    public static func replaceable(_ path: String) -> String? {
        var st = stat()
        guard lstat(path, &st) == 0 else { return nil }
        let type = st.st_mode & S_IFMT
        return type == S_IFREG || type == S_IFLNK ? nil : "exists and is not a regular file"
    }

    public static func write(_ text: String, to path: String, mode: mode_t = 0o644) throws(WriteError) {
        try write(Array(text.utf8), to: path, mode: mode)
    }

    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws(WriteError) {
        let temporary = path + ".tmp.\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw WriteError(path: temporary, operation: "create", errno: errno, reason: nil) }
        func fail(_ operation: String, _ target: String) -> WriteError {
            let e = errno
            close(fd)
            unlink(temporary)
            return WriteError(path: target, operation: operation, errno: e, reason: nil)
        }
        guard fchmod(fd, mode) == 0 else { throw fail("set the mode of", temporary) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { buffer -> Int in
                guard let base = buffer.baseAddress else { return 0 }
                #if canImport(Glibc)
                return Glibc.write(fd, base + offset, buffer.count - offset)
                #else
                return Darwin.write(fd, base + offset, buffer.count - offset)
                #endif
            }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { throw fail("write", temporary) }
            offset += n
        }
        guard fsync(fd) == 0 else { throw fail("sync", temporary) }
        close(fd)
        // Checked again right before the rename: the path may have been replaced since the config was read.
        if let why = replaceable(path) {
            unlink(temporary)
            throw WriteError(path: path, operation: "replace", errno: EEXIST, reason: why)
        }
        if rename(temporary, path) != 0 {
            let e = errno
            unlink(temporary)
            throw WriteError(path: path, operation: "rename \(temporary) to", errno: e, reason: nil)
        }
    }
}
