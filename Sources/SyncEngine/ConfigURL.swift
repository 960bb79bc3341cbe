import Transport

/// The rules a server URL in the config must meet, on what `HTTPURL` read of it (`HTTPURL.origin` is the
/// one name that tells servers apart). Problems name what is wrong, never the URL: its path or query may
/// carry a token.
public enum ConfigURL {
    public struct URLProblem: Error, Sendable {
        public var message: String

        public init(message: String) { self.message = message }

        /// What `HTTPURL` found wrong, in the config's words.
        init(_ kind: HTTPURL.Problem.Kind) {
            switch kind {
            case .notHTTP: message = "expected an http:// or https:// URL"
            case .spacesOrControlCharacters: message = "URL contains spaces or control characters"
            case .malformedIPv6: message = "malformed IPv6 host in URL"
            case .invalidPort: message = "invalid port in URL (expected digits only, 1-65535)"
            case .noHost: message = "URL has no host"
            }
        }
    }

    /// An `http` or `https` URL with a host, no credentials, query or fragment; the scheme and the
    /// authority in lower case, the path's trailing slashes dropped. `HTTPURL` reads it; this says which
    /// of what it found the config refuses, credentials first. `queryOrFragment` is the problem a query or
    /// fragment is (the heartbeat's monitor says more).
    public static func normalizedHTTPURL(_ text: String, queryOrFragment: URLProblem = queryOrFragment) -> Result<HTTPURL, URLProblem> {
        let url: HTTPURL
        do {
            url = try HTTPURL(reading: text)
        } catch {
            if error.hasQueryOrFragment { return .failure(queryOrFragment) }
            if error.hasUserInfo { return .failure(userInfo) }
            return .failure(URLProblem(error.kind))
        }
        if url.query != nil || url.hasFragment { return .failure(queryOrFragment) }
        if url.hasUserInfo { return .failure(userInfo) }
        if let problem = hostProblem(Substring(url.host)) { return .failure(problem) }
        let normalized = url.scheme.rawValue + "://" + url.authority.lowercased() + url.appending(path: "").path
        // Lower case and fewer trailing slashes read the same: the refusal is never given.
        return HTTPURL(normalized).map { .success($0) } ?? .failure(URLProblem(.noHost))
    }

    public static let queryOrFragment = URLProblem(message: "URL must not carry a query or fragment (put credentials in token or api_secret)")
    static let userInfo = URLProblem(message: "URL must not carry a user name or password (use the secret keys)")

    /// Host and port of an authority whose host can be reached as written (see `hostProblem`).
    static func reachableHost(_ authority: Substring) -> Result<(host: Substring, port: UInt16?), URLProblem> {
        switch HTTPURL.split(authority) {
        case .success(let parts): return hostProblem(parts.host).map { .failure($0) } ?? .success(parts)
        case .failure(let kind): return .failure(URLProblem(kind))
        }
    }

    /// Why a host can never be reached as written, or nil. Names are ASCII (an internationalised name in
    /// its `xn--` form), without a trailing dot, in labels of letters, digits, `-` and `_`; a name that
    /// ends in a number must be an IPv4 address; `[...]` must hold an IPv6 address.
    public static func hostProblem(_ host: Substring) -> URLProblem? {
        if host.hasPrefix("[") {
            let inner = String(host.dropFirst().dropLast())
            return HTTPURL.compressedIPv6(inner) == nil ? URLProblem(message: "malformed IPv6 host in URL") : nil
        }
        guard host.unicodeScalars.allSatisfy(\.isASCII) else {
            return URLProblem(message: "host name must be ASCII (write an internationalised name in its xn-- form)")
        }
        if host.hasSuffix(".") { return URLProblem(message: "host name must not end with a dot") }
        if HTTPURL.dottedIPv4(String(host)) != nil { return nil }
        let labels = host.split(separator: ".", omittingEmptySubsequences: false)
        if host.utf8.count > 253 || labels.contains(where: { $0.isEmpty || $0.utf8.count > 63 }) {
            return URLProblem(message: "malformed host name in URL (empty or over-long label)")
        }
        for label in labels {
            let ok = label.utf8.allSatisfy { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x7A) || $0 == 0x2D || $0 == 0x5F }
            if !ok || label.hasPrefix("-") || label.hasSuffix("-") {
                return URLProblem(message: "malformed host name in URL (letters, digits, '-' and '_' between dots)")
            }
        }
        if let last = labels.last, last.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            return URLProblem(message: "host looks like an IPv4 address but is not one")
        }
        return nil
    }

    /// `mqtt://host[:port]` or `mqtts://host[:port]`, nothing after the authority but an optional `/`.
    public static func brokerURL(_ text: String) -> Result<(tls: Bool, host: String, port: Int), URLProblem> {
        let lower = text.lowercased()
        let tls: Bool
        let rest: Substring
        if lower.hasPrefix("mqtts://") {
            tls = true
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("mqtt://") {
            tls = false
            rest = text.dropFirst(7)
        } else {
            return .failure(URLProblem(message: "expected an mqtt:// or mqtts:// URL such as \"mqtt://broker.local:1883\""))
        }
        if text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return .failure(URLProblem(message: "URL contains spaces or control characters"))
        }
        let authority = rest.prefix { $0 != "/" }
        let after = rest.dropFirst(authority.count)
        if authority.contains("@") {
            return .failure(URLProblem(message: "URL must not carry a user name or password (use username and password_file)"))
        }
        if !(after.isEmpty || after == "/") {
            return .failure(URLProblem(message: "URL must not carry a path, query or fragment (topics go in topic_prefix)"))
        }
        let parts: (host: Substring, port: UInt16?)
        switch reachableHost(Substring(authority)) {
        case .success(let p): parts = p
        case .failure(let problem): return .failure(problem)
        }
        var host = String(parts.host).lowercased()
        if host.hasPrefix("[") { host = String(host.dropFirst().dropLast()) }
        return .success((tls, host, parts.port.map(Int.init) ?? (tls ? 8883 : 1883)))
    }
}
