/// A D-Bus error: the error name as sent by the peer (or by libdbus for local failures) and its message.
public struct DBusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An error name. Open set: names no constant covers (every `org.bluez.Error.*`) survive unchanged.
    public struct Name: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(_ rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        public static let failed = Name("org.freedesktop.DBus.Error.Failed")
        public static let noMemory = Name("org.freedesktop.DBus.Error.NoMemory")
        /// libdbus reports a method call that timed out with this name.
        public static let noReply = Name("org.freedesktop.DBus.Error.NoReply")
        public static let timeout = Name("org.freedesktop.DBus.Error.Timeout")
        public static let timedOut = Name("org.freedesktop.DBus.Error.TimedOut")
        public static let serviceUnknown = Name("org.freedesktop.DBus.Error.ServiceUnknown")
        public static let nameHasNoOwner = Name("org.freedesktop.DBus.Error.NameHasNoOwner")
        public static let unknownObject = Name("org.freedesktop.DBus.Error.UnknownObject")
        public static let unknownInterface = Name("org.freedesktop.DBus.Error.UnknownInterface")
        public static let unknownMethod = Name("org.freedesktop.DBus.Error.UnknownMethod")
        public static let unknownProperty = Name("org.freedesktop.DBus.Error.UnknownProperty")
        public static let propertyReadOnly = Name("org.freedesktop.DBus.Error.PropertyReadOnly")
        public static let invalidArgs = Name("org.freedesktop.DBus.Error.InvalidArgs")
        public static let invalidSignature = Name("org.freedesktop.DBus.Error.InvalidSignature")
        public static let accessDenied = Name("org.freedesktop.DBus.Error.AccessDenied")
        public static let disconnected = Name("org.freedesktop.DBus.Error.Disconnected")
        public static let noServer = Name("org.freedesktop.DBus.Error.NoServer")
        public static let badAddress = Name("org.freedesktop.DBus.Error.BadAddress")
        /// Generated locally when the awaiting task was cancelled; never seen on the wire.
        public static let cancelled = Name("org.freedesktop.DBus.Local.Cancelled")
    }

    public var name: Name
    public var message: String

    public init(_ name: Name, _ message: String) {
        self.name = name
        self.message = message
    }

    public init(name: String, message: String) {
        self.name = Name(name)
        self.message = message
    }

    /// Whether the call ran out of time (libdbus's own timeout or a peer's `Timeout`/`TimedOut`).
    public var isTimeout: Bool { name == .noReply || name == .timeout || name == .timedOut }

    /// Whether the connection to the bus is gone.
    public var isDisconnected: Bool { name == .disconnected || name == .noServer }

    public var description: String { "\(name.rawValue): \(message)" }
}
