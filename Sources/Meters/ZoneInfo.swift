#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import GatewayCore
import GlucoseProfile
import Support

/// The UTC offsets of one IANA time zone, read from the system's compiled tz database (TZif, RFC 8536),
/// with the POSIX TZ rule of the file's footer for instants after its last transition.
///
/// The gateway reads zone files itself instead of linking Foundation's time zones: Foundation alone
/// costs about 8 MB of resident memory per process on a Raspberry Pi, more than the whole download.
struct ZoneInfo: Sendable, Equatable {
    /// Transition instants (seconds since the epoch, ascending) and the offset in force from each.
    var transitions: [Int64]
    var offsetsAfter: [Int32]
    /// Offset before the first transition.
    var initialOffset: Int32
    /// Rule for instants after the last transition (nil: the last offset stays).
    var rule: PosixTZRule?

    func offset(at t: Int64) -> Int {
        guard let last = transitions.last else { return rule?.offset(at: t) ?? Int(initialOffset) }
        if t >= last, let rule { return rule.offset(at: t) }
        if t < transitions[0] { return Int(initialOffset) }
        // Last transition <= t.
        var low = 0
        var high = transitions.count - 1
        while low < high {
            let mid = (low + high + 1) / 2
            if transitions[mid] <= t { low = mid } else { high = mid - 1 }
        }
        return Int(offsetsAfter[low])
    }

    /// Parses a TZif file; nil when it is not one.
    init?(tzif bytes: [UInt8]) {
        var reader = BigEndianReader(bytes)
        guard let v1 = reader.header() else { return nil }
        if v1.version >= 2 {
            // Skip the 32-bit block, then read the 64-bit one and the footer.
            guard reader.skip(v1.dataLength(timeSize: 4)), let v2 = reader.header(), v2.version >= 2 else { return nil }
            guard let parsed = ZoneInfo.block(&reader, v2, timeSize: 8) else { return nil }
            self = parsed
            if reader.byte() == 0x0A, let footer = reader.line(), !footer.isEmpty {
                rule = PosixTZRule(footer)
            }
        } else {
            guard let parsed = ZoneInfo.block(&reader, v1, timeSize: 4) else { return nil }
            self = parsed
        }
    }

    init(transitions: [Int64], offsetsAfter: [Int32], initialOffset: Int32, rule: PosixTZRule?) {
        self.transitions = transitions
        self.offsetsAfter = offsetsAfter
        self.initialOffset = initialOffset
        self.rule = rule
    }

    private static func block(_ reader: inout BigEndianReader, _ h: TZifHeader, timeSize: Int) -> ZoneInfo? {
        var times: [Int64] = []
        times.reserveCapacity(h.timeCount)
        for _ in 0..<h.timeCount {
            guard let t = timeSize == 8 ? reader.int64() : reader.int32().map(Int64.init) else { return nil }
            times.append(t)
        }
        var indices: [Int] = []
        for _ in 0..<h.timeCount {
            guard let i = reader.byte() else { return nil }
            indices.append(Int(i))
        }
        var offsets: [Int32] = []
        for _ in 0..<h.typeCount {
            guard let utoff = reader.int32(), reader.byte() != nil, reader.byte() != nil else { return nil }
            offsets.append(utoff)
        }
        guard !offsets.isEmpty, indices.allSatisfy({ $0 < offsets.count }) else { return nil }
        guard reader.skip(h.charCount + h.leapCount * (timeSize + 4) + h.isStdCount + h.isUTCCount) else { return nil }
        return ZoneInfo(transitions: times, offsetsAfter: indices.map { offsets[$0] }, initialOffset: offsets[0], rule: nil)
    }
}

struct TZifHeader {
    var version: Int
    var isUTCCount, isStdCount, leapCount, timeCount, typeCount, charCount: Int

    func dataLength(timeSize: Int) -> Int {
        timeCount * timeSize + timeCount + typeCount * 6 + charCount + leapCount * (timeSize + 4) + isStdCount + isUTCCount
    }
}

struct BigEndianReader {
    let bytes: [UInt8]
    var offset = 0
    init(_ bytes: [UInt8]) { self.bytes = bytes }

