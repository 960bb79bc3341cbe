#if canImport(Glibc)
import Glibc
#endif

/// The rules a server URL in the config must meet, and the canonical origin that tells servers apart.
/// Problems name what is wrong, never the URL: its path or query may carry a token.
public enum ConfigURL {
    public struct URLProblem: Error, Sendable {
        public var message: String
    }

    /// An `http` or `https` URL with a host, no credentials, query or fragment; the trailing slash dropped.
    public static func normalizedHTTPURL(_ text: String) -> Result<String, URLProblem> {
        let lower = text.lowercased()
        let rest: Substring
        let scheme: String
        if lower.hasPrefix("https://") {
            scheme = "https"
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            scheme = "http"
            rest = text.dropFirst(7)
        } else {
            return .failure(URLProblem(message: "expected an http:// or https:// URL"))
        }
        if text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return .failure(URLProblem(message: "URL contains spaces or control characters"))
        }
        if rest.contains("?") || rest.contains("#") {
            return .failure(URLProblem(message: "URL must not carry a query or fragment (put credentials in token or api_secret)"))
        }
        let authority = rest.prefix { $0 != "/" }
        if authority.contains("@") {
            return .failure(URLProblem(message: "URL must not carry a user name or password (use the secret keys)"))
        }
        if case .failure(let problem) = reachableHost(Substring(authority)) { return .failure(problem) }
        var path = rest.dropFirst(authority.count)
        while path.hasSuffix("/") { path = path.dropLast() }
        return .success(scheme + "://" + authority.lowercased() + path)
    }

    /// Host and port of an authority whose host can be reached as written (see `hostProblem`).
    static func reachableHost(_ authority: Substring) -> Result<(host: Substring, port: Int?), URLProblem> {
        let parts: (host: Substring, port: Int?)
        switch splitAuthority(authority) {
        case .success(let p): parts = p
        case .failure(let problem): return .failure(problem)
        }
        if let problem = hostProblem(parts.host) { return .failure(problem) }
        return .success(parts)
    }

    /// Host and port of an authority (`host`, `host:port`, `[v6]`, `[v6]:port`). A port is 1 to 5 ASCII
    /// digits in 1...65535: no sign, no spaces.
    public static func splitAuthority(_ authority: Substring) -> Result<(host: Substring, port: Int?), URLProblem> {
        var host = authority
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return .failure(URLProblem(message: "malformed IPv6 host in URL")) }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(URLProblem(message: "malformed IPv6 host in URL")) }
                portText = after.dropFirst()
            }
            host = host[...close]
        } else if let colon = host.firstIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        var port: Int?
        if let text = portText {
            guard (1...5).contains(text.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(text),
                  (1...65_535).contains(value) else {
                return .failure(URLProblem(message: "invalid port in URL (expected digits only, 1-65535)"))
            }
            port = value
        }
        if host.isEmpty || host == "[]" { return .failure(URLProblem(message: "URL has no host")) }
        return .success((host, port))
    }

    /// Why a host can never be reached as written, or nil. Names are ASCII (an internationalised name in
    /// its `xn--` form), without a trailing dot, in labels of letters, digits, `-` and `_`; a name that
    /// ends in a number must be an IPv4 address; `[...]` must hold an IPv6 address.
    public static func hostProblem(_ host: Substring) -> URLProblem? {
        if host.hasPrefix("[") {
            let inner = String(host.dropFirst().dropLast())
            return ipv6(inner) == nil ? URLProblem(message: "malformed IPv6 host in URL") : nil
        }
        guard host.unicodeScalars.allSatisfy(\.isASCII) else {
            return URLProblem(message: "host name must be ASCII (write an internationalised name in its xn-- form)")
        }
        if host.hasSuffix(".") { return URLProblem(message: "host name must not end with a dot") }
        if ipv4(String(host)) != nil { return nil }
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

    /// An IPv4 address in any form the resolver accepts (`127.1`, `0x7f.0.0.1`), in its dotted form.
    public static func ipv4(_ text: String) -> String? {
        var address = in_addr()
        guard !text.isEmpty, inet_aton(text, &address) != 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// An IPv6 address in its compressed lower-case form.
    public static func ipv6(_ text: String) -> String? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// The canonical origin of a normalized URL, for telling servers apart: scheme, lower-case host
    /// without a trailing dot, IPv4 dotted, IPv6 compressed, and the port (80 or 443 when not written).
    /// The same host on another port is another server.
    public static func origin(_ url: String) -> String {
        let https = url.hasPrefix("https://")
        let rest = url.dropFirst(https ? 8 : 7)
        let authority = rest.prefix { $0 != "/" }
        guard case .success(let parts) = splitAuthority(authority) else { return url }
        var host = parts.host.lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        if host.hasPrefix("[") {
            host = "[" + (ipv6(String(host.dropFirst().dropLast())) ?? String(host.dropFirst().dropLast())) + "]"
        } else if let dotted = ipv4(host) {
            host = dotted
        }
        return (https ? "https" : "http") + "://" + host + ":" + String(parts.port ?? (https ? 443 : 80))
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
        let parts: (host: Substring, port: Int?)
        switch reachableHost(Substring(authority)) {
        case .success(let p): parts = p
        case .failure(let problem): return .failure(problem)
        }
        var host = String(parts.host).lowercased()
        if host.hasPrefix("[") { host = String(host.dropFirst().dropLast()) }
        return .success((tls, host, parts.port ?? (tls ? 8883 : 1883)))
    }
}
