import Testing
@testable import Transport

/// `HTTPURL`, the one reading of a URL: what the settings' check, the config's "same server" check,
/// the destinations' request URLs and the plain-HTTP client each take from it.
@Suite("HTTPURL: one reading of a URL")
struct HTTPURLTests {
    struct Reading: CustomStringConvertible, Sendable {
        var name: String
        var text: String
        /// Nil when the text is not a URL the gateway sends to.
        var origin: String?
        var description: String { name }
    }

    static let readings: [Reading] = [
        Reading(name: "https with a path", text: "https://ns.example/base", origin: "https://ns.example"),
        Reading(name: "scheme and host in capitals", text: "HTTPS://NS.Example/Base", origin: "https://ns.example"),
        Reading(name: "the scheme's own port written", text: "https://NS.example:443/ping", origin: "https://ns.example"),
        Reading(name: "http's own port written", text: "http://NS.EXAMPLE:80/x", origin: "http://ns.example"),
        Reading(name: "another port", text: "http://127.0.0.1:8080/api", origin: "http://127.0.0.1:8080"),
        Reading(name: "IPv4 in its short form", text: "http://127.1:8080/", origin: "http://127.0.0.1:8080"),
        Reading(name: "IPv4 in hexadecimal", text: "http://0x7f.0.0.1/", origin: "http://127.0.0.1"),
        Reading(name: "IPv6 in its long form", text: "http://[0:0:0:0:0:0:0:1]:8080/", origin: "http://[::1]:8080"),
        Reading(name: "IPv6 without a port", text: "https://[::1]/", origin: "https://[::1]"),
        Reading(name: "host with a trailing dot", text: "https://ns.example./", origin: "https://ns.example"),
        Reading(name: "user info, query and fragment left out of the origin", text: "http://user:pw@ns.local:8080/x?token=y#z",
                origin: "http://ns.local:8080"),
        Reading(name: "query right after the host", text: "http://ns.local?token=x", origin: "http://ns.local"),
        Reading(name: "not http", text: "ftp://ns.local/", origin: nil),
        Reading(name: "no scheme", text: "ns.example/api", origin: nil),
        Reading(name: "no host", text: "http:///path", origin: nil),
        Reading(name: "nothing after the scheme", text: "https://", origin: nil),
        Reading(name: "only a port", text: "http://:8080/", origin: nil),
        Reading(name: "empty IPv6 brackets", text: "http://[]/", origin: nil),
        Reading(name: "unclosed IPv6 bracket", text: "http://[::1/", origin: nil),
        Reading(name: "port zero", text: "http://ns.local:0/", origin: nil),
        Reading(name: "port too large", text: "http://ns.local:99999/", origin: nil),
        Reading(name: "port with a sign", text: "http://127.0.0.1:+8080", origin: nil),
        Reading(name: "port of six digits", text: "http://fhir.example:008080/r4", origin: nil),
        Reading(name: "empty port", text: "http://ns.local:/", origin: nil),
        Reading(name: "a space", text: "http://ns.local/a b", origin: nil),
        Reading(name: "a line break", text: "https://ns.example/\nx", origin: nil),
        Reading(name: "a tab", text: "https://ns.example/\tx", origin: nil),
    ]

    @Test(arguments: readings)
    func originOrRefusal(_ r: Reading) {
        #expect(HTTPURL(r.text)?.origin == r.origin)
    }

    /// The config refuses a health-check URL on an upload server: the same origin, however written.
    @Test func sameServerHoweverWritten() {
        let pairs = [("https://ns.example", "https://NS.example:443/ping"), ("http://127.0.0.1:8080", "http://127.1:8080/"),
                     ("http://[::1]:8080/fhir", "http://[0:0:0:0:0:0:0:1]:8080/"), ("http://ns.example", "http://NS.EXAMPLE:80/x")]
        for (a, b) in pairs {
            #expect(HTTPURL(a)?.origin == HTTPURL(b)?.origin, "\(a) \(b)")
        }
        let others = [("http://ns.example", "https://ns.example"), ("http://ns.example", "http://ns.example:8080"),
                      ("https://fhir.example/r4", "https://probe.example/")]
        for (a, b) in others {
            #expect(HTTPURL(a)?.origin != HTTPURL(b)?.origin, "\(a) \(b)")
        }
    }

