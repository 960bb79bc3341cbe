import GatewayCore
import GlucoseProfile
import Support
import Testing
@testable import Meters

@Suite("Meter wall time to UTC")
struct LocalTimeTests {
    struct Case: CustomStringConvertible, Sendable {
        var name: String
        var zone: String
        var local: GlucoseDateTime
        var expectedUTC: GlucoseDateTime
        var kind: String
        var description: String { name }
    }

    static func t(_ y: Int, _ mo: Int, _ d: Int, _ h: Int, _ mi: Int, _ s: Int = 0) -> GlucoseDateTime {
        GlucoseDateTime(naiveSeconds: Int64(CivilCalendar.days(year: y, month: mo, day: d)) * 86_400 + Int64(h * 3600 + mi * 60 + s))
    }

    static let cases: [Case] = [
        Case(name: "Berlin winter", zone: "Europe/Berlin", local: t(2024, 1, 15, 12, 0), expectedUTC: t(2024, 1, 15, 11, 0), kind: "unique"),
        Case(name: "Berlin summer", zone: "Europe/Berlin", local: t(2024, 7, 15, 12, 0), expectedUTC: t(2024, 7, 15, 10, 0), kind: "unique"),
        // 2024-03-31 02:00 CET -> 03:00 CEST: 02:30 never happened; moved forward by the gap to 03:30 CEST.
        Case(name: "Berlin gap", zone: "Europe/Berlin", local: t(2024, 3, 31, 2, 30), expectedUTC: t(2024, 3, 31, 1, 30), kind: "gap"),
        Case(name: "Berlin just before gap", zone: "Europe/Berlin", local: t(2024, 3, 31, 1, 59, 59), expectedUTC: t(2024, 3, 31, 0, 59, 59), kind: "unique"),
        Case(name: "Berlin end of gap", zone: "Europe/Berlin", local: t(2024, 3, 31, 3, 0), expectedUTC: t(2024, 3, 31, 1, 0), kind: "unique"),
        // 2024-10-27 03:00 CEST -> 02:00 CET: 02:30 happened twice; the first (CEST, 00:30 UTC) is taken.
        Case(name: "Berlin repeated hour", zone: "Europe/Berlin", local: t(2024, 10, 27, 2, 30), expectedUTC: t(2024, 10, 27, 0, 30), kind: "repeated"),
        Case(name: "New York gap", zone: "America/New_York", local: t(2024, 3, 10, 2, 30), expectedUTC: t(2024, 3, 10, 7, 30), kind: "gap"),
        Case(name: "New York repeated hour", zone: "America/New_York", local: t(2024, 11, 3, 1, 30), expectedUTC: t(2024, 11, 3, 5, 30), kind: "repeated"),
        Case(name: "New York summer", zone: "America/New_York", local: t(2024, 7, 4, 9, 0), expectedUTC: t(2024, 7, 4, 13, 0), kind: "unique"),
        Case(name: "UTC", zone: "UTC", local: t(2024, 3, 31, 2, 30), expectedUTC: t(2024, 3, 31, 2, 30), kind: "unique"),
        Case(name: "Lord Howe half-hour gap", zone: "Australia/Lord_Howe", local: t(2024, 10, 6, 2, 15), expectedUTC: t(2024, 10, 5, 15, 45), kind: "gap"),
        Case(name: "Berlin far future (zone rule)", zone: "Europe/Berlin", local: t(2045, 7, 1, 12, 0), expectedUTC: t(2045, 7, 1, 10, 0), kind: "unique"),
        Case(name: "New York far future gap", zone: "America/New_York", local: t(2045, 3, 12, 2, 30), expectedUTC: t(2045, 3, 12, 7, 30), kind: "gap"),
    ]

    @Test(arguments: cases)
    func resolves(_ c: Case) throws {
        let zone = try #require(MeterTimeZone(identifier: c.zone))
        let resolution = try #require(zone.resolve(c.local))
        #expect(resolution.instant == c.expectedUTC.naiveSeconds * 1000)
        switch resolution {
        case .unique: #expect(c.kind == "unique")
        case .gap(_, let shift): #expect(c.kind == "gap"); #expect(shift > 0)
        case .repeated(let first, let later): #expect(c.kind == "repeated"); #expect(later > first)
        }
    }

    @Test func gapIsShownAsTheWallClockWouldShowIt() throws {
        let zone = try #require(MeterTimeZone(identifier: "Europe/Berlin"))
        let resolution = try #require(zone.resolve(Self.t(2024, 3, 31, 2, 30)))
        #expect(zone.localTime(at: resolution.instant) == Self.t(2024, 3, 31, 3, 30))
        guard case .gap(_, let shift) = resolution else { Issue.record("expected a gap"); return }
        #expect(shift == 3600)
    }

