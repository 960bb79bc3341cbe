#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The few file-system calls the config loader needs, over the C library (no Foundation); files are read
/// with `FileContents`.
enum ConfigFiles {
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