    @Test func parts() throws {
        let url = try #require(HTTPURL("http://user@127.0.0.1:1337/api/v1/entries?x=1#f"))
        #expect(url.scheme == .http && url.host == "127.0.0.1" && url.port == 1337 && url.writtenPort == 1337)
        #expect(url.path == "/api/v1/entries" && url.query == "x=1" && url.hasUserInfo && url.hasFragment)
        #expect(HTTPURL("https://ns.example")?.port == 443)
        #expect(HTTPURL("https://ns.example")?.writtenPort == nil)
    }

    /// What the destinations send to: exactly one slash between the base and the endpoint's path.
    @Test func endpoints() {
        let cases = [("https://ns.example/base/", "/api/v1/entries", "https://ns.example/base/api/v1/entries"),
                     ("https://ns.example/base", "/api/v1/entries", "https://ns.example/base/api/v1/entries"),
                     ("https://ns.example", "api/v1/entries", "https://ns.example/api/v1/entries"),
                     ("https://ns.example//", "/metadata", "https://ns.example/metadata"),
                     ("https://fhir.example/r4/", "", "https://fhir.example/r4"),
                     ("https://fhir.example/r4", "", "https://fhir.example/r4"),
                     ("http://h/x?y=1", "/z", "http://h/x/z?y=1")]
        for (base, path, joined) in cases {
            let url = HTTPURL(base)?.appending(path: path)
            #expect(url?.text == joined, "\(base) + \(path)")
            // The parts follow the text: the same as reading the joined text afresh.
            #expect(url?.path == HTTPURL(joined)?.path && url?.query == HTTPURL(joined)?.query, "\(base) + \(path)")
            #expect(url?.plainHTTPTarget == HTTPURL(joined)?.plainHTTPTarget, "\(base) + \(path)")
        }
    }

    /// What the plain-HTTP client takes; everything else is left to libcurl.
    @Test func plainHTTPTargets() {
        let t = HTTPURL("http://127.0.0.1:1337/api/v1/entries")?.plainHTTPTarget
        #expect(t == PlainHTTPTarget(host: "127.0.0.1", port: 1337, target: "/api/v1/entries", authority: "127.0.0.1:1337"))
        #expect(HTTPURL("HTTP://ns.local")?.plainHTTPTarget?.target == "/")
        #expect(HTTPURL("http://ns.local")?.plainHTTPTarget?.port == 80)
        #expect(HTTPURL("http://ns.local")?.plainHTTPTarget?.authority == "ns.local")
        #expect(HTTPURL("http://ns.local?token=x")?.plainHTTPTarget?.target == "/?token=x")
        for url in ["https://ns.example/api", "http://user:pw@ns.local/", "http://[::1]:80/", "http://ns.local/a#b",
                    "http://under_score.local/", "http://ns.local/b\u{FC}cher"] {
            #expect(HTTPURL(url) != nil && HTTPURL(url)?.plainHTTPTarget == nil, "\(url)")
        }
    }

    /// A request keeps the text it was given (libcurl's input) and its reading.
    @Test func requestsCarryTheirReading() {
        let request = HTTPRequest(method: "GET", url: "http://127.0.0.1:8080/x", connectTimeoutMs: 100, timeoutMs: 100)
        #expect(request.url == "http://127.0.0.1:8080/x")
        #expect(request.location?.plainHTTPTarget?.port == 8080)
        let unread = HTTPRequest(method: "GET", url: "ftp://ns.local/", connectTimeoutMs: 100, timeoutMs: 100)
        #expect(unread.url == "ftp://ns.local/" && unread.location == nil)
        let typed = HTTPRequest(method: "GET", url: HTTPURL("https://ns.example/base")?.appending(path: "/api"), connectTimeoutMs: 100, timeoutMs: 100)
        #expect(typed.url == "https://ns.example/base/api")
    }
}
