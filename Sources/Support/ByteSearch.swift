/// Substring search on UTF-8 bytes.
///
/// `String.contains(_:)` and `firstRange(of:)` with a string argument come from the standard library's
/// string-processing module, which links its regular-expression engine into the program (about 1 MB of
/// code, and conformance records the runtime scans whenever it sets up a generic type). The gateway only
/// looks for ASCII words in headers, messages and file names, where comparing bytes is exact: a match of
/// bytes is a match of text, and it never treats a combining mark after the word as part of it.
extension StringProtocol {
    /// Whether `needle`'s UTF-8 bytes occur in this text's (an empty needle occurs everywhere).
    public func containsBytes(_ needle: some StringProtocol) -> Bool {
        utf8EndOfFirst(needle) != nil
    }

    /// The index just after the first occurrence of `needle`'s UTF-8 bytes, or nil.
    public func utf8EndOfFirst(_ needle: some StringProtocol) -> Index? {
        let pattern = Array(needle.utf8)
        guard !pattern.isEmpty else { return startIndex }
        let bytes = utf8
        var start = bytes.startIndex
        while start != bytes.endIndex {
            var probe = start
            var matched = 0
            while matched < pattern.count, probe != bytes.endIndex, bytes[probe] == pattern[matched] {
                matched += 1
                probe = bytes.index(after: probe)
            }
            if matched == pattern.count { return probe }
            start = bytes.index(after: start)
        }
        return nil
    }
}
