import GatewayCore
import Support
import Transport

/// Which Nightscout API the gateway writes to (`[nightscout] api`).
public enum NightscoutAPI: String, Sendable, Equatable, CaseIterable {
    /// `/api/v1/entries` with the `api-secret` header (the API secret's SHA-1, or an access token).
    case v1
    /// `/api/v3/<collection>`, one document per request, with a JWT exchanged for an access token.
    case v3
}

/// Why no JWT could be had for the access token.
enum TokenExchangeFailure: Error, Sendable, Equatable {
    /// The server does not know the token (`401` from `/api/v2/authorization/request`).
    case refused(status: Int)
    /// No usable answer (network, 5xx, an answer without a token): nothing is known about the token.
    case transient(TransientFailure)
    /// The route does not exist (a redirect, 404): the URL is wrong, or the server has no API v2.
    case misconfigured(status: Int)
}

/// The JWT for an access token, exchanged at `GET /api/v2/authorization/request/<token>` and kept until it
/// is due for renewal.
///
/// The server's answer carries `iat` and `exp` in its own clock's seconds. Only their difference is used,
/// measured from when the answer arrived on the injected monotonic clock: a gateway without a real-time
/// clock (a Raspberry Pi at boot) or a server whose clock is off still renews in time. A JWT is renewed
/// once three quarters of its lifetime have passed, or at once when the server refused it (`invalidate`).
public actor NightscoutAuthorization {
    /// Used when the answer gives no usable `iat`/`exp` (Nightscout's JWTs live 8 h), or a lifetime outside
    /// `plausibleLifetime`.
    public static let fallbackLifetime: Duration = .seconds(3600)
    /// The site.
    nonisolated let server: UploadServer
    let token: Secret
    let clock: any SessionClock

    private var jwt: String?
    private var renewAt: ContinuousClock.Instant?
    /// Exchanges done, for tests and the log.
    public private(set) var exchanges = 0

    public init(baseURL: String, token: Secret, caFile: String?, http: any HTTPClient, clock: any SessionClock = ContinuousClock()) {
        server = UploadServer(url: baseURL, caFile: caFile, http: http)
        self.token = token
        self.clock = clock
    }

    /// The JWT as last received, for redaction of answers that reflect it.
    var current: String? { jwt }

    /// Forgets the JWT: the next `bearer` exchanges the token again.
    func invalidate() {
        jwt = nil
        renewAt = nil
    }

    /// When the JWT in hand will be renewed; nil without one.
    public var renewalDue: ContinuousClock.Instant? { renewAt }

    /// An exchange under way: destinations sharing this authorization (entries and treatments) wait for it
    /// rather than each exchanging the token.
    private var underWay: Task<Result<String, TokenExchangeFailure>, Never>?

    /// A JWT that is not due for renewal, exchanging the token when there is none or it is due.
    func bearer(timeoutMs: Int) async throws(TokenExchangeFailure) -> String {
        if let jwt, let renewAt, clock.now < renewAt { return jwt }
        if let underWay { return try await underWay.value.get() }
        let task = Task { () -> Result<String, TokenExchangeFailure> in
            do throws(TokenExchangeFailure) { return .success(try await self.exchange(timeoutMs: timeoutMs)) } catch { return .failure(error) }
        }
        underWay = task
        let result = await task.value
        underWay = nil
        return try result.get()
    }

    /// `GET /api/v2/authorization/request/<token>`: `{"token": JWT, "iat": s, "exp": s, ...}` or 401.
    private func exchange(timeoutMs: Int) async throws(TokenExchangeFailure) -> String {
        let request = server.check("/api/v2/authorization/request/" + Self.pathSegment(token.value), headers: [("Accept", "application/json")],
                                   timeoutMs: timeoutMs)
        let response: HTTPResponse
        do {
            response = try await server.http.send(request)
        } catch .tooLarge(_, let status) where status >= 300 {
            throw Self.failure(status: status)
        } catch {
            throw .transient(TransientFailure(error: error))
        }
        exchanges += 1
        guard response.status == 200 else { throw Self.failure(status: response.status) }
        guard let json = try? JSONParser.parse(response.body), let jwt = json["token"]?.stringValue, !jwt.isEmpty,
              jwt.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw .transient(TransientFailure(status: 200, reason: "unreadable answer to the token exchange"))
        }
        // The JWT goes out in the header of every POST: a huge one would multiply the traffic and may be
        // cut by a proxy. Nightscout's are a few hundred bytes.
        guard jwt.utf8.count <= Self.maximumJWTBytes else {
            throw .transient(TransientFailure(status: 200, reason: "token exchange answered a JWT longer than 8 KiB"))
        }
        let lifetime = Self.lifetime(iat: json["iat"]?.int64Value, exp: json["exp"]?.int64Value)
        self.jwt = jwt
        self.renewAt = clock.now.advanced(by: lifetime * 3 / 4)
        return jwt
    }

    /// The longest JWT taken from the token exchange.
    static let maximumJWTBytes = 8 << 10
    /// The lifetimes taken from `iat`/`exp`: a JWT is renewed no sooner than 45 s (three quarters of a
    /// minute) after it arrived, and at least every few days.
    static let plausibleLifetime: ClosedRange<Int64> = 60...(7 * 86_400)

    /// `exp - iat` in seconds when both are there and the difference is a plausible lifetime, else
    /// `fallbackLifetime`. The numbers are the server's: their difference is taken with an overflow check,
    /// and a nonsensical lifetime (negative, a second, a century) falls back rather than renewing in a loop.
    static func lifetime(iat: Int64?, exp: Int64?) -> Duration {
        guard let iat, let exp else { return fallbackLifetime }
        let (difference, overflow) = exp.subtractingReportingOverflow(iat)
        guard !overflow, plausibleLifetime.contains(difference) else { return fallbackLifetime }
        return .seconds(difference)
    }

    private static func failure(status: Int) -> TokenExchangeFailure {
        switch status {
        case 401, 403: .refused(status: status)
        case 408, 429, 500...599: .transient(TransientFailure(status: status))
        default: .misconfigured(status: status)
        }
    }

    /// Percent-encoding of everything but RFC 3986 unreserved characters.
    static func pathSegment(_ text: String) -> String {
        var out = ""
        for byte in text.utf8 {
            let c = Character(Unicode.Scalar(byte))
            if byte < 0x80, c.isLetter || c.isNumber || c == "-" || c == "." || c == "_" || c == "~" {
                out.append(c)
            } else {
                let hex = Array("0123456789ABCDEF")
                out += "%" + String(hex[Int(byte >> 4)]) + String(hex[Int(byte & 0x0F)])
            }
        }
        return out
    }
}

