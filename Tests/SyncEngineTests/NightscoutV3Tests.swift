import Foundation
import GatewayCore
import Support
import SyncEngine
import Synchronization
import Testing
import TestSupport
import Transport

/// An in-process server: each request goes to `answer`, and is recorded.
final class ScriptedHTTPClient: HTTPClient {
    typealias Answer = @Sendable (HTTPRequest) -> Result<HTTPResponse, HTTPError>
    private let state: Mutex<(answer: Answer, requests: [HTTPRequest])>
    init(_ answer: @escaping Answer) { state = Mutex((answer, [])) }

    func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        let answer = state.withLock { s -> Answer in
            s.requests.append(request)
            return s.answer
        }
        return try answer(request).get()
    }

    func setAnswer(_ answer: @escaping Answer) { state.withLock { $0.answer = answer } }
    var requests: [HTTPRequest] { state.withLock { $0.requests } }
    func paths(_ prefix: String) -> [String] {
        requests.map { Self.path($0.url) }.filter { $0.hasPrefix(prefix) }
    }

    /// The path of `http://host:port/path`.
    static func path(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        return rest.firstIndex(of: "/").map { String(rest[$0...]) } ?? "/"
    }
}

private func json(_ status: Int, _ text: String) -> Result<HTTPResponse, HTTPError> {
    .success(HTTPResponse(status: status, headers: ["content-type": "application/json"], body: Array(text.utf8)))
}

private func bearer(_ request: HTTPRequest) -> String? {
    request.headers.first { $0.0 == "Authorization" }?.1
}

private let accessToken = "gateway-0123456789abcdef"

/// A Nightscout that issues JWTs `jwt-1`, `jwt-2`, ... living `lifetime` seconds (by `iat`/`exp` in a far-off
/// clock of its own), accepts only `accepted` JWTs on /api/v3 and stores documents by identifier.
final class ScriptedNightscout: Sendable {
    struct State {
        var issued = 0
        var accepted: Set<String> = []
        var stored: [String: [UInt8]] = [:]
        var created = 0
    }
    let state = Mutex(State())
    let lifetime: Int64

    init(lifetime: Int64 = 28_800) { self.lifetime = lifetime }

    func client() -> ScriptedHTTPClient {
        ScriptedHTTPClient { [self] request in answer(request) }
    }