    mutating func byte() -> UInt8? {
        guard offset < bytes.count else { return nil }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func skip(_ n: Int) -> Bool {
        guard n >= 0, bytes.count - offset >= n else { return false }
        offset += n
        return true
    }

    mutating func int32() -> Int32? { unsigned(UInt32.self).map { Int32(bitPattern: $0) } }

    mutating func int64() -> Int64? { unsigned(UInt64.self).map { Int64(bitPattern: $0) } }

    private mutating func unsigned<T: FixedWidthInteger & UnsignedInteger>(_: T.Type) -> T? {
        let size = T.bitWidth / 8
        guard bytes.count - offset >= size else { return nil }
        var v: T = 0
        for i in 0..<size { v = v << 8 | T(bytes[offset + i]) }
        offset += size
        return v
    }

    mutating func header() -> TZifHeader? {
        guard bytes.count - offset >= 44,
              bytes[offset] == 0x54, bytes[offset + 1] == 0x5A, bytes[offset + 2] == 0x69, bytes[offset + 3] == 0x66
        else { return nil }
        let versionByte = bytes[offset + 4]
        let version = versionByte == 0 ? 1 : Int(versionByte) - 0x30
        offset += 20
        var counts: [Int] = []
        for _ in 0..<6 {
            guard let c = int32(), c >= 0, c < 1_000_000 else { return nil }
            counts.append(Int(c))
        }
        return TZifHeader(version: version, isUTCCount: counts[0], isStdCount: counts[1], leapCount: counts[2],
                          timeCount: counts[3], typeCount: counts[4], charCount: counts[5])
    }

    /// Bytes up to the next newline, as text; nil when there is no newline.
    mutating func line() -> String? {
        guard let end = bytes[offset...].firstIndex(of: 0x0A) else { return nil }
        defer { offset = end + 1 }
        return String(decoding: bytes[offset..<end], as: UTF8.self)
    }
}

/// A POSIX TZ string such as `CET-1CEST,M3.5.0,M10.5.0/3` (RFC 8536 section 3.3, with its extensions:
/// hours up to 167 and negative transition times).
struct PosixTZRule: Sendable, Equatable {
    enum DateRule: Sendable, Equatable {
        /// Jn: day 1...365, February 29 never counted.
        case julianNoLeap(Int)
        /// n: day 0...365, February 29 counted.
        case zeroBased(Int)
        /// Mm.w.d: day d (0 = Sunday) of week w (5 = last) of month m.
        case monthWeekDay(month: Int, week: Int, weekday: Int)
    }

    struct Transition: Sendable, Equatable {
        var date: DateRule
        /// Local time of the change, seconds after midnight (default 02:00).
        var time: Int
    }

    /// UTC offsets (seconds east of Greenwich).
    var standardOffset: Int
    var daylightOffset: Int?
    var start: Transition?
    var end: Transition?

    init?(_ text: String) {
        var scanner = TZScanner(Array(text.utf8))
        guard scanner.name(), let std = scanner.offset() else { return nil }
        standardOffset = -std
        if scanner.atEnd { return }
        guard scanner.name() else { return nil }
        if let dst = scanner.offset() {
            daylightOffset = -dst
        } else {
            daylightOffset = standardOffset + 3600
        }
        if scanner.atEnd {
            // No rule given: the historical US default.
            start = Transition(date: .monthWeekDay(month: 3, week: 2, weekday: 0), time: 7200)
            end = Transition(date: .monthWeekDay(month: 11, week: 1, weekday: 0), time: 7200)
            return
        }
        guard scanner.take(0x2C), let s = scanner.transition(), scanner.take(0x2C), let e = scanner.transition(), scanner.atEnd else {
            return nil
        }
        start = s
        end = e
    }

    func offset(at t: Int64) -> Int {
        guard let dst = daylightOffset, let start, let end else { return standardOffset }
        let year = GlucoseDateTime(naiveSeconds: t + Int64(standardOffset)).year
        let startUTC = PosixTZRule.localSeconds(start, year: year) - Int64(standardOffset)
        let endUTC = PosixTZRule.localSeconds(end, year: year) - Int64(dst)
        if startUTC < endUTC {
            return t >= startUTC && t < endUTC ? dst : standardOffset
        }
        // Southern hemisphere: daylight time spans the new year.
        return t >= endUTC && t < startUTC ? standardOffset : dst
    }

    /// The transition's local wall time in `year`, as naive seconds.
    static func localSeconds(_ transition: Transition, year: Int) -> Int64 {
        let jan1 = Int64(CivilCalendar.days(year: year, month: 1, day: 1))
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
        var day: Int64
        switch transition.date {
        case .julianNoLeap(let n):
            day = jan1 + Int64(n - 1) + (leap && n >= 60 ? 1 : 0)
        case .zeroBased(let n):
            day = jan1 + Int64(n)
        case .monthWeekDay(let month, let week, let weekday):
            let first = Int64(CivilCalendar.days(year: year, month: month, day: 1))
            // 1970-01-01 was a Thursday (4).
            let firstWeekday = Int(((first % 7) + 11) % 7)
            var dayOfMonth = 1 + (weekday - firstWeekday + 7) % 7 + (week - 1) * 7
            let length = GlucoseDateTime.daysInMonth(year: year, month: month)
            while dayOfMonth > length { dayOfMonth -= 7 }
            day = first + Int64(dayOfMonth - 1)
        }
        return day * 86_400 + Int64(transition.time)
    }
}

struct TZScanner {
    let s: [UInt8]
    var i = 0
    init(_ s: [UInt8]) { self.s = s }