/// Nightscout API v3: each frozen document is POSTed on its own to `/api/v3/<collection>` with a Bearer JWT.
///
/// The document sent is the frozen element with `app` and, when it has none, `utcOffset` (read from its
/// `dateString`) added, both derived from the frozen bytes alone, so every retry sends the same document and
/// the server's immutable-field check on a deduplicated re-send always passes. The server keys on
/// `identifier` (the reading's key); it answers `201` when it stores the document and `200` with
/// `isDeduplication` when it already has it. A re-send of a document that is already there needs the
/// `update` permission: without it the server answers `403 Missing permission api:<collection>:update`,
/// which also says the document is stored, so it too is an acknowledgement.
public struct NightscoutV3Destination: UploadDestination {
    public static let app = "glucose-gateway"
    public let name: DestinationName
    /// `entries`, or `treatments` for a destination whose frozen documents are treatments.
    public let collection: String
    public let settings: NightscoutSettings
    public let authorization: NightscoutAuthorization

    /// Nil when the settings carry no access token (the config refuses `api = "v3"` without one).
    public init?(name: DestinationName = .nightscout, collection: String = "entries", settings: NightscoutSettings,
                 http: any HTTPClient, clock: any SessionClock = ContinuousClock()) {
        guard let token = settings.token else { return nil }
        self.name = name
        self.collection = collection
        self.settings = settings
        self.authorization = NightscoutAuthorization(baseURL: settings.url, token: token, caFile: settings.caFile, http: http, clock: clock)
    }

    private init(name: DestinationName, collection: String, settings: NightscoutSettings, authorization: NightscoutAuthorization) {
        self.name = name
        self.collection = collection
        self.settings = settings
        self.authorization = authorization
    }

    /// A destination of another collection on the same site, sharing this one's JWT.
    public func sibling(name: DestinationName, collection: String) -> NightscoutV3Destination {
        NightscoutV3Destination(name: name, collection: collection, settings: settings, authorization: authorization)
    }

    /// The site, shared with the authorization.
    var server: UploadServer { authorization.server }

    public var origin: String { server.origin }

