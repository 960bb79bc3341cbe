#if canImport(Glibc)
import Glibc
#endif

/// A fresh directory under /tmp, removed by `remove()`.
public final class TempDirectory {
    public let path: String
    public init() throws {
        var template = Array("/tmp/gw-test-XXXXXX".utf8CString)
        let made = template.withUnsafeMutableBufferPointer { buffer -> Bool in
            guard let base = buffer.baseAddress else { return false }
            return mkdtemp(base) != nil
        }
        guard made else { throw TempDirectoryError(message: "mkdtemp failed") }
        path = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    @discardableResult
    public func write(_ name: String, _ text: String, mode: mode_t = 0o600) throws -> String {
        let full = path + "/" + name
        let fd = open(full, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode)
        guard fd >= 0 else { throw TempDirectoryError(message: "open \(full) failed") }
        defer { close(fd) }
        let bytes = Array(text.utf8)
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else { throw TempDirectoryError(message: "short write") }
        guard chmod(full, mode) == 0 else { throw TempDirectoryError(message: "chmod failed") }
        return full
    }

    public func remove() {
        guard let dir = opendir(path) else { return }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            if name != "." && name != ".." { unlink(path + "/" + name) }
        }
        closedir(dir)
        rmdir(path)
    }
}

/// A step of `TempDirectory` that failed.
public struct TempDirectoryError: Error, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}
