import GlucoseProfile

/// Calendar arithmetic for ISO 8601 timestamps without Foundation (proleptic Gregorian, UTC based).
public enum Timestamp {
    /// Reads a local date-time `YYYY-MM-DDTHH:MM:SS` (no zone) as if it were UTC, in milliseconds.
    /// Nil when the text is not exactly that shape or a field is out of range.
    public static func localMillis(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        guard b.count == 19, b[4] == UInt8(ascii: "-"), b[7] == UInt8(ascii: "-"), b[10] == UInt8(ascii: "T"),
              b[13] == UInt8(ascii: ":"), b[16] == UInt8(ascii: ":") else { return nil }
        func field(_ range: Range<Int>) -> Int? {
            var v = 0
            for k in range {
                let c = b[k]
                guard c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") else { return nil }
                v = v * 10 + Int(c - UInt8(ascii: "0"))
            }
            return v
        }
        guard let year = field(0..<4), let month = field(5..<7), let day = field(8..<10),
              let hour = field(11..<13), let minute = field(14..<16), let second = field(17..<19),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60 else { return nil }
        let d = CivilCalendar.days(year: year, month: month, day: day)
        guard CivilCalendar.date(days: d) == (year, month, day) else { return nil }
        return (Int64(d) * 86_400 + Int64(hour * 3600 + minute * 60 + second)) * 1000
    }

    /// `YYYY-MM-DDTHH:MM:SS.mmm+HH:MM` for an instant shown at a UTC offset in minutes (`Z` never used,
    /// so followers see the meter's local time).
    public static func iso8601(millis: Int64, offsetMinutes: Int) -> String {
        let local = millis + Int64(offsetMinutes) * 60_000
        let floorDiv = { (a: Int64, b: Int64) -> Int64 in a >= 0 ? a / b : -((-a + b - 1) / b) }
        let dayCount = floorDiv(local, 86_400_000)
        let msOfDay = local - dayCount * 86_400_000
        let (y, m, d) = CivilCalendar.date(days: Int(dayCount))
        let hh = msOfDay / 3_600_000
        let mm = (msOfDay / 60_000) % 60
        let ss = (msOfDay / 1000) % 60
        let ms = msOfDay % 1000
        let sign = offsetMinutes < 0 ? "-" : "+"
        let off = abs(offsetMinutes)
        return "\(pad(y, 4))-\(pad(m, 2))-\(pad(d, 2))T\(pad(Int(hh), 2)):\(pad(Int(mm), 2)):\(pad(Int(ss), 2)).\(pad(Int(ms), 3))\(sign)\(pad(off / 60, 2)):\(pad(off % 60, 2))"
    }

    static func pad(_ v: Int, _ width: Int) -> String {
        let s = String(v)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
}
