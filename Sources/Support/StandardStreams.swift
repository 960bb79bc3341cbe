#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Synchronization

/// Unbuffered writes to the standard streams through the file descriptors, so no shared C `FILE*`
/// global is touched from concurrent code. A write that fails (a full disk, `/dev/full`, a closed pipe
/// end) is remembered with its errno, so the command can exit 1 instead of 0 with a truncated output.
public enum StandardStream {
    private static let outputErrno = Atomic<Int32>(0)
    private static let errorErrno = Atomic<Int32>(0)

    public static func writeError(_ text: String) { write(fd: 2, text) }
    public static func writeOutput(_ text: String) { write(fd: 1, text) }

    /// The errno of the first failed write to stdout, or nil when every write so far succeeded.
    public static var outputFailure: Int32? { failure(outputErrno.load(ordering: .acquiring)) }
    /// The errno of the first failed write to stderr, or nil.
    public static var errorFailure: Int32? { failure(errorErrno.load(ordering: .acquiring)) }

    /// Flushes C stdio (which the gateway does not use, but a library might) and records a failure of it
    /// as a failed write to stdout.
    public static func flush() {
        if fflush(nil) != 0 { record(fd: 1, errno) }
    }

    /// The text of an errno, e.g. "No space left on device".
    public static func describe(_ code: Int32) -> String {
        guard let text = strerror(code) else { return "error \(code)" }
        return String(cString: text)
    }

    private static func failure(_ value: Int32) -> Int32? { value == 0 ? nil : value }

    private static func record(fd: Int32, _ code: Int32) {
        let value = code == 0 ? EIO : code
        if fd == 1 {
            _ = outputErrno.compareExchange(expected: 0, desired: value, ordering: .acquiringAndReleasing)
        } else {
            _ = errorErrno.compareExchange(expected: 0, desired: value, ordering: .acquiringAndReleasing)
        }
    }

    static func write(fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeMutableBytes { buffer in
                #if canImport(Glibc)
                Glibc.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                #else
                Darwin.write(fd, buffer.baseAddress! + offset, buffer.count - offset)
                #endif
            }
            if n < 0 {
                if errno == EINTR { continue }
                record(fd: fd, errno)
                return
            }
            if n == 0 {
                record(fd: fd, EIO)
                return
            }
            offset += n
        }
    }
}
