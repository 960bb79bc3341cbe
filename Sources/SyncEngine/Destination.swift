import GatewayCore
import GlucoseProfile
import Support

/// How one request for a batch ended, as the dispatcher acts on it.
public enum BatchOutcome: Sendable, Equatable {
    /// The server answered 2xx and the answer was judged element by element: `stored` came back from the
    /// server (new or already there), `rejected` were refused by the server (with its words), `retry`
    /// were not confirmed (missing from the answer, answered with something that matches nothing we sent,
    /// or a transient status of their own) and are sent again like after a 5xx; `retryReason` says why.
    case perElement(stored: [Int64], duplicates: Int, rejected: [Int64: String], retry: [Int64], retryReason: String)
    /// 400/422 (or similar) for the request as a whole: some element is bad, or all are.
    case rejected(status: Int, answer: String)
    /// 413: the request is too large.
    case tooLarge
    /// 401/403: credentials wrong or missing a permission.
    case auth(status: Int, answer: String)
    /// A redirect, 404, 405 and the like: the URL is wrong, not the readings.
    case misconfigured(status: Int, answer: String)
    /// No answer, or 408/429/5xx: transient or ambiguous; the same bytes are sent again.
    case transient(TransientFailure)
}

public struct TransientFailure: Sendable, Equatable {
    /// The HTTP status when the server answered (408, 429, 5xx), nil for a network failure.
    public var status: Int?
    public var error: HTTPError?
    /// `Retry-After` in milliseconds when the server sent one (seconds form).
    public var retryAfterMs: Int?
    /// What was wrong with an answer that had a status (a 2xx that confirmed nothing), for the message.
    public var reason: String?
    public init(status: Int? = nil, error: HTTPError? = nil, retryAfterMs: Int? = nil, reason: String? = nil) {
        self.status = status
        self.error = error
        self.retryAfterMs = retryAfterMs
        self.reason = reason
    }

    public var message: String {
        if let reason { return reason }
        if let status { return "server answered HTTP \(status)" }
        return error?.description ?? "no answer"
    }

    public var isTimeout: Bool {
        if case .timedOut = error { return true }
        return false
    }
}

public enum CredentialCheck: Sendable, Equatable {
    case accepted
    /// The server refused the credentials (message without the credential).
    case refused(String)
    /// The server has this destination turned off (Nightscout treatments without careportal): it is
    /// paused until the server turns it on; other destinations go on.
    case disabled(String)
    /// No usable answer: the check says nothing about the credentials.
    case unreachable(String)
}

/// A server readings go to. Implementations build one request from frozen elements and judge the
/// answer; they never retry, sleep or touch the store.
public protocol UploadDestination: Sendable {
    var name: DestinationName { get }
    /// Scheme, host and port, for log lines.
    var origin: String { get }
    func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome
    func checkCredentials(timeoutMs: Int) async -> CredentialCheck
    /// True when the server may have this destination turned off: the credential check then runs at
    /// start-up too, and `.disabled` pauses the destination before anything is sent.
    var checkedAtStart: Bool { get }
}

extension UploadDestination {
    public var checkedAtStart: Bool { false }
}

extension DestinationName {
    /// Nightscout v1 `treatments`: BG Check treatments and out-of-range notes, beside the entries.
    public static let nightscoutTreatments = DestinationName(rawValue: "nightscout-treatments")
}

enum HTTPStatusClass {
    /// Common mapping of a non-2xx status to an outcome. `secrets` are redacted from the answer's words.
    static func outcome(for response: HTTPResponse, redacting secrets: [String]) -> BatchOutcome {
        let answer = ServerText.snippet(response.body, redacting: secrets)
        switch response.status {
        case 401, 403: return .auth(status: response.status, answer: answer)
        case 413: return .tooLarge
        case 400, 409, 412, 422: return .rejected(status: response.status, answer: answer)
        case 408, 429, 500...599:
            return .transient(TransientFailure(status: response.status, retryAfterMs: retryAfter(response)))
        default: return .misconfigured(status: response.status, answer: answer)
        }
    }

    static func retryAfter(_ response: HTTPResponse) -> Int? {
        guard let text = response.headers["retry-after"], let seconds = Int(text.trimmingSpaces()), seconds >= 0 else { return nil }
        return min(seconds, 3600) * 1000
    }
}

/// Text a server sent (an error body, a diagnostics string, a verdict) made fit to store and print: one
/// line without control characters, our own credentials replaced by `(redacted)` wherever the server
/// reflects them, and at most `limit` characters.
public enum ServerText {
    public static let limit = 200
    /// How much of a body is looked at: more than `limit`, so a credential that straddles the cut is
    /// still found whole before the text is shortened.
    static let window = 2048

