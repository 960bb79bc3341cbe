/// A bus match rule: which messages a subscription receives.
///
/// The rule is installed on the bus with `AddMatch` and also applied locally, so that each subscription
/// sees only its own messages. Locally a `sender` that is a well-known name (not `:1.x`) is not compared:
/// messages carry the unique name of the sender, and only the bus knows who owns a well-known name.
public struct MatchRule: Sendable, Hashable, CustomStringConvertible {
    public var type: DBusMessage.Kind?
    public var sender: String?
    public var interface: String?
    public var member: String?
    public var path: String?
    public var pathNamespace: String?
    /// `argN` string matches, by argument index.
    public var arguments: [Int: String]

    public init(
        type: DBusMessage.Kind? = .signal,
        sender: String? = nil,
        interface: String? = nil,
        member: String? = nil,
        path: String? = nil,
        pathNamespace: String? = nil,
        arguments: [Int: String] = [:]
    ) {
        self.type = type
        self.sender = sender
        self.interface = interface
        self.member = member
        self.path = path
        self.pathNamespace = pathNamespace
        self.arguments = arguments
    }

    /// The rule in the bus's text form, e.g. `type='signal',interface='org.freedesktop.DBus.Properties'`.
    public var description: String {
        var parts: [String] = []
        func add(_ key: String, _ value: String?) {
            guard let value else { return }
            // Inside quotes nothing is special except the quote itself, written as '\''.
            parts.append(key + "='" + value.replacingQuotes() + "'")
        }
        if let type {
            let name = switch type {
            case .methodCall: "method_call"
            case .methodReturn: "method_return"
            case .error: "error"
            case .signal: "signal"
            }
            add("type", name)
        }
        add("sender", sender)
        add("interface", interface)
        add("member", member)
        add("path", path)
        add("path_namespace", pathNamespace)
        for (index, value) in arguments.sorted(by: { $0.key < $1.key }) {
            add("arg\(index)", value)
        }
        return parts.joined(separator: ",")
    }

    /// Whether `message` satisfies the rule, as far as it can be checked locally.
    public func matches(_ message: DBusMessage) -> Bool {
        guard matchesHeader(message) else { return false }
        for (index, value) in arguments {
            guard index >= 0, index < message.body.count, case .string(let s) = message.body[index], s == value
            else { return false }
        }
        return true
    }

    /// Whether the header fields satisfy the rule (the `argN` conditions are not checked).
    public func matchesHeader(_ message: DBusMessage) -> Bool {
        if let type, type != message.kind { return false }
        if let sender, sender.hasPrefix(":"), sender != message.sender { return false }
        if let interface, interface != message.interface { return false }
        if let member, member != message.member { return false }
        if let path, path != message.path { return false }
        if let pathNamespace {
            guard let p = message.path else { return false }
            if pathNamespace != "/" && p != pathNamespace && !Self.isBelow(p, pathNamespace) { return false }
        }
        return true
    }

    /// Whether `path` starts with `namespace` followed by `/` (without building `namespace + "/"`).
    static func isBelow(_ path: String, _ namespace: String) -> Bool {
        let p = path.utf8, n = namespace.utf8.count
        guard p.count > n, path.hasPrefix(namespace) else { return false }
        return p[p.index(p.startIndex, offsetBy: n)] == UInt8(ascii: "/")
    }
}

extension String {
    fileprivate func replacingQuotes() -> String {
        // Bytes, not characters: a quote is one byte in UTF-8, and most values have none.
        guard utf8.contains(UInt8(ascii: "'")) else { return self }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count + 8)
        for byte in utf8 {
            if byte == UInt8(ascii: "'") { out += "'\\''".utf8 } else { out.append(byte) }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
