/// An incoming method call on an exported object, as a handler sees it.
public struct DBusMethodCall: Sendable {
    /// The unique bus name of the caller (`:1.42`).
    public var sender: String
    public var path: String
    public var interface: String?
    public var member: String
    public var arguments: [DBusValue]
    public var signature: String

    public init(sender: String, path: String, interface: String?, member: String, arguments: [DBusValue]) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.arguments = arguments
        self.signature = arguments.map(\.signature).joined()
    }
}

/// Answers a method call. It may suspend as long as it needs (the reply is sent when it returns) and may
/// call other peers on the same connection meanwhile: the connection keeps dispatching while it waits.
/// Throwing a ``DBusError`` sends that error name and message; any other error is sent as
/// `org.freedesktop.DBus.Error.Failed`.
public typealias DBusMethodHandler = @Sendable (DBusMethodCall) async throws -> [DBusValue]

/// Accepts (returns) or refuses (throws) a `Properties.Set` from a peer. When it returns, the new value is
/// stored and `PropertiesChanged` is emitted.
public typealias DBusPropertySetter = @Sendable (_ name: String, _ value: DBusValue, _ call: DBusMethodCall) async throws -> Void

/// One method of an exported interface.
public struct DBusMethod: Sendable {
    public var name: String
    /// Argument and result signatures, used for introspection only.
    public var inSignature: String
    public var outSignature: String
    public var handler: DBusMethodHandler

    public init(_ name: String, in inSignature: String = "", out outSignature: String = "",
                handler: @escaping DBusMethodHandler) {
        self.name = name
        self.inSignature = inSignature
        self.outSignature = outSignature
        self.handler = handler
    }
}

/// An interface exported on an object: its methods and its properties. The connection keeps the property
/// values, answers `Get`/`GetAll`/`Set` from them, and lists them in `GetManagedObjects`, so that the
/// values peers read always agree with the `PropertiesChanged` signals they saw.
public struct DBusInterface: Sendable {
    public var name: String
    public var methods: [String: DBusMethod]
    public var properties: [String: DBusValue]
    /// Names of properties peers may `Set` (the setter decides whether to accept).
    public var writableProperties: Set<String>
    public var setter: DBusPropertySetter?
    /// Signal names and signatures, for introspection only.
    public var signals: [String: String]

    public init(
        _ name: String,
        methods: [DBusMethod] = [],
        properties: [String: DBusValue] = [:],
        writableProperties: Set<String> = [],
        signals: [String: String] = [:],
        setter: DBusPropertySetter? = nil
    ) {
        self.name = name
        self.methods = Dictionary(methods.map { ($0.name, $0) }, uniquingKeysWith: { _, last in last })
        self.properties = properties
        self.writableProperties = writableProperties
        self.signals = signals
        self.setter = setter
    }
}

/// Flags of `RequestName`.
public struct RequestNameFlags: OptionSet, Sendable {
    public var rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    /// Let a later requester with `replaceExisting` take the name.
    public static let allowReplacement = RequestNameFlags(rawValue: 1)
    /// Take the name from an owner that allowed replacement.
    public static let replaceExisting = RequestNameFlags(rawValue: 2)
    /// Fail instead of queueing when the name is taken.
    public static let doNotQueue = RequestNameFlags(rawValue: 4)
}

/// The answer to `RequestName`.
public enum RequestNameResult: UInt32, Sendable {
    case primaryOwner = 1
    case inQueue = 2
    case exists = 3
    case alreadyOwner = 4
}

/// Well-known names of the bus's own interfaces.
public enum DBusNames {
    public static let bus = "org.freedesktop.DBus"
    public static let busPath = "/org/freedesktop/DBus"
    public static let properties = "org.freedesktop.DBus.Properties"
    public static let objectManager = "org.freedesktop.DBus.ObjectManager"
    public static let introspectable = "org.freedesktop.DBus.Introspectable"
    public static let peer = "org.freedesktop.DBus.Peer"
}
