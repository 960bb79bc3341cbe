import DBusKit
import GatewayCore
import Support

/// A failure of a BlueZ operation. D-Bus errors keep their name (`org.bluez.Error.AuthenticationFailed`)
/// and message; `kind` says whether retrying makes sense.
public struct BlueZError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// Worth retrying: aborted or canceled connection, operation in progress, adapter not ready.
        case transient
        /// Retrying will not help: not permitted, authentication failed, no such object, bad arguments.
        case permanent
        /// The operation did not finish in time.
        case timeout
        /// The device, bluetoothd or the bus went away.
        case disconnected
        /// No such adapter or device is known to BlueZ.
        case notFound
        /// The device or adapter lacks the feature.
        case notSupported
        /// The meter no longer has the bond this adapter holds (see `BlueZClient.connectMeter`).
        case bondLost
    }

    public var kind: Kind
    /// The D-Bus error name, when the failure came from a peer.
    public var name: String?
    public var message: String
    /// The ATT error code the meter returned (`Operation failed with ATT error: 0x80`).
    public var attError: UInt8?
    /// For a failed pairing: what it means for the user (set by `BlueZClient.pair`).
    public var pairingFailure: PairingFailure?
    /// For a failed connection attempt: why it looks like the meter refused the encryption with the
    /// stored key (set by `BlueZClient.connectMeter`); nil when nothing points that way.
    public var authenticationFailure: String?
    /// For a failed connection: how many of its attempts the meter refused at encryption (see
    /// `MeterLinkError.keyRefusals`).
    public var keyRefusals = 0

    public init(_ kind: Kind, _ message: String, name: String? = nil, attError: UInt8? = nil,
                pairingFailure: PairingFailure? = nil) {
        self.kind = kind
        self.message = message
        self.name = name
        self.attError = attError
        self.pairingFailure = pairingFailure
    }

    public var description: String {
        if let name { return "\(name): \(message)" }
        return message
    }

    /// The same failure in the terms of the meter link.
    public var meterLinkError: MeterLinkError {
        let linkKind: MeterLinkError.Kind = switch kind {
        case .transient: .transient
        case .permanent, .notFound: .permanent
        case .timeout: .timeout
        case .disconnected: .disconnected
        case .notSupported: .notSupported
        case .bondLost: .bondLost
        }
        return MeterLinkError(linkKind, description, attError: attError, keyRefusals: keyRefusals)
    }
}

extension BlueZError {
    /// `Failed` messages that mean the attempt was cut short and may succeed if repeated (bluez
    /// `src/error.c` strings since 5.62, `strerror()` text before).
    static let transientFailureMessages: Set<String> = [
        "le-connection-abort-by-local",
        "le-connection-abort-by-remote",
        "le-connection-timeout",
        "br-connection-canceled",
        "br-connection-abort-by-local",
        "Software caused connection abort",
        "Connection reset by peer",
        "Connection timed out",
        "Operation already in progress",
        "In Progress",
    ]

    /// Classifies a D-Bus error from BlueZ, keeping its name and message.
    public init(_ error: DBusError) {
        let name = error.name.rawValue
        let message = error.message
        if let code = Self.attErrorCode(in: message) {
            self.init(.permanent, message, name: name, attError: code)
            return
        }
        if error.isDisconnected {
            self.init(.disconnected, message, name: name)
            return
        }
        if error.isTimeout {
            self.init(.timeout, message, name: name)
            return
        }
        let kind: Kind
        switch name {
        case BlueZErrorNames.inProgress, BlueZErrorNames.notReady:
            kind = .transient
        case BlueZErrorNames.failed, "org.bluez.Error":
            kind = Self.transientFailureMessages.contains(message) ? .transient : .permanent
        case BlueZErrorNames.notConnected:
            kind = .disconnected
        case BlueZErrorNames.notSupported:
            kind = .notSupported
        case BlueZErrorNames.doesNotExist, DBusError.Name.unknownObject.rawValue, DBusError.Name.serviceUnknown.rawValue:
            kind = .notFound
        case DBusError.Name.cancelled.rawValue:
            kind = .permanent
        default:
            // NotPermitted, NotAuthorized, Authentication*, AlreadyExists, InvalidArguments, AccessDenied, ...
            kind = .permanent
        }
        self.init(kind, message, name: name)
    }

    /// The ATT error code in a BlueZ GATT error message, e.g. `Operation failed with ATT error: 0x81`
    /// (bluez `src/gatt-client.c` create_gatt_dbus_error; the name is `org.bluez.Error.Failed` in older
    /// releases and `org.bluez.Error` in newer ones, so only the message is read).
    static func attErrorCode(in message: String) -> UInt8? {
        guard let end = message.utf8EndOfFirst("ATT error: 0x") else { return nil }
        let hex = message[end...].prefix { $0.isHexDigit }
        guard !hex.isEmpty, hex.count <= 2 else { return nil }
        return UInt8(hex, radix: 16)
    }
}