    /// The permission a new document needs.
    public var createPermission: String { "api:\(collection):create" }

    func secrets() async -> [String] {
        [settings.token?.value, await authorization.current].compactMap { $0 }
    }

    public func send(_ items: [OutboxItem], networkTimeoutMs: Int) async -> BatchOutcome {
        var stored: [Int64] = []
        var duplicates = 0
        var rejected: [Int64: String] = [:]
        for (index, item) in items.enumerated() {
            let outcome = await sendOne(item, networkTimeoutMs: networkTimeoutMs)
            switch outcome {
            case .stored(let duplicate):
                stored.append(item.id)
                if duplicate { duplicates += 1 }
                continue
            case .unconfirmed(let reason):
                return .perElement(stored: stored, duplicates: duplicates, rejected: rejected,
                                   retry: items[index...].map(\.id), retryReason: reason)
            case .batch(let batchOutcome):
                if case let .rejected(status, answer) = batchOutcome {
                    // This document alone is refused: the others are judged on their own.
                    rejected[item.id] = "HTTP \(status): \(answer)"
                    continue
                }
                guard !stored.isEmpty || !rejected.isEmpty else { return batchOutcome }
                // Some were settled before the failure: report them; the rest are sent again and meet the
                // failure first.
                return .perElement(stored: stored, duplicates: duplicates, rejected: rejected,
                                   retry: items[index...].map(\.id), retryReason: Self.describe(batchOutcome))
            }
        }
        return .perElement(stored: stored, duplicates: duplicates, rejected: rejected, retry: [], retryReason: "")
    }

    private enum ItemOutcome {
        case stored(duplicate: Bool)
        /// A 2xx that does not confirm this document.
        case unconfirmed(String)
        /// What the whole batch ends with.
        case batch(BatchOutcome)
    }

    private static func describe(_ outcome: BatchOutcome) -> String {
        switch outcome {
        case .transient(let failure): failure.message
        case .auth(let status, _), .misconfigured(let status, _), .rejected(let status, _): "server answered HTTP \(status)"
        case .tooLarge: "server answered HTTP 413"
        case .perElement(_, _, _, _, let reason): reason
        }
    }

    private func exchangeOutcome(_ failure: TokenExchangeFailure) async -> BatchOutcome {
        switch failure {
        case .refused(let status): .auth(status: status, answer: "access token refused")
        case .misconfigured(let status): .misconfigured(status: status, answer: "no token exchange at this URL")
        case .transient(let t): .transient(t)
        }
    }

    private func sendOne(_ item: OutboxItem, networkTimeoutMs: Int) async -> ItemOutcome {
        guard let document = Self.document(item.body, key: item.key) else {
            return .batch(.rejected(status: 400, answer: "frozen document is not a JSON object"))
        }
        let identifier = (try? JSONParser.parse(document))?["identifier"]?.stringValue ?? item.key
        var renewed = false
        while true {
            let jwt: String
            do {
                jwt = try await authorization.bearer(timeoutMs: networkTimeoutMs)
            } catch {
                return .batch(await exchangeOutcome(error))
            }
            let request = server.post("/api/v3/\(collection)",
                                      headers: [("Content-Type", "application/json"), ("Accept", "application/json"), ("Authorization", "Bearer \(jwt)")],
                                      body: document, elements: 1, networkTimeoutMs: networkTimeoutMs)
            let response: HTTPResponse
            do {
                response = try await server.http.send(request)
            } catch .tooLarge(_, let status) where status >= 300 {
                if status == 401 && !renewed {
                    await authorization.invalidate()
                    renewed = true
                    continue
                }
                return .batch(HTTPStatusClass.outcome(for: HTTPResponse(status: status), redacting: await secrets()))
            } catch {
                // Nightscout answers an expired or unknown JWT with a 401 only after its failed-authentication
                // delay, which can outlast the timeout: the next attempt starts with a new JWT.
                if case .timedOut(connected: true) = error { await authorization.invalidate() }
                return .batch(.transient(TransientFailure(error: error)))
            }
            if response.status == 401 && !renewed {
                // Expired early, or the server's key changed: one new JWT, then the same document again.
                await authorization.invalidate()
                renewed = true
                continue
            }
            return await judge(response, identifier: identifier)
        }
    }

