import GlucoseProfile
import Testing

@Suite("ISO 8601 on CivilCalendar")
struct CivilCalendarTests {
    @Test func isoWithOffset() {
        #expect(CivilCalendar.iso8601(millis: 1_767_250_930_000, offsetMinutes: 60) == "2026-01-01T08:02:10.000+01:00")
        #expect(CivilCalendar.iso8601(millis: 1_767_250_930_123, offsetMinutes: -330) == "2026-01-01T01:32:10.123-05:30")
        #expect(CivilCalendar.iso8601(millis: 0, offsetMinutes: 0) == "1970-01-01T00:00:00.000+00:00")
        #expect(CivilCalendar.iso8601(millis: 951_782_400_000, offsetMinutes: 0) == "2000-02-29T00:00:00.000+00:00")
    }

    @Test func localTimes() {
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2026-01-01T08:02:10") == 1_767_254_530)
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2024-02-29T00:00:00") != nil)
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2023-02-29T00:00:00") == nil)
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2026-13-01T00:00:00") == nil)
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2026-01-01 08:02:10") == nil)
        #expect(CivilCalendar.naiveSeconds(isoDateTime: "2026-01-01T08:02") == nil)
    }

    @Test func wallTimesAndInstantsInUTC() {
        #expect(CivilCalendar.isoDateTime(year: 2024, month: 3, day: 5, hour: 14, minute: 30, second: 0) == "2024-03-05T14:30:00")
        #expect(CivilCalendar.isoDateTime(year: 999, month: 1, day: 2, hour: 3, minute: 4, second: 5) == "0999-01-02T03:04:05")
        #expect(CivilCalendar.isoDateTime(naiveSeconds: -1) == "1969-12-31T23:59:59")
        #expect(CivilCalendar.isoUTC(millis: 1_714_550_400_000) == "2024-05-01T08:00:00Z")
        #expect(CivilCalendar.isoUTC(millis: -1) == "1969-12-31T23:59:59Z")
        #expect(CivilCalendar.iso8601(millis: -1, offsetMinutes: 0) == "1969-12-31T23:59:59.999+00:00")
        for seconds: Int64 in [-86_401, -1, 0, 59, 951_782_400, 1_767_254_530, 253_402_300_799] {
            #expect(CivilCalendar.naiveSeconds(isoDateTime: CivilCalendar.isoDateTime(naiveSeconds: seconds)) == seconds)
        }
    }
}
