import GatewayCore
import GlucoseProfile
import Support
import Transport

/// Nightscout API v1 `treatments` (BG Check treatments and out-of-range notes). The route exists only
/// when the site enables careportal, so the credential check first reads `careportalEnabled` from
/// `/api/v1/status.json`.
///
/// Nightscout answers a POST with the array of documents it upserted, each as sent (so with our
/// `identifier`) plus `_id` when it was newly inserted; 15.0.6 deduplicates on `created_at` + `eventType`,
/// 15.0.7 on `identifier` first. An element confirms a row by its `identifier`, or, without one, by
/// `eventType` and the instant of `created_at` (the server rewrites it in UTC).
public struct NightscoutTreatmentsDestination: UploadDestination {
    public let name = DestinationName.nightscoutTreatments
    public let settings: NightscoutSettings
    let entries: NightscoutDestination

    public init(settings: NightscoutSettings, http: any HTTPClient) {
        self.settings = settings
        self.entries = NightscoutDestination(settings: settings, http: http)
    }

    public var origin: String { entries.origin }
    public var checkedAtStart: Bool { true }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        await sendBatch(items, body: batchBody(items, open: [UInt8(ascii: "[")], close: [UInt8(ascii: "]")]),
                        to: entries.server, path: "/api/v1/treatments", headers: entries.headers,
                        networkTimeoutMs: networkTimeoutMs, secrets: entries.secrets) { Self.judge($0.body, items: items, status: $0.status) }
    }

    /// What identifies a treatment we sent when the answer carries no `identifier`.
    struct Fingerprint: Hashable {
        var eventType: String
        var createdAt: Int64

        init?(_ value: JSONValue) {
            guard let type = value["eventType"]?.stringValue, let text = value["created_at"]?.stringValue,
                  let instant = ISOInstant.millis(text) else { return nil }
            eventType = type
            createdAt = instant
        }
    }

    /// As for entries: only an object that matches a row we sent confirms it; anything else in a 2xx
    /// answer confirms nothing, and those rows are sent again (the server's dedupe makes that safe).
    static func judge(_ body: [UInt8], items: [OutboxItem], status: Int) -> BatchOutcome {
        judgeNightscoutV1Answer(body, items: items, status: status, noun: "treatment", fingerprint: Fingerprint.init)
    }

    /// `careportalEnabled` from `/api/v1/status.json` (only `true` counts), then the entries' credential check.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = entries.server.check("/api/v1/status.json", headers: entries.headers, timeoutMs: timeoutMs)
        return await runCredentialCheck(request, http: entries.server.http) { response in
            if response.status == 401 || response.status == 403 { return .refused("server answered HTTP \(response.status) to status.json") }
            guard response.status == 200 else { return .unreachable("server answered HTTP \(response.status) to status.json") }
            guard let json = try? JSONParser.parse(response.body), case .object = json else {
                return .unreachable("unreadable answer from status.json")
            }
            guard json["careportalEnabled"]?.boolValue == true else {
                return .disabled("careportal is not enabled on \(origin) (status.json careportalEnabled is not true): "
                                 + "treatments paused; entries go on")
            }
            return await entries.checkCredentials(timeoutMs: timeoutMs)
        }
    }
}

/// The instant of an ISO 8601 date-time as Nightscout writes and reads it: `YYYY-MM-DDTHH:MM:SS`, an
/// optional fraction (milliseconds are kept, further digits dropped), then `Z` or `±HH:MM`.
enum ISOInstant {
    static func millis(_ text: String) -> Int64? {
        let b = Array(text.utf8)
        func number(_ from: Int, _ count: Int) -> Int? {
            guard from + count <= b.count else { return nil }
            var v = 0
            for c in b[from..<(from + count)] {
                guard c >= 0x30, c <= 0x39 else { return nil }
                v = v * 10 + Int(c - 0x30)
            }
            return v
        }
        guard b.count >= 20, b[4] == 0x2D, b[7] == 0x2D, b[10] == 0x54, b[13] == 0x3A, b[16] == 0x3A,
              let year = number(0, 4), let month = number(5, 2), let day = number(8, 2),
              let hour = number(11, 2), let minute = number(14, 2), let second = number(17, 2),
              (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else { return nil }
        var i = 19
        var ms = 0
        if i < b.count, b[i] == 0x2E {
            i += 1
            var digits = 0
            while i < b.count, b[i] >= 0x30, b[i] <= 0x39 {
                if digits < 3 { ms = ms * 10 + Int(b[i] - 0x30) }
                digits += 1
                i += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<max(digits, 3) { ms *= 10 }
        }
        var offsetMinutes = 0
        guard i < b.count else { return nil }
        if b[i] == 0x5A {
            i += 1
        } else if b[i] == 0x2B || b[i] == 0x2D, let h = number(i + 1, 2), i + 3 < b.count, b[i + 3] == 0x3A, let m = number(i + 4, 2) {
            offsetMinutes = (h * 60 + m) * (b[i] == 0x2D ? -1 : 1)
            i += 6
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        let days = CivilCalendar.days(year: year, month: month, day: day)
        let seconds = Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second) - Int64(offsetMinutes * 60)
        return seconds * 1000 + Int64(ms)
    }
}
