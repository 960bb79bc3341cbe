/// Proleptic Gregorian calendar arithmetic on day counts since 1970-01-01, valid for any year
/// (H. Hinnant's `days_from_civil` / `civil_from_days`). The one place the gateway turns civil dates
/// into day numbers and back.
public enum CivilCalendar {
    /// Days since 1970-01-01 of a civil date (negative before it). `month` is 1...12.
    @inlinable
    public static func days(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// The civil date `days` days after 1970-01-01 (before it when negative).
    @inlinable
    public static func date(days: Int) -> (year: Int, month: Int, day: Int) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}

/// ISO 8601 text of wall times and instants: the one formatter and parser behind `decode`, the commands'
/// times, the upload bodies' `dateString` and `effectiveDateTime`, and the stored user-facing time.
extension CivilCalendar {
    /// `YYYY-MM-DDTHH:MM:SS` (the year at least four digits, `-` before a negative one).
    public static func isoDateTime(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> String {
        withISODateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second) {
            String(decoding: $0, as: UTF8.self)
        }
    }

    /// `YYYY-MM-DDTHH:MM:SS` of the wall time `seconds` after 1970-01-01T00:00:00 (before it when negative).
    public static func isoDateTime(naiveSeconds seconds: Int64) -> String {
        withBuffer(isoDateTimeCapacity) { writeISODateTime(naiveSeconds: seconds, into: $0) }
    }

