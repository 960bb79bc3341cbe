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
/// ASCII digits in 1...65535 (`init(reading:)` says which). Whether a host name is well formed (labels, IPv4
/// look-alikes) and which parts a URL may carry are the config's judgement (`ConfigURL`), with its own
/// messages; a request to a malformed name fails when it is resolved.
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
    /// The host and port as written, without any user info.
    public let authority: String
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

    /// Why a text is not an `HTTPURL`: the first thing wrong in the order the URL is read (scheme,
    /// characters, then the authority). For an authority that does not read, whether user info, a query
    /// or a fragment came with it: a caller that refuses those (they can carry credentials) says so first.
    public struct Problem: Error, Sendable, Equatable {
        public enum Kind: Error, Sendable, Equatable {
            /// Not `http://` or `https://`.
            case notHTTP
            case spacesOrControlCharacters
            /// `[` without its `]`, or something other than `:port` after the `]`.
            case malformedIPv6
            /// A port that is not 1 to 5 ASCII digits in 1...65535.
            case invalidPort
            case noHost
        }

        public let kind: Kind
        public var hasUserInfo = false
        public var hasQueryOrFragment = false
    }

    /// Nil for anything that is not an `http`/`https` URL with a host (see the type's description).
    public init?(_ text: String) {
        guard let url = try? HTTPURL(reading: text) else { return nil }
        self = url
    }

    /// The URL's parts, or the first thing wrong with it (see `Problem`).
    public init(reading text: String) throws(Problem) {
        let lower = text.prefix(8).lowercased()
        let scheme: Scheme
        if lower.hasPrefix("https://") { scheme = .https } else if lower.hasPrefix("http://") { scheme = .http } else {
            throw Problem(kind: .notHTTP)
        }
        guard !text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) else {
            throw Problem(kind: .spacesOrControlCharacters)
        }
        let rest = text.dropFirst(scheme == .https ? 8 : 7)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var afterAuthority = rest.dropFirst(authority.count)
        let at = authority.lastIndex(of: "@")
        let hostAndPort = at.map { authority[authority.index(after: $0)...] } ?? authority
        let host: Substring, port: UInt16?
        switch Self.split(hostAndPort) {
        case .success(let parts): (host, port) = parts
        case .failure(let kind):
            throw Problem(kind: kind, hasUserInfo: at != nil, hasQueryOrFragment: afterAuthority.contains { $0 == "?" || $0 == "#" })
        }
        var fragment: String?
        if let hash = afterAuthority.firstIndex(of: "#") {
            fragment = String(afterAuthority[afterAuthority.index(after: hash)...])
            afterAuthority = afterAuthority[..<hash]
        }
        let question = afterAuthority.firstIndex(of: "?")
        self.text = text
        self.scheme = scheme
        self.host = String(host)
        self.authority = String(hostAndPort)
        writtenPort = port
        path = String(question.map { afterAuthority[..<$0] } ?? afterAuthority)
        query = question.map { String(afterAuthority[afterAuthority.index(after: $0)...]) }
        hasUserInfo = at != nil
        self.fragment = fragment
        pathStart = afterAuthority.startIndex
    }

    /// Host and port of an authority without user info (`host`, `host:port`, `[v6]`, `[v6]:port`), or what
    /// is wrong with it: a malformed `[...]`, a port that is not 1 to 5 ASCII digits in 1...65535 (no sign,
    /// no spaces), no host. The MQTT broker's address is read with it too.
    public static func split(_ authority: Substring) -> Result<(host: Substring, port: UInt16?), Problem.Kind> {
        var host = authority
        var portText: Substring?
        if host.hasPrefix("[") {
            guard let close = host.firstIndex(of: "]") else { return .failure(.malformedIPv6) }
            let after = host[host.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return .failure(.malformedIPv6) }
                portText = after.dropFirst()
            }
            host = host[...close]
        } else if let colon = host.firstIndex(of: ":") {
            portText = host[host.index(after: colon)...]
            host = host[..<colon]
        }
        var port: UInt16?
        if let portText {
            guard (1...5).contains(portText.utf8.count), portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let value = Int(portText), (1...65_535).contains(value) else { return .failure(.invalidPort) }
            port = UInt16(value)
        }
        guard !host.isEmpty, host != "[]" else { return .failure(.noHost) }
        return .success((host, port))
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
