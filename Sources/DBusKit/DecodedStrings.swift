#if canImport(Glibc)
import Glibc
#endif

/// Strings taken from messages, kept for the messages that follow: the path, interface, member, sender
/// and signature of a signal repeat from one to the next (a burst of GATT notifications differs in the
/// value alone). A string found here costs a length and a byte comparison instead of a UTF-8 check, an
/// allocation and a copy, and the decoded message's destruction a release instead of a free. Bounded:
/// the oldest entry makes room. Confined to the connection's queue.
struct DecodedStrings {
    static let capacity = 16
    /// Longer strings are not kept (and not compared).
    static let longest = 255

    private var entries: [String] = []
    private var oldest = 0

    init() {}

    /// `String(cString: pointer)`, from the kept strings when one has the same bytes.
    mutating func string(_ pointer: UnsafePointer<CChar>) -> String {
        string(UnsafeRawBufferPointer(start: pointer, count: strlen(pointer)))
    }

    /// The same for the bytes of a string without its NUL (as a message's wire form holds it).
    mutating func string(_ text: UnsafeRawBufferPointer) -> String {
        let length = text.count
        guard length <= Self.longest, let pointer = text.baseAddress else { return String(decoding: text, as: UTF8.self) }
        for entry in entries where entry.utf8.count == length {
            let same = entry.utf8.withContiguousStorageIfAvailable { bytes in
                guard let base = bytes.baseAddress else { return length == 0 }
                return memcmp(base, pointer, length) == 0
            }
            if same == true { return entry }
        }
        let decoded = String(decoding: text, as: UTF8.self)
        // A string that needed repair (not UTF-8) has other bytes than the message: never kept.
        guard decoded.utf8.count == length else { return decoded }
        if entries.count < Self.capacity {
            entries.append(decoded)
        } else {
            entries[oldest] = decoded
            oldest = (oldest + 1) % Self.capacity
        }
        return decoded
    }
}