    public static func snippet(_ body: [UInt8], redacting secrets: [String] = []) -> String {
        clean(String(decoding: body.prefix(window), as: UTF8.self), redacting: secrets)
    }

    public static func clean(_ text: String, redacting secrets: [String] = []) -> String {
        var scalars = String.UnicodeScalarView()
        for s in text.unicodeScalars.prefix(window) {
            // C0 and C1 controls, DEL, and the bidirectional overrides that reorder what a terminal shows.
            let v = s.value
            if v == 0x09 || v == 0x0A || v == 0x0D { scalars.append(" ") }
            else if v < 0x20 || (0x7F...0x9F).contains(v) || (0x202A...0x202E).contains(v) || (0x2066...0x2069).contains(v) { scalars.append("?") }
            else { scalars.append(s) }
        }
        let flat = redact(String(scalars), secrets)
        return flat.count > limit ? String(flat.prefix(limit)) + "..." : flat
    }

    /// Every occurrence of each secret (ASCII letters compared without case, as a hex digest may come
    /// back upper-case) becomes `(redacted)`.
    static func redact(_ text: String, _ secrets: [String]) -> String {
        var bytes = Array(text.utf8)
        for secret in secrets where secret.utf8.count >= 4 {
            let needle = Array(secret.utf8).map(lowerASCII)
            var out: [UInt8] = []
            out.reserveCapacity(bytes.count)
            var i = 0
            while i < bytes.count {
                if i + needle.count <= bytes.count, zip(bytes[i..<(i + needle.count)], needle).allSatisfy({ lowerASCII($0) == $1 }) {
                    out.append(contentsOf: Array("(redacted)".utf8))
                    i += needle.count
                } else {
                    out.append(bytes[i])
                    i += 1
                }
            }
            bytes = out
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func lowerASCII(_ b: UInt8) -> UInt8 { b >= 0x41 && b <= 0x5A ? b + 0x20 : b }
}

/// How large an answer to a request may be: a few hundred bytes for each element sent (a server echoes
/// what it stored, with its own fields added), never more than 1 MiB. A longer answer is refused
/// (`HTTPError.tooLarge`) without being kept in memory.
public enum ResponseLimit {
    public static let maximum = 1 << 20
    static let base = 16 << 10
    static let perElement = 768

    public static func forBatch(elements: Int, requestBytes: Int) -> Int {
        min(maximum, base + max(elements * perElement, 2 * requestBytes))
    }

    /// Credential checks and status pages: small documents (a FHIR CapabilityStatement can be large).
    public static let check = maximum
    /// The health probe only needs to know that something answered.
    public static let probe = 16 << 10
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while s.first == " " { s.removeFirst() }
        while s.last == " " { s.removeLast() }
        return String(s)
    }
}

/// Whole-request timeout: the network timeout plus 2 ms per KB of body, at most 30 s, so a large
/// replay over a slow link does not time out for ever.
func exchangeTimeout(networkTimeoutMs: Int, bodyBytes: Int) -> Int {
    max(networkTimeoutMs, min(30_000, networkTimeoutMs + 2 * bodyBytes / 1024))
}

/// The frozen bodies of a batch joined with commas between `open` and `close` (a JSON array, or the
/// entries of a FHIR Bundle).
func batchBody(_ items: [OutboxItem], open: [UInt8], close: [UInt8]) -> [UInt8] {
    var body = open
    for (i, item) in items.enumerated() {
        if i > 0 { body.append(UInt8(ascii: ",")) }
        body.append(contentsOf: item.body)
    }
    body.append(contentsOf: close)
    return body
}

/// POSTs one batch and maps the answer: a network failure is transient, a non-2xx status (even with an
/// oversized body, whose status is the answer) goes through `HTTPStatusClass`, and a 2xx answer is
/// judged by `judge`. `secrets` are redacted from whatever the server's words end up in.
func sendBatch(_ items: [OutboxItem], body: [UInt8], url: String, headers: [(String, String)], networkTimeoutMs: Int,
               caFile: String?, secrets: [String], http: any HTTPClient,
               judge: (HTTPResponse) -> BatchOutcome) async -> BatchOutcome {
    let request = HTTPRequest(
        method: "POST", url: url, headers: headers, body: body,
        connectTimeoutMs: networkTimeoutMs, timeoutMs: exchangeTimeout(networkTimeoutMs: networkTimeoutMs, bodyBytes: body.count),
        caFile: caFile, maxResponseBytes: ResponseLimit.forBatch(elements: items.count, requestBytes: body.count))
    let response: HTTPResponse
    do {
        response = try await http.send(request)
    } catch .tooLarge(_, let status) where status >= 300 {
        // An error status with an oversized body: the status is the answer; the body is not needed.
        return HTTPStatusClass.outcome(for: HTTPResponse(status: status), redacting: secrets)
    } catch {
        return .transient(TransientFailure(error: error))
    }
    guard (200..<300).contains(response.status) else { return HTTPStatusClass.outcome(for: response, redacting: secrets) }
    return judge(response)
}

extension HTTPRequest {
    /// A credential check, token exchange or status page: a GET that may take `timeoutMs` in all, at most
    /// 10 s of it to connect, with room for a large document.
    static func check(url: String, headers: [(String, String)], timeoutMs: Int, caFile: String?) -> HTTPRequest {
        HTTPRequest(method: "GET", url: url, headers: headers, connectTimeoutMs: min(timeoutMs, 10_000), timeoutMs: timeoutMs,
                    caFile: caFile, maxResponseBytes: ResponseLimit.check)
    }
}

/// Sends a credential check's request: without an answer the check says nothing about the credentials
/// (`.unreachable` with the network failure); an answer is read by `judge`.
func runCredentialCheck(_ request: HTTPRequest, http: any HTTPClient,
                        judge: (HTTPResponse) async -> CredentialCheck) async -> CredentialCheck {
    let response: HTTPResponse
    do {
        response = try await http.send(request)
    } catch {
        return .unreachable(error.description)
    }
    return await judge(response)
}

/// Nightscout v1 answers a POST with the array of documents it upserted, each as sent plus `_id` when it
/// was newly inserted. An element counts as stored only when it is an object that matches one we sent:
/// by its `identifier`, or (without one) by the collection's `fingerprint`. With `_id` it is new, without
/// it was already there. Anything else in a 2xx answer (`[]`, fewer elements, strings, nulls, empty
/// objects, documents we never sent) confirms nothing: those rows are sent again, like after a 5xx.
/// `noun` names what was sent in the reason ("reading", "treatment").
///
/// The `identifier` of an element we sent is its row's key: the builders write the key there. The sent
/// bodies are parsed only for the fingerprints, and only once an answer element without `identifier`
/// needs them.
func judgeNightscoutV1Answer<Print: Hashable>(_ body: [UInt8], items: [OutboxItem], status: Int, noun: String,
                                              fingerprint: (JSONValue) -> Print?) -> BatchOutcome {
    // Only each element's `identifier` is built, and whether it has an `_id` noted; the rest is checked as
    // a full parse checks it.
    guard let elements = try? JSONParser.scanArray(body, keys: ["identifier"], present: ["_id"]) else {
        // A 2xx we cannot read: the server may have stored the batch; send the same bytes again.
        return .transient(TransientFailure(error: .other("unreadable answer from the server (HTTP \(status))")))
    }
    var byIdentifier: [String: Int64] = [:]
    byIdentifier.reserveCapacity(items.count)
    for item in items { byIdentifier[item.key] = item.id }
    // With every key sent once, the item at an element's place that has the element's identifier is the
    // one the table gives (Nightscout answers in the order sent), so it is taken without a lookup.
    let keysDistinct = byIdentifier.count == items.count
    var fingerprints: [Print: [Int64]]?
    func byFingerprint() -> [Print: [Int64]] {
        if let fingerprints { return fingerprints }
        var made: [Print: [Int64]] = [:]
        for item in items {
            if let sent = try? JSONParser.parse(item.body), let print = fingerprint(sent) { made[print, default: []].append(item.id) }
        }
        fingerprints = made
        return made
    }
    var stored: Set<Int64> = []
    stored.reserveCapacity(items.count)
    var duplicates = 0
    for (place, element) in elements.enumerated() {
        guard element.isObject else { continue }
        var id: Int64?
        if let identifier = element.member("identifier") {
            if let text = identifier.stringValue {
                let match = keysDistinct && place < items.count && items[place].key == text ? items[place].id : byIdentifier[text]
                if let match, !stored.contains(match) { id = match }
            }
        } else if let whole = try? JSONParser.parse(Array(body[element.range])), let print = fingerprint(whole) {
            // No identifier (an older server): the element in full, matched by what it says.
            id = byFingerprint()[print]?.first { !stored.contains($0) }
        }
        guard let id else { continue }
        stored.insert(id)
        if !element.has(0) { duplicates += 1 }
    }
    let ids = items.map(\.id)
    // `stored` holds only ids of `items`: as many as there are items, it holds every item's id (and the
    // ids are distinct), so the filters below would keep every id and none.
    let all = stored.count == items.count
    let unconfirmed = all ? [] : ids.filter { !stored.contains($0) }
    let reason = stored.isEmpty
        ? "server answered HTTP \(status) without confirming any of the \(items.count) \(noun)(s) sent"
        : "server answered HTTP \(status) confirming only \(stored.count) of the \(items.count) \(noun)(s) sent"
    return .perElement(stored: all ? ids : ids.filter { stored.contains($0) }, duplicates: duplicates, rejected: [:],
                       retry: unconfirmed, retryReason: reason)
}

/// Nightscout API v1 `entries`.
public struct NightscoutDestination: UploadDestination {
    public let name = DestinationName.nightscout
    public let settings: NightscoutSettings
    let http: any HTTPClient

