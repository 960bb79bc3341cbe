import Testing
import Transport

@testable import SyncEngine

/// `ConfigURL`, the config's rules for a server URL, on top of `HTTPURL`'s one reading: which problem a
/// URL is told first, what the config keeps of a good one, and when two URLs are one server.
@Suite("ConfigURL: the config's rules on HTTPURL's reading")
struct ConfigURLTests {
    static func problem(_ text: String) -> String? {
        guard case .failure(let problem) = ConfigURL.normalizedHTTPURL(text) else { return nil }
        return problem.message
    }

    /// Credentials in the URL are named before a host or port that does not read: the user learns first
    /// that the URL is the wrong place for them.
    @Test func credentialsAreToldBeforeABrokenAuthority() {
        let query = "URL must not carry a query or fragment (put credentials in token or api_secret)"
        let userInfo = "URL must not carry a user name or password (use the secret keys)"
        #expect(Self.problem("https://ns.example:99999/?token=abc") == query)
        #expect(Self.problem("https://[::1/#x") == query)
        #expect(Self.problem("https://me:pw@:8080/") == userInfo)
        #expect(Self.problem("https://me:pw@ns.example:0/?x") == query)
        #expect(Self.problem("https://me@[::1]x/") == userInfo)
        #expect(Self.problem("https://ns.example:99999/") == "invalid port in URL (expected digits only, 1-65535)")
        #expect(Self.problem("https://:99999/") == "invalid port in URL (expected digits only, 1-65535)")
        #expect(Self.problem("https://[::1]x/") == "malformed IPv6 host in URL")
        #expect(Self.problem("https:///r4") == "URL has no host")
        #expect(Self.problem("ftp://ns.example/?x") == "expected an http:// or https:// URL")
        #expect(Self.problem("https://ns.example/a b?x") == "URL contains spaces or control characters")
    }

    /// No message quotes the URL: its path, query or user info can carry a token.
    @Test func noProblemQuotesTheURL() {
        for text in ["https://tok3n@ns.example/", "https://ns.example/?tok3n", "https://ns.example:tok3n/", "https://tok3n..example/",
                     "https://[tok3n]/", "tok3n://ns.example/", "https://ns.example/tok3n\n", "https://tok3n.1/"] {
            let message = Self.problem(text)
            #expect(message != nil, "\(text)")
            #expect(message?.contains("tok3n") == false, "\(text)")
        }
    }

    /// What the config keeps: scheme, host and port in lower case, the path as written without its
    /// trailing slashes, the port's digits as written.
    @Test func normalized() {
        let cases = [("HTTPS://NS.Example/Base/", "https://ns.example/Base"), ("http://127.0.0.1:1337//", "http://127.0.0.1:1337"),
                     ("http://[::1]:8080/fhir/R4", "http://[::1]:8080/fhir/R4"), ("https://ns.example:0443", "https://ns.example:0443")]
        for (text, kept) in cases {
            guard case .success(let url) = ConfigURL.normalizedHTTPURL(text) else {
                Issue.record("\(text) refused")
                continue
            }
            #expect(url.text == kept)
            #expect(url.origin == HTTPURL(text)?.origin)
        }
    }
}
