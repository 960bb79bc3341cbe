import GlucoseProfile
import Testing
import TestSupport

/// The ISO 8601 text of stored times and upload bodies is frozen: these bytes are in keys and bodies
/// already sent. Exact values, and the formatter against a plain reference over many generated times.
@Suite("ISO 8601 text stays byte for byte")
struct ISOTextTests {
    /// The text as the formatter first wrote it: each field `String(value)`, left-padded with `0`.
    enum Reference {
        static func pad(_ s: inout String, _ value: Int, _ width: Int) {
            let digits = String(value)
            if digits.count < width { s += String(repeating: "0", count: width - digits.count) }
            s += digits
        }

        static func dateTime(_ year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int) -> String {
            var s = year < 0 ? "-" : ""
            pad(&s, abs(year), 4)
            s += "-"
            pad(&s, month, 2)
            s += "-"
            pad(&s, day, 2)
            s += "T"
            pad(&s, hour, 2)
            s += ":"
            pad(&s, minute, 2)
            s += ":"
            pad(&s, second, 2)
            return s
        }

        static func floorDivide(_ a: Int64, _ b: Int64) -> (Int64, Int64) {
            let r = ((a % b) + b) % b
            return ((a - r) / b, r)
        }

        static func dateTime(naiveSeconds seconds: Int64) -> String {
            let (days, rest) = floorDivide(seconds, 86_400)
            let (y, m, d) = CivilCalendar.date(days: Int(days))
            let r = Int(rest)
            return dateTime(y, m, d, r / 3600, r / 60 % 60, r % 60)
        }

        static func iso8601(millis: Int64, offsetMinutes: Int) -> String {
            let (seconds, ms) = floorDivide(millis + Int64(offsetMinutes) * 60_000, 1000)
            var s = dateTime(naiveSeconds: seconds) + "."
            pad(&s, Int(ms), 3)
            s += offsetMinutes < 0 ? "-" : "+"
            pad(&s, abs(offsetMinutes) / 60, 2)
            s += ":"
            pad(&s, abs(offsetMinutes) % 60, 2)
            return s
        }
    }

    struct Case: CustomStringConvertible, Sendable {
        var millis: Int64
        var offset: Int
        var text: String
        var description: String { text }
    }

    @Test(arguments: [
        Case(millis: 1_767_250_935_000, offset: 60, text: "2026-01-01T08:02:15.000+01:00"),
        // Year boundaries, either side of the offset.
        Case(millis: 1_767_225_599_999, offset: 0, text: "2025-12-31T23:59:59.999+00:00"),
        Case(millis: 1_767_225_600_000, offset: -1, text: "2025-12-31T23:59:00.000-00:01"),
        Case(millis: 1_767_222_000_000, offset: 60, text: "2026-01-01T00:00:00.000+01:00"),
        Case(millis: 1_767_229_200_000, offset: -570, text: "2025-12-31T15:30:00.000-09:30"),
        // Leap days: 2024 and 2000 have one, 1900 and 2100 do not.
        Case(millis: 1_709_164_800_000, offset: 0, text: "2024-02-29T00:00:00.000+00:00"),
        Case(millis: 1_709_251_199_999, offset: 345, text: "2024-03-01T05:44:59.999+05:45"),
        Case(millis: 951_868_799_000, offset: -720, text: "2000-02-29T11:59:59.000-12:00"),
        Case(millis: -2_203_891_200_000, offset: 0, text: "1900-03-01T00:00:00.000+00:00"),
        Case(millis: 4_107_542_400_000, offset: 840, text: "2100-03-01T14:00:00.000+14:00"),
        // Before 1970, before year 1000, far ahead, and offsets beyond any zone's.
        Case(millis: -1, offset: 0, text: "1969-12-31T23:59:59.999+00:00"),
        Case(millis: -62_135_596_800_001, offset: 0, text: "0000-12-31T23:59:59.999+00:00"),
        Case(millis: -62_198_755_200_000, offset: 0, text: "-0001-01-01T00:00:00.000+00:00"),
        Case(millis: 253_402_300_799_999, offset: 0, text: "9999-12-31T23:59:59.999+00:00"),
        Case(millis: 253_402_300_800_000, offset: 0, text: "10000-01-01T00:00:00.000+00:00"),
        Case(millis: 0, offset: 100_000, text: "1970-03-11T10:40:00.000+1666:40"),
        Case(millis: 0, offset: -100_000, text: "1969-10-23T13:20:00.000-1666:40"),
    ])
    func instantsAtAnOffset(_ c: Case) {
        #expect(CivilCalendar.iso8601(millis: c.millis, offsetMinutes: c.offset) == c.text)
        #expect(Reference.iso8601(millis: c.millis, offsetMinutes: c.offset) == c.text)
    }

