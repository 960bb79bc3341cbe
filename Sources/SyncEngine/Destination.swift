import GatewayCore
import GlucoseProfile
import Support
import Transport

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
    public static let maximum = HTTPRequest.maximumResponseBytes
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
func sendBatch(_ items: [OutboxItem], body: [UInt8], to server: UploadServer, path: String, headers: [(String, String)],
               networkTimeoutMs: Int, secrets: [String], judge: (HTTPResponse) -> BatchOutcome) async -> BatchOutcome {
    let request = server.post(path, headers: headers, body: body, elements: items.count, networkTimeoutMs: networkTimeoutMs)
    let response: HTTPResponse
    do {
        response = try await server.http.send(request)
    } catch .tooLarge(_, let status) where status >= 300 {
        // An error status with an oversized body: the status is the answer; the body is not needed.
        return HTTPStatusClass.outcome(for: HTTPResponse(status: status), redacting: secrets)
    } catch {
        return .transient(TransientFailure(error: error))
    }
    guard (200..<300).contains(response.status) else { return HTTPStatusClass.outcome(for: response, redacting: secrets) }
    return judge(response)
}

/// The server an HTTP destination talks to: its base URL, read once when the destination starts (each
/// endpoint is appended to its path, never read again), the CA bundle TLS trusts there, and the client.
/// Nightscout (entries, treatments, device status, the v3 token exchange) and FHIR each keep one.
struct UploadServer: Sendable {
    /// Nil when the URL does not read, which the config never lets through: requests to it are then
    /// refused by libcurl as a malformed URL.
    let base: HTTPURL?
    let caFile: String?
    let http: any HTTPClient

    init(url: String, caFile: String?, http: any HTTPClient) {
        base = HTTPURL(url)
        self.caFile = caFile
        self.http = http
    }

    /// Scheme, host and port (`HTTPURL.origin`), for log lines.
    var origin: String { base?.origin ?? "?" }

    /// A POST of `body`, `elements` documents, to `path` below the base: `networkTimeoutMs` to connect,
    /// longer in all for a large body, with room for an answer about each element.
    func post(_ path: String, headers: [(String, String)], body: [UInt8], elements: Int, networkTimeoutMs: Int) -> HTTPRequest {
        HTTPRequest(method: "POST", url: base?.appending(path: path), headers: headers, body: body, connectTimeoutMs: networkTimeoutMs,
                    timeoutMs: exchangeTimeout(networkTimeoutMs: networkTimeoutMs, bodyBytes: body.count), caFile: caFile,
                    maxResponseBytes: ResponseLimit.forBatch(elements: elements, requestBytes: body.count))
    }

    /// A credential check, token exchange or status page at `path`: a GET that may take `timeoutMs` in
    /// all, at most 10 s of it to connect, with room for a large document.
    func check(_ path: String, headers: [(String, String)], timeoutMs: Int) -> HTTPRequest {
        HTTPRequest(method: "GET", url: base?.appending(path: path), headers: headers, connectTimeoutMs: min(timeoutMs, 10_000),
                    timeoutMs: timeoutMs, caFile: caFile, maxResponseBytes: ResponseLimit.check)
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