    public init(settings: NightscoutSettings, http: any HTTPClient) {
        self.settings = settings
        self.http = http
    }

    public var origin: String { HTTPURL.origin(settings.url) }

    var headers: [(String, String)] {
        var h = [("Content-Type", "application/json"), ("Accept", "application/json")]
        if let auth = settings.authHeader { h.append(("api-secret", auth)) }
        return h
    }

    /// Our own credentials as the server could reflect them in an answer: never stored or printed.
    var secrets: [String] {
        [settings.authHeader, settings.apiSecret?.value, settings.token?.value].compactMap { $0 }
    }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        await sendBatch(items, body: batchBody(items, open: [UInt8(ascii: "[")], close: [UInt8(ascii: "]")]),
                        url: HTTPURL.join(settings.url, "/api/v1/entries"), headers: headers, networkTimeoutMs: networkTimeoutMs,
                        caFile: settings.caFile, secrets: secrets, http: http) { Self.judge($0.body, items: items, status: $0.status) }
    }

    /// What identifies an element we sent when the answer carries no `identifier`.
    struct Fingerprint: Hashable {
        var type: String
        var date: Int64
        var mbg: Double

        init?(_ value: JSONValue) {
            guard let type = value["type"]?.stringValue, let date = value["date"]?.int64Value,
                  let mbg = value["mbg"]?.doubleValue, mbg.isFinite else { return nil }
            self.type = type
            self.date = date
            self.mbg = mbg
        }
    }

