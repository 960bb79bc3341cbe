#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The few file-system calls the config loader needs, over the C library (no Foundation); files are read
/// with `FileContents`.
public enum ConfigFiles {
    public struct Info: Sendable {
        public var mode: UInt32
        public var isRegular: Bool
        public var isDirectory: Bool
    }

    public static func info(_ path: String) -> Info? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        let type = UInt32(st.st_mode) & UInt32(S_IFMT)
        return Info(mode: UInt32(st.st_mode) & 0o7777, isRegular: type == UInt32(S_IFREG), isDirectory: type == UInt32(S_IFDIR))
    }

    /// Why a path cannot be looked up, to follow "the file ".
    public struct LookUpError: Error {
        public var code: Int32
        public var text: String {
            switch code {
            case ENOENT: "does not exist"
            case ELOOP: "is a symbolic link loop"
            case ENOTDIR: "has a part that is not a directory"
            case EACCES: "cannot be reached (permission denied)"
            default: "cannot be looked up (\(FileContents.errorText(code)))"
            }
        }
    }

    /// `info`, or why there is none.
    public static func lookUp(_ path: String) -> Result<Info, LookUpError> {
        if let found = info(path) { return .success(found) }
        return .failure(LookUpError(code: errno))
    }

    /// Why a file the gateway replaces by an atomic rename (the metrics file) cannot be at `path`: an
    /// existing path that is not a regular file (a device such as /dev/null, a FIFO, a directory, /proc)
    /// would be replaced by a regular file, or the rename fails. Nil when the path is free, a regular file or
    /// a symbolic link outside /proc and /sys.
    public static func replaceableProblem(_ path: String) -> String? {
        var st = stat()
        if lstat(path, &st) != 0 {
            return errno == ENOENT ? nil : "cannot be looked up (\(FileContents.errorText(errno)))"
        }
        let type = UInt32(st.st_mode) & UInt32(S_IFMT)
        // A symbolic link is replaced itself by the rename, never what it points at.
        guard type == UInt32(S_IFREG) || type == UInt32(S_IFLNK) else {
            return "exists and is not a regular file (a device, FIFO, socket or directory is never replaced)"
        }
        // /proc and /sys hold regular-looking files that are the kernel's, never the gateway's.
        if let real = realpath(directory(of: path), nil) {
            defer { free(real) }
            let dir = String(cString: real)
            if ["/proc", "/sys"].contains(where: { dir == $0 || dir.hasPrefix($0 + "/") }) { return "is in /proc or /sys" }
        }
        return nil
    }

    public static func exists(_ path: String) -> Bool { info(path) != nil }

    public static func isExecutable(_ path: String) -> Bool {
        guard let i = info(path), i.isRegular else { return false }
        return access(path, X_OK) == 0
    }

    public static func octal(_ mode: UInt32) -> String {
        let s = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - s.count)) + s
    }

    /// The directory part of a path ("." when there is none).
    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        if slash == path.startIndex { return "/" }
        return String(path[..<slash])
    }

    /// `path` when absolute, else joined to `base`.
    public static func resolve(_ path: String, relativeTo base: String) -> String {
        if path.hasPrefix("/") { return path }
        if base == "." { return path }
        return base.hasSuffix("/") ? base + path : base + "/" + path
    }
}
