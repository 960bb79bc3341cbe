/// One HTTP exchange as the destinations see it. Bodies are bytes; nothing here logs.
public struct HTTPRequest: Sendable {
    /// The longest answer body any request takes (1 MiB); `maxResponseBytes` is at most this.
    public static let maximumResponseBytes = 1 << 20

    public var method: String
    /// The URL as given, what libcurl is handed. It can carry a token: never log it.
    public let url: String
    /// `url` read once, where the clients take host, port and target from; nil when it is not an
    /// `http`/`https` URL that `HTTPURL` reads (libcurl then has the last word, with its own error).
    public let location: HTTPURL?
    public var headers: [(String, String)]
    public var body: [UInt8]
    /// Connect timeout.
    public var connectTimeoutMs: Int
    /// Whole-exchange timeout (connect, send, wait for and read the answer).
    public var timeoutMs: Int
    /// PEM file of a private CA to trust instead of the system store.
    public var caFile: String?
    /// The longest answer body taken; a longer one ends the exchange with `HTTPError.tooLarge`.
    public var maxResponseBytes: Int

    public init(method: String, url: String, headers: [(String, String)] = [], body: [UInt8] = [],
                connectTimeoutMs: Int, timeoutMs: Int, caFile: String? = nil, maxResponseBytes: Int = HTTPRequest.maximumResponseBytes) {
        self.init(method: method, location: HTTPURL(url), text: url, headers: headers, body: body, connectTimeoutMs: connectTimeoutMs,
                  timeoutMs: timeoutMs, caFile: caFile, maxResponseBytes: maxResponseBytes)
    }

    /// A request to `url`; nil (a URL the settings' validation would have refused) gives a request that
    /// libcurl refuses as a malformed URL.
    public init(method: String, url: HTTPURL?, headers: [(String, String)] = [], body: [UInt8] = [],
                connectTimeoutMs: Int, timeoutMs: Int, caFile: String? = nil, maxResponseBytes: Int = HTTPRequest.maximumResponseBytes) {
        self.init(method: method, location: url, text: url?.text ?? "", headers: headers, body: body, connectTimeoutMs: connectTimeoutMs,
                  timeoutMs: timeoutMs, caFile: caFile, maxResponseBytes: maxResponseBytes)
    }

    private init(method: String, location: HTTPURL?, text: String, headers: [(String, String)], body: [UInt8],
                 connectTimeoutMs: Int, timeoutMs: Int, caFile: String?, maxResponseBytes: Int) {
        self.method = method
        self.url = text
        self.location = location
        self.headers = headers
        self.body = body
        self.connectTimeoutMs = connectTimeoutMs
        self.timeoutMs = timeoutMs
        self.caFile = caFile
        self.maxResponseBytes = maxResponseBytes
    }
}

public struct HTTPResponse: Sendable, Equatable {
    public var status: Int
    /// Header names in lower case.
    public var headers: [String: String]
    public var body: [UInt8]
    public init(status: Int, headers: [String: String] = [:], body: [UInt8] = []) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// A failure with no HTTP answer. Messages name the kind of failure, never the URL or a header.
public enum HTTPError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No answer in time. `connected` tells whether the connection was established (then the server
    /// may have received and committed the request: an ambiguous outcome).
    case timedOut(connected: Bool)
    case resolveFailed
    case connectionRefused
    /// No route to the network or host.
    case unreachable
    /// The connection broke after it was established (reset, closed without an answer).
    case connectionLost
    case tls(String)
    /// The server answered (`status`) with a body longer than the request allows (`limit` bytes): the
    /// answer was dropped unread.
    case tooLarge(limit: Int, status: Int)
    /// The answer's head (status line and headers, with any interim answers before it and a chunked
    /// trailer) was longer than 64 KiB: the server is broken or hostile.
    case headersTooLong
    case cancelled
    case other(String)

    public var description: String {
        switch self {
        case .timedOut(let connected): connected ? "no answer before the timeout" : "connect timed out"
        case .resolveFailed: "host name not resolved"
        case .connectionRefused: "connection refused"
        case .unreachable: "network unreachable"
        case .connectionLost: "connection closed without an answer"
        case .tls(let text): "TLS: \(text)"
        case .tooLarge(let limit, let status): "answer to HTTP \(status) longer than \(limit) bytes (dropped unread)"
        case .headersTooLong: "answer headers longer than 64 KiB"
        case .cancelled: "cancelled"
        case .other(let text): text
        }
    }
}

public protocol HTTPClient: Sendable {
    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse
}