    /// An element counts as stored only when it matches one we sent by its `identifier`, or (without one)
    /// by `type`, `date` and `mbg`; see `judgeNightscoutV1Answer`.
    static func judge(_ body: [UInt8], items: [OutboxItem], status: Int) -> BatchOutcome {
        judgeNightscoutV1Answer(body, items: items, status: status, noun: "reading", fingerprint: Fingerprint.init)
    }

    /// `GET /api/v1/verifyauth`, which always answers 200 and says whether the credentials are valid.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = HTTPRequest.check(url: HTTPURL.join(settings.url, "/api/v1/verifyauth"), headers: headers,
                                        timeoutMs: timeoutMs, caFile: settings.caFile)
        return await runCredentialCheck(request, http: http) { response in
            if response.status == 401 || response.status == 403 { return .refused("server answered HTTP \(response.status)") }
            guard response.status == 200 else { return .unreachable("server answered HTTP \(response.status)") }
            guard let json = try? JSONParser.parse(response.body), let message = json["message"] else {
                return .unreachable("unreadable answer to the credential check")
            }
            let verdict = ServerText.clean(message["message"]?.stringValue ?? "", redacting: secrets)
            if verdict == "OK" {
                if message["canWrite"]?.boolValue == false { return .refused("credentials accepted but not allowed to write entries") }
                return .accepted
            }
            return .refused(verdict.isEmpty ? "credentials not accepted" : "credentials not accepted (\(verdict))")
        }
    }
}

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
    let http: any HTTPClient
    let entries: NightscoutDestination

    public init(settings: NightscoutSettings, http: any HTTPClient) {
        self.settings = settings
        self.http = http
        self.entries = NightscoutDestination(settings: settings, http: http)
    }

    public var origin: String { HTTPURL.origin(settings.url) }
    public var checkedAtStart: Bool { true }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        await sendBatch(items, body: batchBody(items, open: [UInt8(ascii: "[")], close: [UInt8(ascii: "]")]),
                        url: HTTPURL.join(settings.url, "/api/v1/treatments"), headers: entries.headers,
                        networkTimeoutMs: networkTimeoutMs, caFile: settings.caFile, secrets: entries.secrets,
                        http: http) { Self.judge($0.body, items: items, status: $0.status) }
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
        let request = HTTPRequest.check(url: HTTPURL.join(settings.url, "/api/v1/status.json"), headers: entries.headers,
                                        timeoutMs: timeoutMs, caFile: settings.caFile)
        return await runCredentialCheck(request, http: http) { response in
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

/// FHIR R4 server: batch Bundles of conditional creates.
public struct FHIRDestination: UploadDestination {
    public let name = DestinationName.fhir
    public let settings: FHIRSettings
    let http: any HTTPClient

    public init(settings: FHIRSettings, http: any HTTPClient) {
        self.settings = settings
        self.http = http
    }

    public var origin: String { HTTPURL.origin(settings.baseURL) }

    private var headers: [(String, String)] {
        var h = [("Content-Type", "application/fhir+json"), ("Accept", "application/fhir+json")]
        if let token = settings.token { h.append(("Authorization", "Bearer \(token.value)")) }
        return h
    }

    var secrets: [String] { [settings.token?.value].compactMap { $0 } }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        var base = settings.baseURL
        while base.hasSuffix("/") { base.removeLast() }
        return await sendBatch(items, body: batchBody(items, open: Array(#"{"resourceType":"Bundle","type":"batch","entry":["#.utf8),
                                                      close: Array("]}".utf8)),
                               url: base, headers: headers, networkTimeoutMs: networkTimeoutMs, caFile: settings.caFile,
                               secrets: secrets, http: http) { Self.judge($0.body, items: items, redacting: secrets) }
    }

    /// The status code at the start of an entry's `response.status` ("201 Created"), when it has one.
    static func statusCode(_ text: String?) -> Int? {
        guard let text else { return nil }
        let digits = text.prefix { $0 != " " }
        guard digits.count == 3, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let code = Int(digits) else { return nil }
        return code
    }

    /// A batch-response Bundle has one entry per request entry, in order, each with `response.status`.
    /// Only a 2xx counts as stored (201 created, 200 found by the conditional create); a 4xx is the
    /// server refusing that reading (with its words); 408, 429, 5xx and anything without a readable
    /// status confirm nothing and are sent again.
    static func judge(_ body: [UInt8], items: [OutboxItem], redacting secrets: [String] = []) -> BatchOutcome {
        guard let parsed = try? JSONParser.parse(body), parsed["resourceType"]?.stringValue == "Bundle",
              let entries = parsed["entry"]?.arrayValue, entries.count == items.count else {
            return .transient(TransientFailure(error: .other("unreadable batch-response from the server")))
        }
        var stored: [Int64] = []
        var duplicates = 0
        var rejected: [Int64: String] = [:]
        var retry: [Int64] = []
        var unreadable = 0
        for (item, entry) in zip(items, entries) {
            let statusText = entry["response"]?["status"]?.stringValue
            switch statusCode(statusText) {
            case 200?: stored.append(item.id); duplicates += 1
            case let code? where (200..<300).contains(code): stored.append(item.id)
            case let code? where code == 408 || code == 429 || (500..<600).contains(code): retry.append(item.id)
            case let code? where (400..<500).contains(code):
                var words = "entry answered \(ServerText.clean(statusText ?? "", redacting: secrets))"
                if let outcome = entry["response"]?["outcome"], let issues = outcome["issue"]?.arrayValue,
                   let first = issues.first, let text = first["diagnostics"]?.stringValue {
                    words += ": " + ServerText.clean(text, redacting: secrets)
                }
                rejected[item.id] = words
            default:
                retry.append(item.id)
                unreadable += 1
            }
        }
        let reason = unreadable > 0
            ? "server answered a batch with \(unreadable) of \(items.count) entries without a usable status"
            : "server answered \(retry.count) of \(items.count) entries with a transient error"
        return .perElement(stored: stored, duplicates: duplicates, rejected: rejected, retry: retry, retryReason: reason)
    }

    /// `GET [base]/metadata` with the token: 401/403 refuse the credentials.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = HTTPRequest.check(url: HTTPURL.join(settings.baseURL, "/metadata"), headers: headers,
                                        timeoutMs: timeoutMs, caFile: settings.caFile)
        do {
            let response = try await http.send(request)
            switch response.status {
            case 200..<300: return .accepted
            case 401, 403: return .refused("server answered HTTP \(response.status)")
            default: return .unreachable("server answered HTTP \(response.status)")
            }
        } catch .tooLarge(_, let status) where (200..<300).contains(status) {
            return .accepted  // a large CapabilityStatement: the status is what counts
        } catch {
            return .unreachable(error.description)
        }
    }
}