    /// `2024-05-01T08:00:00Z` for an instant in Unix milliseconds (the milliseconds dropped).
    public static func isoUTC(millis: Int64) -> String {
        isoDateTime(naiveSeconds: floorDivide(millis, 1000).quotient) + "Z"
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmm+HH:MM` for an instant shown at a UTC offset in minutes (`Z` never used,
    /// so followers see the meter's local time).
    public static func iso8601(millis: Int64, offsetMinutes: Int) -> String {
        withISO8601(millis: millis, offsetMinutes: offsetMinutes) { String(decoding: $0, as: UTF8.self) }
    }

    /// Calls `body` with the UTF-8 bytes of `isoDateTime(year:month:day:hour:minute:second:)`, written on
    /// the stack: the upload bodies and keys take the text without a `String` built for it.
    @inlinable
    public static func withISODateTime<R>(
        year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, _ body: (UnsafeBufferPointer<UInt8>) throws -> R
    ) rethrows -> R {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: isoDateTimeCapacity) { buffer in
            let count = writeISODateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second, into: buffer)
            return try body(UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// Calls `body` with the UTF-8 bytes of `iso8601(millis:offsetMinutes:)`, written on the stack.
    @inlinable
    public static func withISO8601<R>(millis: Int64, offsetMinutes: Int, _ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: iso8601Capacity) { buffer in
            let count = writeISO8601(millis: millis, offsetMinutes: offsetMinutes, into: buffer)
            return try body(UnsafeBufferPointer(rebasing: buffer[..<count]))
        }
    }

    /// The most bytes `writeISODateTime` writes: a sign and six fields of at most 20 characters
    /// (`Int.min`) with their five separators.
    @inlinable static var isoDateTimeCapacity: Int { 1 + 20 + 5 * 21 }
    /// The most bytes `writeISO8601` writes: the date-time, `.mmm`, the sign and `HH:MM` (hours up to 20 characters).
    @inlinable static var iso8601Capacity: Int { isoDateTimeCapacity + 4 + 1 + 20 + 3 }

    /// Writes `isoDateTime(year:...)` at the start of `out` and returns its length; writes nothing (0) into
    /// a buffer shorter than `isoDateTimeCapacity`.
    @usableFromInline
    static func writeISODateTime(
        year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, into out: UnsafeMutableBufferPointer<UInt8>
    ) -> Int {
        guard out.count >= isoDateTimeCapacity, let p = out.baseAddress else { return 0 }
        var at = 0
        if year < 0 {
            p[at] = UInt8(ascii: "-")
            at += 1
        }
        put(abs(year), width: 4, p, &at)
        put(UInt8(ascii: "-"), month, p, &at)
        put(UInt8(ascii: "-"), day, p, &at)
        put(UInt8(ascii: "T"), hour, p, &at)
        put(UInt8(ascii: ":"), minute, p, &at)
        put(UInt8(ascii: ":"), second, p, &at)
        return at
    }

    static func writeISODateTime(naiveSeconds seconds: Int64, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let (days, rest) = floorDivide(seconds, 86_400)
        let (y, m, d) = date(days: Int(days))
        let r = Int(rest)
        return writeISODateTime(year: y, month: m, day: d, hour: r / 3600, minute: r / 60 % 60, second: r % 60, into: out)
    }

    /// Writes `iso8601(millis:offsetMinutes:)` at the start of `out` and returns its length; writes nothing
    /// (0) into a buffer shorter than `iso8601Capacity`.
    @usableFromInline
    static func writeISO8601(millis: Int64, offsetMinutes: Int, into out: UnsafeMutableBufferPointer<UInt8>) -> Int {
        guard out.count >= iso8601Capacity, let p = out.baseAddress else { return 0 }
        let (seconds, ms) = floorDivide(millis + Int64(offsetMinutes) * 60_000, 1000)
        var at = writeISODateTime(naiveSeconds: seconds, into: out)
        p[at] = UInt8(ascii: ".")
        at += 1
        put(Int(ms), width: 3, p, &at)
        put(offsetMinutes < 0 ? UInt8(ascii: "-") : UInt8(ascii: "+"), abs(offsetMinutes) / 60, p, &at)
        put(UInt8(ascii: ":"), abs(offsetMinutes) % 60, p, &at)
        return at
    }

    @inline(__always)
    private static func put(_ value: Int, width: Int, _ p: UnsafeMutablePointer<UInt8>, _ at: inout Int) {
        PaddedDecimal.write(value, width: width, p, &at)
    }

    /// `separator`, then `value` in two digits at least.
    @inline(__always)
    private static func put(_ separator: UInt8, _ value: Int, _ p: UnsafeMutablePointer<UInt8>, _ at: inout Int) {
        p[at] = separator
        at += 1
        PaddedDecimal.write(value, width: 2, p, &at)
    }

    private static func withBuffer(_ capacity: Int, _ write: (UnsafeMutableBufferPointer<UInt8>) -> Int) -> String {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            String(decoding: UnsafeBufferPointer(rebasing: buffer[..<write(buffer)]), as: UTF8.self)
        }
    }

    /// Reads exactly `YYYY-MM-DDTHH:MM:SS` (no zone) as seconds after 1970-01-01T00:00:00 of the same wall
    /// time. Nil for any other shape or a field out of range (month 13, February 30, hour 24, second 60).
    public static func naiveSeconds(isoDateTime text: String) -> Int64? {
        let b = Array(text.utf8)
        guard b.count == 19, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":"), let f = isoFields(text) else { return nil }
        let (year, month, day, hour, minute, second) = (f[0], f[1], f[2], f[3], f[4], f[5])
        guard (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60 else { return nil }
        let d = days(year: year, month: month, day: day)
        guard date(days: d) == (year, month, day) else { return nil }
        return Int64(d) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    /// The six numbers of `Y-M-DTh:m:s` as written, each one or more digits and at most 65535, in that
    /// order; nil for any other shape. No range is checked: `isoDateTime` writes what a meter sent, month
    /// 13 included, and this reads it back.
    static func isoFields(_ text: String) -> [Int]? {
        let separators: [UInt8] = [UInt8(ascii: "-"), UInt8(ascii: "-"), UInt8(ascii: "T"), UInt8(ascii: ":"), UInt8(ascii: ":")]
        var fields: [Int] = []
        fields.reserveCapacity(6)
        var current: Int?
        for c in text.utf8 {
            if c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") {
                let v = (current ?? 0) * 10 + Int(c - UInt8(ascii: "0"))
                guard v <= 65_535 else { return nil }
                current = v
                continue
            }
            guard let value = current, fields.count < separators.count, c == separators[fields.count] else { return nil }
            fields.append(value)
            current = nil
        }
        guard let last = current, fields.count == 5 else { return nil }
        fields.append(last)
        return fields
    }

    private static func floorDivide(_ a: Int64, _ b: Int64) -> (quotient: Int64, remainder: Int64) {
        var q = a / b
        var r = a % b
        if r < 0 {
            q -= 1
            r += b
        }
        return (q, r)
    }
}
