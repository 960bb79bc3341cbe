import GlucoseProfile

/// `"1B 01 00"` or `"1b:01:00"` to bytes; test inputs only.
func hex(_ text: String) -> [UInt8] {
    let digits = text.filter { $0.isHexDigit }
    var bytes: [UInt8] = []
    var index = digits.startIndex
    while index < digits.endIndex {
        let next = digits.index(index, offsetBy: 2)
        bytes.append(UInt8(digits[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}

func date(_ y: Int, _ mo: Int, _ d: Int, _ h: Int = 0, _ mi: Int = 0, _ s: Int = 0) -> GlucoseDateTime {
    GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s)
        ?? GlucoseDateTime(year: 2000, month: 1, day: 1, hour: 0, minute: 0, second: 0)!
}

/// The error a decode throws, or nil when it succeeds.
func decodingError<T>(_ body: () throws(GlucoseDecodingError) -> T) -> GlucoseDecodingError? {
    do {
        _ = try body()
        return nil
    } catch {
        return error
    }
}
