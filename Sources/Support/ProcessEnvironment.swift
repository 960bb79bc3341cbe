#if canImport(Glibc)
import Glibc
#endif

public enum ProcessEnvironment {
    /// The process environment as a dictionary, without Foundation.
    public static func current() -> [String: String] {
        var result: [String: String] = [:]
        var pointer = environ
        while let entry = pointer.pointee {
            // Split at the first `=` byte, not character: names and values are bytes to the system.
            let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(entry).assumingMemoryBound(to: UInt8.self), count: strlen(entry))
            if let eq = bytes.firstIndex(of: UInt8(ascii: "=")) {
                result[String(decoding: UnsafeBufferPointer(rebasing: bytes[..<eq]), as: UTF8.self)] =
                    String(decoding: UnsafeBufferPointer(rebasing: bytes[(eq + 1)...]), as: UTF8.self)
            }
            pointer += 1
        }
        return result
    }
}
