#if canImport(Glibc)
import Glibc
#endif

/// An `http://` or `https://` URL, read once into its parts: the config's upload and probe URLs, the
/// destinations' request URLs, the heartbeat's. Every part of the gateway that needs a URL's host,
/// port, request target or origin takes it from here, so they all read a URL the same way.
///
/// What it takes: the scheme in any case, then an authority (`host`, `host:port`, `[v6]`, `[v6]:port`,
/// optionally after `user:password@`), then a path, a query and a fragment, each optional. It refuses
/// spaces and control characters anywhere, an authority without a host, and a port that is not 1 to 5
/// ASCII digits in 1...65535. Whether a host name is well formed (labels, IPv4 look-alikes) is the
/// config's judgement, with its own messages; a request to a malformed name fails when it is resolved.
public struct HTTPURL: Sendable, Hashable {
    public enum Scheme: String, Sendable {
        case http
        case https

        public var defaultPort: UInt16 { self == .http ? 80 : 443 }
    }

    /// The URL as written. It can carry a token (in the path or the query): never log it, log `origin`.
    public private(set) var text: String
    public let scheme: Scheme
    /// The host as written (an IPv6 address in its brackets).
    public let host: String
    /// The port as written, nil when none is.
    public let writtenPort: UInt16?
    /// The path as written, "" when none is.
    public private(set) var path: String
    /// The query without its `?`, nil when there is none.
    public let query: String?
    public let hasUserInfo: Bool
    /// The fragment without its `#`, nil when there is none.
    let fragment: String?
    /// Where `path` starts in `text`.
    private var pathStart: String.Index

    public var hasFragment: Bool { fragment != nil }

    public static func == (a: HTTPURL, b: HTTPURL) -> Bool { a.text == b.text }
    public func hash(into hasher: inout Hasher) { hasher.combine(text) }

    /// The port connected to: the written one or the scheme's.
    public var port: UInt16 { writtenPort ?? scheme.defaultPort }

    /// Nil for anything that is not an `http`/`https` URL with a host (see the type's description).
    public init?(_ text: String) {
        let lower = text.prefix(8).lowercased()
        let scheme: Scheme
        if lower.hasPrefix("https://") { scheme = .https } else if lower.hasPrefix("http://") { scheme = .http } else { return nil }
        guard !text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else { return nil }
        let rest = text.dropFirst(scheme == .https ? 8 : 7)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var afterAuthority = rest.dropFirst(authority.count)
        let at = authority.lastIndex(of: "@")
        let hostAndPort = at.map { authority[authority.index(after: $0)...] } ?? authority
        guard let (host, port) = Self.split(hostAndPort) else { return nil }
        var fragment: String?
        if let hash = afterAuthority.firstIndex(of: "#") {
            fragment = String(afterAuthority[afterAuthority.index(after: hash)...])
            afterAuthority = afterAuthority[..<hash]
        }
        let question = afterAuthority.firstIndex(of: "?")
        self.text = text
        self.scheme = scheme
        self.host = String(host)
        writtenPort = port
        path = String(question.map { afterAuthority[..<$0] } ?? afterAuthority)
        query = question.map { String(afterAuthority[afterAuthority.index(after: $0)...]) }
        hasUserInfo = at != nil
        self.fragment = fragment
        pathStart = afterAuthority.startIndex
    }

    /// Host and port of an authority without user info; nil without a host or with a port that is not
    /// 1 to 5 ASCII digits in 1...65535 (no sign, no spaces).
    static func split(_ authority: Substring) -> (host: Substring, port: UInt16?)? {
        var host = authority
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return nil }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                portText = after.dropFirst()
            }
            host = host[...close]
        } else if let colon = host.firstIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        guard !host.isEmpty, host != "[]" else { return nil }
        guard let portText else { return (host, nil) }
        guard (1...5).contains(portText.utf8.count), portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
              let value = Int(portText), (1...65_535).contains(value) else { return nil }
        return (host, UInt16(value))
    }

    /// The origin (RFC 6454), the one name of a server in logs, in status and when the config tells
    /// servers apart: the scheme, the host in lower case without a trailing dot, an IPv4 address in its
    /// dotted form (`127.1` is `127.0.0.1`), an IPv6 address compressed, and the port unless it is the
    /// scheme's own. Never the user info, path or query, which can carry credentials.
    public var origin: String {
        var name = host.lowercased()
        if name.hasPrefix("[") {
            let inner = String(name.dropFirst().dropLast())
            name = "[" + (Self.compressedIPv6(inner) ?? inner) + "]"
        } else {
            while name.hasSuffix(".") { name.removeLast() }
            if let dotted = Self.dottedIPv4(name) { name = dotted }
        }
        return scheme.rawValue + "://" + name + (port == scheme.defaultPort ? "" : ":" + String(port))
    }

    /// This URL with `suffix`, a path of the gateway's own (no query), after its path, exactly one slash
    /// between them: `https://ns.example/base/` and `/api/v1/entries` give
    /// `https://ns.example/base/api/v1/entries`; an empty suffix only drops the trailing slashes. Query
    /// and fragment stay after the path.
    public func appending(path suffix: String) -> HTTPURL {
        var base = Substring(path)
        while base.hasSuffix("/") { base = base.dropLast() }
        let joined = String(base) + (suffix.isEmpty || suffix.hasPrefix("/") ? suffix : "/" + suffix)
        var copy = self
        copy.path = joined
        copy.text = String(text[..<pathStart]) + joined + (query.map { "?" + $0 } ?? "") + (fragment.map { "#" + $0 } ?? "")
        copy.pathStart = copy.text.index(copy.text.startIndex, offsetBy: text.distance(from: text.startIndex, to: pathStart))
        return copy
    }

    /// Where a plain-HTTP request goes (`SocketHTTPClient`): nil unless the scheme is `http`, the URL has
    /// no user info or fragment, the host is a name or an IPv4 address (letters, digits, `-`, `.`), and
    /// path and query are visible ASCII. Everything else is left to libcurl.
    var plainHTTPTarget: PlainHTTPTarget? {
        guard scheme == .http, !hasUserInfo, !hasFragment else { return nil }
        guard host.utf8.allSatisfy({ b in
            (b | 0x20 >= UInt8(ascii: "a") && b | 0x20 <= UInt8(ascii: "z")) || (b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9"))
                || b == UInt8(ascii: "-") || b == UInt8(ascii: ".")
        }) else { return nil }
        let target = (path.isEmpty ? "/" : path) + (query.map { "?" + $0 } ?? "")
        guard target.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return nil }
        return PlainHTTPTarget(host: host, port: port, target: target,
                               authority: host + (writtenPort.map { ":" + String($0) } ?? ""))
    }

    /// An IPv4 address in any form the resolver accepts (`127.1`, `0x7f.0.0.1`), in its dotted form.
    public static func dottedIPv4(_ text: String) -> String? {
        var address = in_addr()
        guard !text.isEmpty, inet_aton(text, &address) != 0 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }

    /// An IPv6 address in its compressed lower-case form.
    public static func compressedIPv6(_ text: String) -> String? {
        var address = in6_addr()
        guard inet_pton(AF_INET6, text, &address) == 1 else { return nil }
        var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        guard inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count)) != nil else { return nil }
        return String(cString: buffer)
    }
}