    var atEnd: Bool { i >= s.count }

    mutating func take(_ c: UInt8) -> Bool {
        guard i < s.count, s[i] == c else { return false }
        i += 1
        return true
    }

    /// A zone abbreviation: three or more letters, or `<...>` quoted.
    mutating func name() -> Bool {
        if take(0x3C) {
            guard let close = s[i...].firstIndex(of: 0x3E) else { return false }
            i = close + 1
            return true
        }
        let start = i
        while i < s.count, (s[i] >= 0x41 && s[i] <= 0x5A) || (s[i] >= 0x61 && s[i] <= 0x7A) { i += 1 }
        return i - start >= 3
    }

    mutating func number() -> Int? {
        let start = i
        var v = 0
        while i < s.count, s[i] >= 0x30, s[i] <= 0x39, i - start < 4 {
            v = v * 10 + Int(s[i] - 0x30)
            i += 1
        }
        return i > start ? v : nil
    }

    /// `[+-]hh[:mm[:ss]]` in seconds, sign as written.
    mutating func offset() -> Int? {
        var sign = 1
        if take(0x2D) { sign = -1 } else { _ = take(0x2B) }
        guard i < s.count, s[i] >= 0x30, s[i] <= 0x39, let h = number(), h <= 167 else { return nil }
        var seconds = h * 3600
        if take(0x3A) {
            guard let m = number(), m < 60 else { return nil }
            seconds += m * 60
            if take(0x3A) {
                guard let sec = number(), sec < 60 else { return nil }
                seconds += sec
            }
        }
        return sign * seconds
    }

    mutating func transition() -> PosixTZRule.Transition? {
        let date: PosixTZRule.DateRule
        if take(0x4D) {
            guard let m = number(), (1...12).contains(m), take(0x2E), let w = number(), (1...5).contains(w),
                  take(0x2E), let d = number(), (0...6).contains(d) else { return nil }
            date = .monthWeekDay(month: m, week: w, weekday: d)
        } else if take(0x4A) {
            guard let n = number(), (1...365).contains(n) else { return nil }
            date = .julianNoLeap(n)
        } else {
            guard let n = number(), (0...365).contains(n) else { return nil }
            date = .zeroBased(n)
        }
        var time = 7200
        if take(0x2F) {
            guard let t = offset() else { return nil }
            time = t
        }
        return PosixTZRule.Transition(date: date, time: time)
    }
}

/// Where zone files live and how the system zone is found.
enum ZoneDatabase {
    static func directory(environment: [String: String]) -> String {
        if let dir = environment["TZDIR"], !dir.isEmpty { return dir }
        return "/usr/share/zoneinfo"
    }

    /// Whether `identifier` looks like an IANA name (`Area/City`, `UTC`): no `..`, no leading `/`.
    static func isPlausibleIdentifier(_ identifier: String) -> Bool {
        guard !identifier.isEmpty, identifier.utf8.count <= 64, !identifier.hasPrefix("/"), !identifier.containsBytes("..") else {
            return false
        }
        return identifier.utf8.allSatisfy { c in
            (c >= 0x41 && c <= 0x5A) || (c >= 0x61 && c <= 0x7A) || (c >= 0x30 && c <= 0x39)
                || c == 0x2F || c == 0x5F || c == 0x2D || c == 0x2B
        }
    }

    static func load(_ identifier: String, directory: String) -> ZoneInfo? {
        guard isPlausibleIdentifier(identifier), let bytes = FileContents.read(directory + "/" + identifier, limit: 1 << 20) else {
            return nil
        }
        return ZoneInfo(tzif: bytes)
    }

    /// The gateway's zone: `TZ` when it names a zone, else `/etc/timezone`, else the `/etc/localtime` link,
    /// else UTC.
    static func systemIdentifier(environment: [String: String]) -> String {
        if var tz = environment["TZ"], !tz.isEmpty {
            if tz.hasPrefix(":") { tz.removeFirst() }
            if isPlausibleIdentifier(tz) { return tz }
        }
        if let bytes = FileContents.read("/etc/timezone", limit: 256) {
            let text = String(decoding: bytes, as: UTF8.self).filter { !$0.isWhitespace }
            if isPlausibleIdentifier(text) { return text }
        }
        var buffer = [CChar](repeating: 0, count: 512)
        let n = readlink("/etc/localtime", &buffer, buffer.count - 1)
        if n > 0 {
            let target = String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            let parts = target.split(separator: "/", omittingEmptySubsequences: false)
            if let z = parts.lastIndex(of: "zoneinfo") {
                let id = parts[(z + 1)...].joined(separator: "/")
                if isPlausibleIdentifier(id) { return id }
            }
        }
        return "UTC"
    }
}
