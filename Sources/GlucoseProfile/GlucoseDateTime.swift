/// The 7-byte Date Time of the Glucose Service (Base Time of 0x2A18, the user-facing-time filter of
/// 0x2A52): year uint16 (little-endian), month, day, hours, minutes, seconds. The time has no zone: it is the
/// meter's wall clock.
///
/// Validated on decode and construction: year 1582...9999, month 1...12, day 1...days in that month
/// (proleptic Gregorian leap years), hours < 24, minutes < 60, seconds < 60. The Date Time characteristic
/// lets year, month or day be 0 for "not known"; a glucose record cannot be placed in time with such a
/// value, so the decoders report it as an invalid value naming the part.
///
/// It is also the gateway's one civil date-time type (a wall time without a zone), used for time-zone
/// arithmetic and command-line times. Two ways give a value that is not a valid date, and `isValid`
/// tells: `GlucoseMeasurement` decoded with `keepingInvalidBaseTime` keeps a broken Base Time as sent, and
/// `init(naiveSeconds:)` far outside the year range. Such a value is never placed in time
/// (`MeterTimeZone.resolve` refuses it): a month 13 is not read as January of the next year.
public struct GlucoseDateTime: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int
    public var hour: Int
    public var minute: Int
    public var second: Int

    public init?(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) {
        guard GlucoseDateTime.firstInvalidPart(year: year, month: month, day: day, hour: hour, minute: minute, second: second) == nil
        else { return nil }
        self.init(unchecked: year, month, day, hour, minute, second)
    }

    init(unchecked year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int) {
        self.year = year
        self.month = month
        self.day = day
        self.hour = hour
        self.minute = minute
        self.second = second
    }

    /// Decodes exactly the 7-byte layout (trailing bytes ignored).
    public init(bytes: some Collection<UInt8>) throws(GlucoseDecodingError) {
        self = try GlucoseDateTime.decode(bytes).get()
    }

    /// Decodes without throwing: the value or the typed error.
    public static func decode(_ bytes: some Collection<UInt8>) -> Result<GlucoseDateTime, GlucoseDecodingError> {
        withContiguousBytes(bytes) { raw in
            var reader = ByteReader(raw)
            let value = reader.dateTime("Date Time")
            return reader.result(value)
        }
    }

    /// The wall time `seconds` after 1970-01-01T00:00:00 (before it when negative), no zone applied; the
    /// inverse of `naiveSeconds`. Valid for every instant in the years 1582...9999.
    public init(naiveSeconds seconds: Int64) {
        var days = seconds / 86_400
        var rest = seconds % 86_400
        if rest < 0 {
            rest += 86_400
            days -= 1
        }
        let (y, m, d) = CivilCalendar.date(days: Int(days))
        let r = Int(rest)
        self.init(unchecked: y, m, d, r / 3600, r % 3600 / 60, r % 60)
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS` as `isoString` writes it. With `requiringValidDate` (the default) nil
    /// unless the fields make a valid date; without it, the fields are kept as written, as long as each is
    /// a number in the range of its byte (the text of a base time decoded with `keepingInvalidBaseTime`).
    public init?(isoString text: String, requiringValidDate: Bool = true) {
        guard let f = CivilCalendar.isoFields(text), f[1...].allSatisfy({ $0 <= 255 }) else { return nil }
        if requiringValidDate {
            self.init(year: f[0], month: f[1], day: f[2], hour: f[3], minute: f[4], second: f[5])
        } else {
            self.init(unchecked: f[0], f[1], f[2], f[3], f[4], f[5])
        }
    }

    /// Whether the fields make a date of the years 1582...9999 (always, except as the type's comment says).
    public var isValid: Bool {
        GlucoseDateTime.firstInvalidPart(year: year, month: month, day: day, hour: hour, minute: minute, second: second) == nil
    }

    /// Returned by a failed read; never escapes a decoder.
    static let placeholder = GlucoseDateTime(unchecked: 2000, 1, 1, 0, 0, 0)

    /// The 7 bytes, year little-endian. Years outside 0...65535 (only reachable by mutating the fields)
    /// are truncated to 16 bits.
    public func encoded() -> [UInt8] {
        let y = UInt16(truncatingIfNeeded: year)
        return [
            UInt8(truncatingIfNeeded: y), UInt8(truncatingIfNeeded: y >> 8),
            UInt8(truncatingIfNeeded: month), UInt8(truncatingIfNeeded: day),
            UInt8(truncatingIfNeeded: hour), UInt8(truncatingIfNeeded: minute), UInt8(truncatingIfNeeded: second),
        ]
    }

    /// ISO 8601 local date-time without zone: `2024-03-05T14:30:00`.
    public var isoString: String {
        CivilCalendar.isoDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
    }

    /// Calls `body` with the UTF-8 bytes of `isoString`, written on the stack.
    @inlinable
    public func withISOBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try CivilCalendar.withISODateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second, body)
    }

    public var description: String { isoString }

    /// This wall-clock time moved by `minutes` (negative moves back), with day, month and year roll-over
    /// and leap days of the proleptic Gregorian calendar. Seconds are kept. User-facing time is
    /// `baseTime.adding(minutes: timeOffset)`.
    /// Offsets beyond about 11 000 years are clamped so that the arithmetic cannot overflow.
    public func adding(minutes: Int) -> GlucoseDateTime {
        let step = min(max(minutes, -6_000_000_000), 6_000_000_000)
        let total = (CivilCalendar.days(year: year, month: month, day: day) * 1440) + hour * 60 + minute + step
        let days = total >= 0 ? total / 1440 : (total - 1439) / 1440
        let minuteOfDay = total - days * 1440
        let (y, m, d) = CivilCalendar.date(days: days)
        return GlucoseDateTime(unchecked: y, m, d, minuteOfDay / 60, minuteOfDay % 60, second)
    }

    /// Seconds since 1970-01-01T00:00:00 of the same wall clock read as if it were UTC (no zone applied).
    public var naiveSeconds: Int64 {
        Int64(CivilCalendar.days(year: year, month: month, day: day)) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    public static func < (lhs: GlucoseDateTime, rhs: GlucoseDateTime) -> Bool {
        (lhs.year, lhs.month, lhs.day, lhs.hour, lhs.minute, lhs.second)
            < (rhs.year, rhs.month, rhs.day, rhs.hour, rhs.minute, rhs.second)
    }

    public static func isLeapYear(_ year: Int) -> Bool {
        year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
    }

    /// Days in a month of the proleptic Gregorian calendar; 0 for a month outside 1...12, so that no day
    /// of a month 13 is ever valid.
    public static func daysInMonth(year: Int, month: Int) -> Int {
        switch month {
        case 1, 3, 5, 7, 8, 10, 12: return 31
        case 4, 6, 9, 11: return 30
        case 2: return isLeapYear(year) ? 29 : 28
        default: return 0
        }
    }

    struct InvalidPart {
        var name: StaticString
        var offset: Int
        var value: Int
        var allowed: StaticString
    }

    @inline(__always)
    static func firstInvalidPart(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> InvalidPart? {
        if year < 1582 || year > 9999 { return InvalidPart(name: "year", offset: 0, value: year, allowed: "1582...9999") }
        if month < 1 || month > 12 { return InvalidPart(name: "month", offset: 2, value: month, allowed: "1...12") }
        if day < 1 || day > daysInMonth(year: year, month: month) {
            return InvalidPart(name: "day", offset: 3, value: day, allowed: "the days of its month")
        }
        if hour > 23 || hour < 0 { return InvalidPart(name: "hours", offset: 4, value: hour, allowed: "0...23") }
        if minute > 59 || minute < 0 { return InvalidPart(name: "minutes", offset: 5, value: minute, allowed: "0...59") }
        if second > 59 || second < 0 { return InvalidPart(name: "seconds", offset: 6, value: second, allowed: "0...59") }
        return nil
    }
}
