import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport
import Transport

/// A server that answers the token exchange with `exchange` (a JSON text) and stores every v3 document.
private func tokenServer(_ exchange: String) -> ScriptedHTTPClient {
    ScriptedHTTPClient { request in
        let path = ScriptedHTTPClient.path(request.url)
        if path.hasPrefix("/api/v2/authorization/request/") {
            return .success(HTTPResponse(status: 200, headers: ["content-type": "application/json"], body: Array(exchange.utf8)))
        }
        let identifier = (try? JSONParser.parse(request.body))?["identifier"]?.stringValue ?? ""
        return .success(HTTPResponse(status: 201, headers: ["content-type": "application/json"],
                                     body: Array(#"{"status":201,"identifier":"\#(identifier)"}"#.utf8)))
    }
}

private func v3Destination(_ http: ScriptedHTTPClient, clock: ManualClock) -> NightscoutV3Destination? {
    var settings = NightscoutSettings(url: "http://127.0.0.1:9", token: Secret("gateway-0123456789abcdef"))
    settings.api = .v3
    return NightscoutV3Destination(settings: settings, http: http, clock: clock)
}

@Suite("Nightscout API v3: what a token exchange may answer")
struct NightscoutV3TokenAnswerTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var iatExp: String
        /// When the JWT is renewed, in seconds after the exchange.
        var renewAfter: Int64
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "iat Int64.min, exp Int64.max (exp - iat overflows)",
             iatExp: #""iat":-9223372036854775808,"exp":9223372036854775807"#, renewAfter: 2700),
        Case(name: "iat -1, exp Int64.max (overflows by one)", iatExp: #""iat":-1,"exp":9223372036854775807"#, renewAfter: 2700),
        Case(name: "iat -(2^63-1), exp 2", iatExp: #""iat":-9223372036854775807,"exp":2"#, renewAfter: 2700),
        Case(name: "exp before iat", iatExp: #""iat":2000,"exp":1000"#, renewAfter: 2700),
        Case(name: "a lifetime of one second", iatExp: #""iat":1000000000,"exp":1000000001"#, renewAfter: 2700),
        Case(name: "a lifetime of a century", iatExp: #""iat":0,"exp":3155760000"#, renewAfter: 2700),
        Case(name: "a whole decimal beyond Int64", iatExp: #""iat":0,"exp":1e30"#, renewAfter: 2700),
        Case(name: "Nightscout's eight hours", iatExp: #""iat":1700000000,"exp":1700028800"#, renewAfter: 21_600),
        Case(name: "one minute, the shortest taken", iatExp: #""iat":1700000000,"exp":1700000060"#, renewAfter: 45),
        Case(name: "seven days, the longest taken", iatExp: #""iat":1700000000,"exp":1700604800"#, renewAfter: 453_600),
    ]

    /// No number in the answer traps; an unusable lifetime falls back to the default one (an hour,
    /// renewed at 45 min), a plausible one is renewed at three quarters, never sooner than 45 s.
    @Test(arguments: cases)
    func lifetimesFromTheServersNumbers(_ c: Case) async throws {
        let http = tokenServer(#"{"token":"a.b.c","# + c.iatExp + "}")
        let clock = ManualClock()
        let destination = try #require(v3Destination(http, clock: clock))
        let items = try await filledStore(1).claimPending(.nightscout, limit: 1)
        let start = clock.now
        let outcome = await destination.send(items, networkTimeoutMs: 1000)
        #expect(outcome == .perElement(stored: [items[0].id], duplicates: 0, rejected: [:], retry: [], retryReason: ""))
        let due = try #require(await destination.authorization.renewalDue)
        #expect(due == start.advanced(by: .seconds(c.renewAfter)))
    }

    /// A JWT with a one-second lifetime is not renewed before every request: the next document, 10 s later,
    /// goes with the same JWT (the server would answer 401 if it had really expired, which renews it).
    @Test func aOneSecondJWTIsNotRenewedEveryFewHundredMilliseconds() async throws {
        let http = tokenServer(#"{"token":"a.b.c","iat":1000000000,"exp":1000000001}"#)
        let clock = ManualClock()
        let destination = try #require(v3Destination(http, clock: clock))
        let items = try await filledStore(3).claimPending(.nightscout, limit: 3)
        for item in items {
            _ = await destination.send([item], networkTimeoutMs: 1000)
            clock.advance(by: .seconds(10))
        }
        #expect(http.paths("/api/v2/authorization/request/").count == 1)
    }

    /// A JWT over 8 KiB is refused: a transient failure that says why, nothing posted, the reading kept
    /// for the next attempt.
    @Test func anOversizedJWTIsRefusedAndNothingIsPosted() async throws {
        let huge = String(repeating: "a", count: 8193)
        let http = tokenServer(#"{"token":"\#(huge)","iat":0,"exp":28800}"#)
        let destination = try #require(v3Destination(http, clock: ManualClock()))
        let items = try await filledStore(1).claimPending(.nightscout, limit: 1)
        let outcome = await destination.send(items, networkTimeoutMs: 1000)
        #expect(outcome == .transient(TransientFailure(status: 200, reason: "token exchange answered a JWT longer than 8 KiB")))
        #expect(http.paths("/api/v3/").isEmpty)
        // 8 KiB exactly is taken.
        let fits = tokenServer(#"{"token":"\#(String(huge.dropLast()))","iat":0,"exp":28800}"#)
        let accepted = try #require(v3Destination(fits, clock: ManualClock()))
        #expect(await accepted.send(items, networkTimeoutMs: 1000)
                == .perElement(stored: [items[0].id], duplicates: 0, rejected: [:], retry: [], retryReason: ""))
    }
}