    @Test func wallTimesAsSentEvenWhenNotADate() throws {
        // A meter's month 13, hour 25 and a year of five digits are written as sent; a field a caller
        // set negative keeps the padding it always had (zeros before the sign).
        #expect(CivilCalendar.isoDateTime(year: 2024, month: 13, day: 5, hour: 25, minute: 61, second: 99) == "2024-13-05T25:61:99")
        #expect(CivilCalendar.isoDateTime(year: 65535, month: 255, day: 255, hour: 255, minute: 255, second: 255) == "65535-255-255T255:255:255")
        #expect(CivilCalendar.isoDateTime(year: 7, month: 0, day: 0, hour: 0, minute: 0, second: 0) == "0007-00-00T00:00:00")
        #expect(CivilCalendar.isoDateTime(year: -45, month: -5, day: 1, hour: -12, minute: 0, second: -1) == "-0045--5-01T-12:00:-1")
        #expect(CivilCalendar.isoDateTime(year: -7, month: 1, day: -100, hour: 1, minute: 1, second: 1) == "-0007-01--100T01:01:01")
        var broken = try #require(GlucoseDateTime(isoString: "2024-13-05T14:30:00", requiringValidDate: false))
        #expect(broken.isoString == "2024-13-05T14:30:00")
        broken.minute = -3
        #expect(broken.isoString == "2024-13-05T14:-3:00")
    }

    @Test func generatedTimesMatchTheReference() {
        var rng = SplitMix(seed: 0x150_8601)
        for i in 0..<20_000 {
            // Instants from 1582 to 9999 (and a few far outside), offsets within a zone's and beyond.
            let millis: Int64 = switch rng.below(10) {
            case 0: Int64(truncatingIfNeeded: rng.next()) >> 20
            case 1: Int64(rng.below(4_000_000)) - 2_000_000
            default: Int64(rng.below(Int(253_402_300_799_999 + 12_219_292_800_000))) - 12_219_292_800_000
            }
            let offset = rng.chance(90) ? rng.below(2 * 18 * 60 + 1) - 18 * 60 : rng.below(2_000_001) - 1_000_000
            #expect(CivilCalendar.iso8601(millis: millis, offsetMinutes: offset) == Reference.iso8601(millis: millis, offsetMinutes: offset),
                    "case \(i): \(millis) at \(offset)")
            let seconds = millis / 1000
            #expect(CivilCalendar.isoDateTime(naiveSeconds: seconds) == Reference.dateTime(naiveSeconds: seconds), "case \(i): \(seconds)")
            let f = (0..<6).map { _ in rng.chance(80) ? rng.below(256) : rng.below(200_001) - 100_000 }
            #expect(CivilCalendar.isoDateTime(year: f[0] * 40, month: f[1], day: f[2], hour: f[3], minute: f[4], second: f[5])
                    == Reference.dateTime(f[0] * 40, f[1], f[2], f[3], f[4], f[5]), "case \(i): \(f)")
            let wall = GlucoseDateTime(naiveSeconds: seconds)
            #expect(wall.isoString == Reference.dateTime(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second))
            // The bytes written on the stack are the text's.
            #expect(wall.withISOBytes { Array($0) } == Array(wall.isoString.utf8))
            #expect(CivilCalendar.withISO8601(millis: millis, offsetMinutes: offset) { Array($0) }
                    == Array(Reference.iso8601(millis: millis, offsetMinutes: offset).utf8))
        }
    }
}