    @Test func repeatedHourAlternativeIsOneHourLater() throws {
        let zone = try #require(MeterTimeZone(identifier: "America/New_York"))
        guard case .repeated(let first, let later) = try #require(zone.resolve(Self.t(2024, 11, 3, 1, 30))) else {
            Issue.record("expected a repeated hour"); return
        }
        #expect(later - first == 3_600_000)
    }

    @Test(arguments: ["Nowhere/Atlantis", "", "../etc/passwd", "/etc/localtime", "Europe/Berlin\n"])
    func unknownZonesAreRefused(_ id: String) {
        #expect(MeterTimeZone(identifier: id) == nil)
    }

    @Test func zoneFileAndFooterRuleAgreeForEveryHourOfAYear() throws {
        // The footer rule alone must give the same offsets as the transition table.
        for id in ["Europe/Berlin", "America/New_York", "Australia/Sydney", "America/Sao_Paulo"] {
            let zone = try #require(MeterTimeZone(identifier: id))
            guard let rule = zone.info.rule else { continue }
            let start = Self.t(2025, 1, 1, 0, 0).naiveSeconds
            for hour in stride(from: Int64(0), to: 365 * 24, by: 1) {
                let t = start + hour * 3600
                #expect(rule.offset(at: t) == zone.offsetSeconds(at: t), "\(id) at \(GlucoseDateTime(naiveSeconds: t))")
            }
        }
    }

    @Test(arguments: [
        ("CET-1CEST,M3.5.0,M10.5.0/3", 3600, 7200),
        ("EST5EDT,M3.2.0,M11.1.0", -18000, -14400),
        ("<+0330>-3:30", 12600, nil),
        ("AEST-10AEDT,M10.1.0,M4.1.0/3", 36000, 39600),
        ("<-03>3<-02>,M3.5.0/-2,M10.5.0/-1", -10800, -7200),
    ] as [(String, Int, Int?)])
    func posixRules(_ text: String, _ std: Int, _ dst: Int?) throws {
        let rule = try #require(PosixTZRule(text))
        #expect(rule.standardOffset == std)
        #expect(rule.daylightOffset == dst)
    }

    @Test(arguments: ["", "C", "CET", "CET-1CEST,M13.1.0,M10.5.0", "CET-1CEST,M3.5.0", "CET-200"])
    func badPosixRulesAreRefused(_ text: String) {
        #expect(PosixTZRule(text) == nil)
    }

    @Test func truncatedZoneFilesAreRefused() throws {
        let bytes = try #require(FileContents.read("/usr/share/zoneinfo/Europe/Berlin", limit: 1 << 20))
        #expect(ZoneInfo(tzif: bytes) != nil)
        for length in stride(from: 0, to: bytes.count - 40, by: 37) {
            // A truncated file either fails or, cut inside the footer, still parses: never crashes.
            _ = ZoneInfo(tzif: Array(bytes.prefix(length)))
        }
        #expect(ZoneInfo(tzif: Array(bytes.prefix(44))) == nil)
        #expect(ZoneInfo(tzif: Array("not a zone file at all, not at all, really not".utf8)) == nil)
    }

    @Test func civilDaysRoundTrip() {
        for days in stride(from: Int64(-800_000), to: 800_000, by: 997) {
            let t = GlucoseDateTime(naiveSeconds: days * 86_400 + 3723)
            #expect(t.naiveSeconds == days * 86_400 + 3723)
        }
    }

    /// The calendar arithmetic alone reads month 13 of 2024 as January 2025; a meter's month 13 is a broken
    /// clock, and its time stays unresolved instead of being guessed.
    @Test(arguments: ["2024-13-01T08:00:00", "2024-00-10T08:00:00", "2024-02-30T08:00:00", "2024-04-31T08:00:00",
                      "0000-00-00T00:00:00", "2024-05-01T24:00:00", "2024-05-01T08:60:00"])
    func fieldsThatAreNoDateAreNeverResolved(_ text: String) throws {
        let zone = try #require(MeterTimeZone(identifier: "Europe/Berlin"))
        let fields = try #require(GlucoseDateTime(isoString: text, requiringValidDate: false))
        #expect(!fields.isValid)
        #expect(zone.resolve(fields) == nil)
    }

    @Test func monthThirteenHasNoDays() throws {
        #expect(GlucoseDateTime.daysInMonth(year: 2024, month: 13) == 0)
        #expect(GlucoseDateTime.daysInMonth(year: 2024, month: 0) == 0)
        #expect(GlucoseDateTime(year: 2024, month: 13, day: 1, hour: 8, minute: 0, second: 0) == nil)
        // What the arithmetic would have made of it, and what a valid time of that day resolves to.
        let monthThirteen = try #require(GlucoseDateTime(isoString: "2024-13-01T08:00:00", requiringValidDate: false))
        #expect(monthThirteen.naiveSeconds == Self.t(2025, 1, 1, 8, 0).naiveSeconds)
        let zone = try #require(MeterTimeZone(identifier: "UTC"))
        #expect(zone.resolve(Self.t(2025, 1, 1, 8, 0)) != nil)
        #expect(zone.resolve(monthThirteen) == nil)
    }

    @Test func systemZoneComesFromTZ() {
        #expect(MeterTimeZone.systemIdentifier(environment: ["TZ": ":America/New_York"]) == "America/New_York")
        #expect(MeterTimeZone.systemIdentifier(environment: ["TZ": "Europe/Berlin"]) == "Europe/Berlin")
        #expect(!MeterTimeZone.systemIdentifier(environment: [:]).isEmpty)
    }
}
