import GatewayCore

/// How one request for a batch ended, as the dispatcher acts on it.
public enum BatchOutcome: Sendable, Equatable {
    /// The server answered and the answer was judged element by element: `stored` came back from the
    /// server (new or already there), `rejected` did not or were refused (with the server's words),
    /// `retry` got a transient answer of their own (FHIR batch entries with 5xx or 429).
    case perElement(stored: [Int64], duplicates: Int, rejected: [Int64: String], retry: [Int64])
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
    public init(status: Int? = nil, error: HTTPError? = nil, retryAfterMs: Int? = nil) {
        self.status = status
        self.error = error
        self.retryAfterMs = retryAfterMs
    }

    public var message: String {
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
}

enum HTTPStatusClass {
    /// Common mapping of a non-2xx status to an outcome.
    static func outcome(for response: HTTPResponse) -> BatchOutcome {
        let answer = snippet(response.body)
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

    /// The first 200 characters of an answer on one line, for `status` and the quarantine record.
    static func snippet(_ body: [UInt8]) -> String {
        let text = String(decoding: body.prefix(400), as: UTF8.self)
        let flat = String(text.map { $0 == "\n" || $0 == "\r" || $0 == "\t" ? " " : $0 })
        return flat.count > 200 ? String(flat.prefix(200)) + "..." : flat
    }
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

    private var headers: [(String, String)] {
        var h = [("Content-Type", "application/json"), ("Accept", "application/json")]
        if let auth = settings.authHeader { h.append(("api-secret", auth)) }
        return h
    }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        var body: [UInt8] = [UInt8(ascii: "[")]
        for (i, item) in items.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: item.body)
        }
        body.append(UInt8(ascii: "]"))
        let request = HTTPRequest(
            method: "POST", url: HTTPURL.join(settings.url, "/api/v1/entries"), headers: headers, body: body,
            connectTimeoutMs: networkTimeoutMs, timeoutMs: exchangeTimeout(networkTimeoutMs: networkTimeoutMs, bodyBytes: body.count),
            caFile: settings.caFile)
        let response: HTTPResponse
        do {
            response = try await http.send(request)
        } catch {
            return .transient(TransientFailure(error: error))
        }
        guard (200..<300).contains(response.status) else { return HTTPStatusClass.outcome(for: response) }
        return Self.judge(response.body, items: items)
    }

    /// An element counts as stored only when it comes back in the answer: with `_id` it is new, without
    /// it was already there. Elements are matched by their `identifier`; an answer without identifiers is
    /// matched by position only when the counts agree. `200 []` or missing elements are not success.
    static func judge(_ body: [UInt8], items: [OutboxItem]) -> BatchOutcome {
        guard let parsed = try? JSONParser.parse(body), let elements = parsed.arrayValue else {
            // A 2xx we cannot read: the server may have stored the batch; send the same bytes again.
            return .transient(TransientFailure(error: .other("unreadable answer from the server")))
        }
        var byKey: [String: Int64] = [:]
        for item in items { byKey[item.key] = item.id }
        var stored: Set<Int64> = []
        var duplicates = 0
        let positional = elements.count == items.count && elements.allSatisfy { $0["identifier"] == nil }
        for (index, element) in elements.enumerated() {
            let id: Int64?
            if let key = element["identifier"]?.stringValue {
                id = byKey[key]
            } else if positional {
                id = items[index].id
            } else {
                id = nil
            }
            guard let id, element["type"]?.stringValue == "mbg" || element["type"] == nil else { continue }
            if stored.insert(id).inserted, element["_id"] == nil { duplicates += 1 }
        }
        var rejected: [Int64: String] = [:]
        for item in items where !stored.contains(item.id) {
            rejected[item.id] = elements.isEmpty ? "server answered 200 with no element stored" : "element missing from the server's answer"
        }
        return .perElement(stored: items.map(\.id).filter { stored.contains($0) }, duplicates: duplicates, rejected: rejected, retry: [])
    }

    /// `GET /api/v1/verifyauth`, which always answers 200 and says whether the credentials are valid.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = HTTPRequest(method: "GET", url: HTTPURL.join(settings.url, "/api/v1/verifyauth"), headers: headers,
                                  connectTimeoutMs: min(timeoutMs, 10_000), timeoutMs: timeoutMs, caFile: settings.caFile)
        let response: HTTPResponse
        do {
            response = try await http.send(request)
        } catch {
            return .unreachable(error.description)
        }
        if response.status == 401 || response.status == 403 { return .refused("server answered HTTP \(response.status)") }
        guard response.status == 200 else { return .unreachable("server answered HTTP \(response.status)") }
        guard let json = try? JSONParser.parse(response.body), let message = json["message"] else {
            return .unreachable("unreadable answer to the credential check")
        }
        let verdict = message["message"]?.stringValue ?? ""
        if verdict == "OK" {
            if message["canWrite"]?.boolValue == false { return .refused("credentials accepted but not allowed to write entries") }
            return .accepted
        }
        return .refused(verdict.isEmpty ? "credentials not accepted" : "credentials not accepted (\(verdict))")
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

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        var body = Array(#"{"resourceType":"Bundle","type":"batch","entry":["#.utf8)
        for (i, item) in items.enumerated() {
            if i > 0 { body.append(UInt8(ascii: ",")) }
            body.append(contentsOf: item.body)
        }
        body.append(contentsOf: Array("]}".utf8))
        var base = settings.baseURL
        while base.hasSuffix("/") { base.removeLast() }
        let request = HTTPRequest(
            method: "POST", url: base, headers: headers, body: body, connectTimeoutMs: networkTimeoutMs,
            timeoutMs: exchangeTimeout(networkTimeoutMs: networkTimeoutMs, bodyBytes: body.count), caFile: settings.caFile)
        let response: HTTPResponse
        do {
            response = try await http.send(request)
        } catch {
            return .transient(TransientFailure(error: error))
        }
        guard (200..<300).contains(response.status) else { return HTTPStatusClass.outcome(for: response) }
        return Self.judge(response.body, items: items)
    }

    /// A batch-response Bundle has one entry per request entry, in order, each with `response.status`:
    /// 201 created, 200 found by the conditional create (already there), 4xx refused, 5xx/429 retry.
    static func judge(_ body: [UInt8], items: [OutboxItem]) -> BatchOutcome {
        guard let parsed = try? JSONParser.parse(body), parsed["resourceType"]?.stringValue == "Bundle",
              let entries = parsed["entry"]?.arrayValue, entries.count == items.count else {
            return .transient(TransientFailure(error: .other("unreadable batch-response from the server")))
        }
        var stored: [Int64] = []
        var duplicates = 0
        var rejected: [Int64: String] = [:]
        var retry: [Int64] = []
        for (item, entry) in zip(items, entries) {
            let statusText = entry["response"]?["status"]?.stringValue ?? ""
            let code = Int(statusText.prefix { $0 != " " }) ?? 0
            switch code {
            case 201: stored.append(item.id)
            case 200: stored.append(item.id); duplicates += 1
            case 408, 429, 500...599: retry.append(item.id)
            default:
                var words = "entry answered \(statusText.isEmpty ? "without a status" : statusText)"
                if let outcome = entry["response"]?["outcome"], let issues = outcome["issue"]?.arrayValue,
                   let first = issues.first, let text = first["diagnostics"]?.stringValue {
                    words += ": " + text
                }
                rejected[item.id] = words
            }
        }
        return .perElement(stored: stored, duplicates: duplicates, rejected: rejected, retry: retry)
    }

    /// `GET [base]/metadata` with the token: 401/403 refuse the credentials.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        let request = HTTPRequest(method: "GET", url: HTTPURL.join(settings.baseURL, "/metadata"), headers: headers,
                                  connectTimeoutMs: min(timeoutMs, 10_000), timeoutMs: timeoutMs, caFile: settings.caFile)
        do {
            let response = try await http.send(request)
            switch response.status {
            case 200..<300: return .accepted
            case 401, 403: return .refused("server answered HTTP \(response.status)")
            default: return .unreachable("server answered HTTP \(response.status)")
            }
        } catch {
            return .unreachable(error.description)
        }
    }
}