    func answer(_ request: HTTPRequest) -> Result<HTTPResponse, HTTPError> {
        let path = ScriptedHTTPClient.path(request.url)
        if path.hasPrefix("/api/v2/authorization/request/") {
            guard path.hasSuffix("/" + accessToken) else { return json(401, #"{"status":401,"message":"Unauthorized"}"#) }
            let jwt = state.withLock { s -> String in
                s.issued += 1
                s.accepted.insert("jwt-\(s.issued)")
                return "jwt-\(s.issued)"
            }
            // The server's clock is years away from the gateway's: only exp - iat counts.
            return json(200, #"{"token":"\#(jwt)","sub":"gateway","iat":1000000000,"exp":\#(1_000_000_000 + lifetime)}"#)
        }
        guard let auth = bearer(request), auth.hasPrefix("Bearer "),
              state.withLock({ $0.accepted.contains(String(auth.dropFirst(7))) }) else {
            return json(401, #"{"status":401,"message":"Bad access token or JWT"}"#)
        }
        if path == "/api/v3/status" {
            return json(200, #"{"status":200,"result":{"apiPermissions":{"entries":"crud"}}}"#)
        }
        guard path == "/api/v3/entries" || path == "/api/v3/devicestatus", case .object(let members)? = try? JSONParser.parse(request.body),
              let identifier = members.first(where: { $0.key == "identifier" })?.value.stringValue else {
            return json(400, #"{"status":400,"message":"Bad or missing request body"}"#)
        }
        let dedup = state.withLock { s -> Bool in
            if s.stored[identifier] != nil { return true }
            s.stored[identifier] = request.body
            s.created += 1
            return false
        }
        return dedup
            ? json(200, #"{"status":200,"identifier":"\#(identifier)","isDeduplication":true,"lastModified":1}"#)
            : json(201, #"{"status":201,"identifier":"\#(identifier)","lastModified":1}"#)
    }

    var issued: Int { state.withLock { $0.issued } }
    var created: Int { state.withLock { $0.created } }
    func expireAll() { state.withLock { $0.accepted.removeAll() } }
}

private func v3Settings(url: String = "http://127.0.0.1:9", token: String = accessToken) -> NightscoutSettings {
    var settings = NightscoutSettings(url: url, token: Secret(token))
    settings.api = .v3
    return settings
}

private func items(_ count: Int) async throws -> [OutboxItem] {
    let store = await filledStore(count)
    return try await store.claimPending(.nightscout, limit: count)
}

@Suite("Nightscout API v3", .serialized, .timeLimit(.minutes(2)))
struct NightscoutV3Tests {
    @Test func theJWTIsReusedThenRenewedAtThreeQuartersOfItsLifetimeOnTheInjectedClock() async throws {
        let server = ScriptedNightscout(lifetime: 3600)
        let http = server.client()
        let clock = ManualClock()
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: clock))
        let batch = try await items(4)

        _ = await destination.send([batch[0]], networkTimeoutMs: 1000)
        #expect(server.issued == 1)
        clock.advance(by: .seconds(2699))
        _ = await destination.send([batch[1]], networkTimeoutMs: 1000)
        #expect(server.issued == 1)  // 2699 s of 3600: not yet due
        clock.advance(by: .seconds(1))
        _ = await destination.send([batch[2]], networkTimeoutMs: 1000)
        #expect(server.issued == 2)  // 2700 s: renewed before the old one expired
        #expect(http.requests.filter { ScriptedHTTPClient.path($0.url) == "/api/v3/entries" }.compactMap(bearer)
                == ["Bearer jwt-1", "Bearer jwt-1", "Bearer jwt-2"])
        // No request was answered 401: the renewal came first.
        #expect(server.created == 3)
    }

    @Test func aRefusedJWTIsRenewedOnceAndTheSameDocumentSentAgain() async throws {
        let server = ScriptedNightscout()
        let http = server.client()
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let batch = try await items(2)
        _ = await destination.send([batch[0]], networkTimeoutMs: 1000)
        server.expireAll()  // e.g. the server restarted with a new key
        let outcome = await destination.send([batch[1]], networkTimeoutMs: 1000)
        #expect(outcome == .perElement(stored: [batch[1].id], duplicates: 0, rejected: [:], retry: [], retryReason: ""))
        #expect(server.issued == 2)
        let posts = http.requests.filter { ScriptedHTTPClient.path($0.url) == "/api/v3/entries" }
        try #require(posts.count == 3)
        #expect(posts[1].body == posts[2].body)
    }

    @Test func aSecond401AfterTheRenewalPausesWithoutShowingTheToken() async throws {
        let http = ScriptedHTTPClient { request in
            if ScriptedHTTPClient.path(request.url).hasPrefix("/api/v2/") {
                return json(200, #"{"token":"jwt-x","iat":1,"exp":28801}"#)
            }
            return json(401, #"{"status":401,"message":"Bad access token or JWT gateway-0123456789abcdef jwt-x"}"#)
        }
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let outcome = await destination.send(try await items(1), networkTimeoutMs: 1000)
        guard case let .auth(status, answer) = outcome else {
            Issue.record("expected .auth, got \(outcome)")
            return
        }
        #expect(status == 401)
        #expect(!answer.contains(accessToken) && !answer.contains("jwt-x"))
        #expect(http.paths("/api/v2/").count == 2)  // one renewal, not a loop
        #expect(http.paths("/api/v3/").count == 2)
    }

    @Test func aTimeoutAfterConnectingStartsTheNextAttemptWithANewJWT() async throws {
        // Nightscout answers an expired JWT only after its failed-authentication delay: to the gateway that is a
        // timeout, so the next attempt must not reuse the JWT.
        let server = ScriptedNightscout()
        let http = server.client()
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let batch = try await items(2)
        http.setAnswer { request in
            ScriptedHTTPClient.path(request.url) == "/api/v3/entries" ? .failure(.timedOut(connected: true)) : server.answer(request)
        }
        guard case .transient(let failure) = await destination.send(batch, networkTimeoutMs: 1000), failure.isTimeout else {
            Issue.record("expected a timeout")
            return
        }
        http.setAnswer { request in server.answer(request) }
        let outcome = await destination.send(batch, networkTimeoutMs: 1000)
        #expect(outcome == .perElement(stored: batch.map(\.id), duplicates: 0, rejected: [:], retry: [], retryReason: ""))
        #expect(server.issued == 2)
    }

    @Test func anUnknownAccessTokenPausesAndTheCheckSaysSo() async throws {
        let server = ScriptedNightscout()
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(token: "not-a-known-token"), http: server.client(),
                                                                clock: ManualClock()))
        let outcome = await destination.send(try await items(3), networkTimeoutMs: 1000)
        #expect(outcome == .auth(status: 401, answer: "access token refused"))
        guard case .refused(let why) = await destination.checkCredentials(timeoutMs: 1000) else {
            Issue.record("expected refused")
            return
        }
        #expect(why.contains("access token not accepted"))
        #expect(!why.contains("not-a-known-token"))
    }

    @Test(arguments: [
        (201, #"{"status":201,"identifier":"KEY","lastModified":1}"#, true, false),
        (200, #"{"status":200,"identifier":"KEY","isDeduplication":true,"lastModified":1}"#, true, true),
        (403, #"{"status":403,"message":"Missing permission api:entries:update"}"#, true, true),
        (201, #"{"status":201,"identifier":"another","lastModified":1}"#, false, false),
        (200, #"{"status":200,"lastModified":1}"#, false, false),
        (200, "not json", false, false),
    ])
    func answersThatAcknowledge(status: Int, body: String, acknowledged: Bool, duplicate: Bool) async throws {
        let batch = try await items(1)
        let text = body.replacingOccurrences(of: "KEY", with: batch[0].key)
        let http = ScriptedHTTPClient { request in
            ScriptedHTTPClient.path(request.url).hasPrefix("/api/v2/") ? json(200, #"{"token":"jwt","iat":1,"exp":28801}"#) : json(status, text)
        }
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let outcome = await destination.send(batch, networkTimeoutMs: 1000)
        guard case let .perElement(stored, duplicates, rejected, retry, _) = outcome else {
            Issue.record("expected a per-element outcome, got \(outcome)")
            return
        }
        #expect(rejected.isEmpty)
        #expect(stored == (acknowledged ? [batch[0].id] : []))
        #expect(retry == (acknowledged ? [] : [batch[0].id]))
        #expect(duplicates == (duplicate ? 1 : 0))
    }

    @Test func aMissingCreatePermissionPausesAndTheCheckNamesIt() async throws {
        let http = ScriptedHTTPClient { request in
            switch ScriptedHTTPClient.path(request.url) {
            case let p where p.hasPrefix("/api/v2/"): json(200, #"{"token":"jwt","iat":1,"exp":28801}"#)
            case "/api/v3/status": json(200, #"{"status":200,"result":{"apiPermissions":{"treatments":"c","entries":"r"}}}"#)
            default: json(403, #"{"status":403,"message":"Missing permission api:entries:create"}"#)
            }
        }
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let outcome = await destination.send(try await items(2), networkTimeoutMs: 1000)
        guard case .auth(403, _) = outcome else {
            Issue.record("expected .auth(403), got \(outcome)")
            return
        }
        #expect(await destination.checkCredentials(timeoutMs: 1000) == .refused("access token lacks permission api:entries:create"))
    }

    @Test func aFailureAfterSomeDocumentsReportsThoseAndRetriesTheRest() async throws {
        let server = ScriptedNightscout()
        let http = server.client()
        let destination = try #require(NightscoutV3Destination(settings: v3Settings(), http: http, clock: ManualClock()))
        let batch = try await items(5)
        let posts = Mutex(0)
        http.setAnswer { request in
            if ScriptedHTTPClient.path(request.url) == "/api/v3/entries", posts.withLock({ $0 += 1; return $0 }) == 3 {
                return json(500, #"{"status":500,"message":"Database error"}"#)
            }
            return server.answer(request)
        }
        let outcome = await destination.send(batch, networkTimeoutMs: 1000)
        guard case let .perElement(stored, _, rejected, retry, reason) = outcome else {
            Issue.record("expected per-element, got \(outcome)")
            return
        }
        #expect(stored == batch[0..<2].map(\.id))
        #expect(retry == batch[2...].map(\.id))
        #expect(rejected.isEmpty)
        #expect(reason.contains("500"))
    }

    @Test func theDocumentIsTheFrozenElementWithAppAndItsOffset() throws {
        let frozen = Array(#"{"type":"mbg","mbg":112,"date":1767250930000,"dateString":"2026-01-01T08:02:10.000+01:00","identifier":"k"}"#.utf8)
        let document = try #require(NightscoutV3Destination.document(frozen))
        #expect(String(decoding: document, as: UTF8.self)
                == #"{"type":"mbg","mbg":112,"date":1767250930000,"dateString":"2026-01-01T08:02:10.000+01:00","identifier":"k","app":"glucose-gateway","utcOffset":60}"#)
        #expect(NightscoutV3Destination.document(frozen) == document)  // the same bytes on every retry
        #expect(NightscoutV3Destination.offsetMinutes("2026-01-01T08:02:10.000-05:30") == -330)
        #expect(NightscoutV3Destination.offsetMinutes("2026-01-01T08:02:10.000Z") == 0)
        #expect(NightscoutV3Destination.offsetMinutes("2026-01-01T08:02:10.000") == nil)
        #expect(NightscoutV3Destination.document(Array("[1]".utf8)) == nil)
    }

    @Test func v3NeedsAnAccessToken() {
        var settings = NightscoutSettings(url: "https://ns.example", apiSecret: Secret("correct-horse-battery"))
        settings.api = .v3
        #expect(BuilderTests.problems("nightscout", "url = \"https://ns.example\"\napi_secret = \"correct-horse-battery\"\napi = \"v3\"", { NightscoutSection(section: &$0) })
                == [#"nightscout.api = "v3" takes an access token (token or token_file), not api_secret"#])
        #expect(NightscoutV3Destination(settings: settings, http: ScriptedHTTPClient { _ in .failure(.cancelled) }) == nil)
    }
}
