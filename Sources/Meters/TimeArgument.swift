import GatewayCore
import GlucoseProfile

/// Times typed on the command line (`readings --since`).
public enum TimeArgument {
    /// Accepts `7d`, `24h`, `30m` (before `now`); `2024-05-01` (midnight); `2024-05-01T08:00[:00]` in
    /// `zone`; and the same with `Z` or `+02:00`/`-0500`. Nil when the text is none of these.
    public static func parse(_ text: String, now: UnixMillis, zone: MeterTimeZone?) -> UnixMillis? {
        let chars = Array(text.utf8)
        guard !chars.isEmpty, chars.count <= 40 else { return nil }
        if let unit = chars.last, [UInt8(ascii: "d"), UInt8(ascii: "h"), UInt8(ascii: "m")].contains(unit),
           let n = Int(String(decoding: chars.dropLast(), as: UTF8.self)), n >= 0, n <= 100_000 {
            let seconds: Int64 = unit == UInt8(ascii: "d") ? 86_400 : unit == UInt8(ascii: "h") ? 3600 : 60
            return now - Int64(n) * seconds * 1000
        }
        var s = Substring(text)
        func number(_ digits: Int) -> Int? {
            guard s.count >= digits else { return nil }
            let part = s.prefix(digits)
            guard part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let v = Int(part) else { return nil }
            s = s.dropFirst(digits)
            return v
        }
        func take(_ c: Character) -> Bool {
            guard s.first == c else { return false }
            s = s.dropFirst()
            return true
        }
        guard let year = number(4), take("-"), let month = number(2), take("-"), let day = number(2),
              (1...12).contains(month), day >= 1, day <= GlucoseDateTime.daysInMonth(year: year, month: month) else { return nil }
        var hour = 0, minute = 0, second = 0
        if take("T") || take(" ") {
            guard let h = number(2), take(":"), let m = number(2), h < 24, m < 60 else { return nil }
            hour = h
            minute = m
            if take(":") {
                guard let sec = number(2), sec < 60 else { return nil }
                second = sec
            }
        }
        guard let local = GlucoseDateTime(year: year, month: month, day: day, hour: hour, minute: minute, second: second) else { return nil }
        if s.isEmpty {
            guard let zone, let resolved = zone.resolve(local) else { return nil }
            return resolved.instant
        }
        var offset = 0
        if take("Z") || take("z") {
            offset = 0
        } else {
            let sign: Int
            if take("+") { sign = 1 } else if take("-") { sign = -1 } else { return nil }
            guard let oh = number(2), oh <= 18 else { return nil }
            _ = take(":")
            guard let om = number(2), om < 60 else { return nil }
            offset = sign * (oh * 3600 + om * 60)
        }
        guard s.isEmpty else { return nil }
        return (local.naiveSeconds - Int64(offset)) * 1000
    }
}
