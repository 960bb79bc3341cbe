import GatewayCore
import GlucoseProfile
import Testing
@testable import Meters

@Suite("Command-line times")
struct TimeArgumentTests {
    static let now: UnixMillis = utc(2024, 5, 10, 12)
    static func utc(_ y: Int, _ mo: Int, _ d: Int, _ h: Int = 0, _ mi: Int = 0, _ s: Int = 0) -> UnixMillis {
        GlucoseDateTime(year: y, month: mo, day: d, hour: h, minute: mi, second: s).map { $0.naiveSeconds * 1000 } ?? .min
    }

    @Test(arguments: [
        ("7d", utc(2024, 5, 3, 12)), ("24h", utc(2024, 5, 9, 12)), ("30m", utc(2024, 5, 10, 11, 30)), ("0d", now),
        ("2024-05-01", utc(2024, 4, 30, 22)),                  // Berlin midnight, CEST
        ("2024-05-01T08:00", utc(2024, 5, 1, 6)),
        ("2024-05-01 08:00:30", utc(2024, 5, 1, 6, 0, 30)),
        ("2024-05-01T08:00:00Z", utc(2024, 5, 1, 8)),
        ("2024-05-01T08:00+02:00", utc(2024, 5, 1, 6)),
        ("2024-05-01T08:00-0500", utc(2024, 5, 1, 13)),
        ("2024-03-31T02:30", utc(2024, 3, 31, 1, 30)),          // in the DST gap: moved forward
    ] as [(String, UnixMillis)])
    func parses(_ text: String, _ expected: UnixMillis) throws {
        let zone = try #require(MeterTimeZone(identifier: "Europe/Berlin"))
        #expect(TimeArgument.parse(text, now: Self.now, zone: zone) == expected)
    }

    @Test(arguments: ["", "yesterday", "2024-13-01", "2024-02-30", "2024-05-01T25:00", "2024-05-01T08:00+", "7w", "-3d",
                      "2024-05-01T08:00Zjunk", "24-05-01", "2024-05-01T08"])
    func refuses(_ text: String) throws {
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        #expect(TimeArgument.parse(text, now: Self.now, zone: zone) == nil)
    }
}
