/// A D-Bus message decoded into Swift values. No libdbus pointer ever leaves the connection's queue.
public struct DBusMessage: Sendable, Hashable {
    public enum Kind: Sendable, Hashable {
        case methodCall, methodReturn, error, signal
    }

    public var kind: Kind
    public var serial: UInt32
    public var replySerial: UInt32
    public var path: String?
    public var interface: String?
    public var member: String?
    public var errorName: String?
    /// The unique name of the sender (`:1.42`), or `org.freedesktop.DBus` for the bus itself.
    public var sender: String?
    public var destination: String?
    public var signature: String
    public var body: [DBusValue]

    public init(
        kind: Kind, serial: UInt32 = 0, replySerial: UInt32 = 0, path: String? = nil, interface: String? = nil,
        member: String? = nil, errorName: String? = nil, sender: String? = nil, destination: String? = nil,
        body: [DBusValue] = []
    ) {
        self.kind = kind
        self.serial = serial
        self.replySerial = replySerial
        self.path = path
        self.interface = interface
        self.member = member
        self.errorName = errorName
        self.sender = sender
        self.destination = destination
        self.signature = body.map(\.signature).joined()
        self.body = body
    }
}