    private func judge(_ response: HTTPResponse, identifier: String) async -> ItemOutcome {
        let json = try? JSONParser.parse(response.body)
        switch response.status {
        case 201:
            if json?["identifier"]?.stringValue == identifier { return .stored(duplicate: false) }
            return .unconfirmed("server answered HTTP 201 without the reading's identifier")
        case 200:
            if json?["isDeduplication"]?.boolValue == true { return .stored(duplicate: true) }
            return .unconfirmed("server answered HTTP 200 without confirming the reading")
        case 200..<300:
            return .unconfirmed("server answered HTTP \(response.status) without confirming the reading")
        case 403 where json?["message"]?.stringValue == "Missing permission api:\(collection):update":
            // Asked for `update` only because the document is already stored (the create path's dedupe).
            return .stored(duplicate: true)
        default:
            return .batch(HTTPStatusClass.outcome(for: response, redacting: await secrets()))
        }
    }

    /// The document sent for a frozen element: the element's members, then `identifier` (`key`) when it has
    /// none, `app`, and `utcOffset` from its `dateString` (or `created_at`) when it carries none. Nil when the
    /// element is not a JSON object.
    public static func document(_ frozen: [UInt8], key: String? = nil) -> [UInt8]? {
        guard case .object(var members)? = try? JSONParser.parse(frozen) else { return nil }
        if let key, !members.contains(where: { $0.key == "identifier" }) { members.append(JSONMember("identifier", .string(key))) }
        if !members.contains(where: { $0.key == "app" }) { members.append(JSONMember("app", .string(app))) }
        if !members.contains(where: { $0.key == "utcOffset" }) {
            let dateString = members.first { $0.key == "dateString" || $0.key == "created_at" }?.value.stringValue
            members.append(JSONMember("utcOffset", .int(dateString.flatMap(offsetMinutes) ?? 0)))
        }
        return Array(JSONValue.object(members).compactText.utf8)
    }

    /// Minutes east of UTC at the end of an ISO 8601 date-time: `Z`, `+01:00`, `-0530`; nil without one.
    public static func offsetMinutes(_ text: String) -> Int? {
        if text.hasSuffix("Z") || text.hasSuffix("z") { return 0 }
        let digits = Array(text.suffix(6))
        var sign: Int?
        var rest: [Character] = []
        if digits.count == 6, digits[0] == "+" || digits[0] == "-", digits[3] == ":" {
            sign = digits[0] == "+" ? 1 : -1
            rest = [digits[1], digits[2], digits[4], digits[5]]
        } else if digits.count == 6, digits[1] == "+" || digits[1] == "-" {
            sign = digits[1] == "+" ? 1 : -1
            rest = Array(digits[2...])
        }
        guard let sign, rest.allSatisfy({ $0.isASCII && $0.isNumber }),
              let hours = Int(String(rest[0...1])), let minutes = Int(String(rest[2...3])), hours <= 18, minutes < 60 else { return nil }
        return sign * (hours * 60 + minutes)
    }

    /// `upload --check` and the paused state's re-check: exchange the token for a fresh JWT, then read its
    /// permissions from `GET /api/v3/status` (`apiPermissions`, `c` for create). A token the server does not
    /// know, or one that may not create documents in this collection, is refused with the permission named.
    public func checkCredentials(timeoutMs: Int) async -> CredentialCheck {
        await authorization.invalidate()
        let jwt: String
        do {
            jwt = try await authorization.bearer(timeoutMs: timeoutMs)
        } catch {
            switch error {
            case .refused(let status): return .refused("access token not accepted (HTTP \(status) from the token exchange)")
            case .misconfigured(let status): return .unreachable("token exchange answered HTTP \(status): check the URL")
            case .transient(let t): return .unreachable(t.message)
            }
        }
        let request = server.check("/api/v3/status", headers: [("Accept", "application/json"), ("Authorization", "Bearer \(jwt)")],
                                   timeoutMs: timeoutMs)
        return await runCredentialCheck(request, http: server.http) { response in
            if response.status == 401 { return .refused("JWT not accepted by /api/v3 (HTTP 401)") }
            guard response.status == 200 else { return .unreachable("/api/v3/status answered HTTP \(response.status)") }
            guard let json = try? JSONParser.parse(response.body), let permissions = json["result"]?["apiPermissions"] else {
                return .unreachable("unreadable answer from /api/v3/status")
            }
            let granted = permissions[collection]?.stringValue ?? ""
            if !granted.contains("c") { return .refused("access token lacks permission \(createPermission)") }
            return .accepted
        }
    }
}
