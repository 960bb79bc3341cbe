import GatewayCore
import Support

/// One session with a meter as a file a user can attach to a bug report (docs/captures.md): every GATT
/// operation of the session and every value the meter sent, in order, with its time since the session
/// began; the meter's model and firmware, the gateway's version and BlueZ's. Nothing in it identifies the
/// person or the meter: the address is `placeholderAddress`, the serial number, the System ID and the
/// advertised name are never kept, and keys never pass through GATT. `glucose-gateway capture` writes
/// it; the simulator replays it (`--meter CAPTURE`), so a capture becomes a test of its meter.
public struct Capture: Sendable, Equatable {
    /// The value of the "format" member, which tells a capture from a meter file.
    public static let formatName = "glucose-gateway-capture"
    public static let formatVersion = 1
    /// The address every capture gives its meter: from the range IEEE and RFC 7042 set aside for
    /// documentation (00-00-5E-00-53-xx), so it names no device anywhere.
    public static let placeholderAddress = "00:00:5E:00:53:01"
    /// Device Information values never written to a capture: they identify the meter (the System ID is
    /// often derived from its address).
    public static let identifyingCharacteristics: Set<GATTUUID> = [.serialNumber, .systemID]

    /// Where the session took place.
    public enum Origin: Sendable, Equatable {
        /// A meter, through BlueZ.
        case meter
        /// The project's simulator playing a built-in profile (or a meter file when nil).
        case simulator(profile: String?)
    }

    public var origin: Origin
    /// The gateway that recorded it.
    public var gatewayVersion: String
    /// bluetoothd's version, nil when it could not be told.
    public var bluezVersion: String?
    /// What was taken out: "address", "serial", "system-id", "name", and "values" with `--redact-values`.
    public var redacted: [String]
    /// The operations and values, in the order they happened.
    public var events: [CaptureEvent]

    public init(origin: Origin, gatewayVersion: String, bluezVersion: String?, redacted: [String], events: [CaptureEvent]) {
        self.origin = origin
        self.gatewayVersion = gatewayVersion
        self.bluezVersion = bluezVersion
        self.redacted = redacted
        self.events = events
    }

    /// The text of a successful read of `uuid`, with trailing NUL bytes dropped (some meters pad their
    /// strings); nil when it was not read or the read failed.
    public func readText(_ uuid: GATTUUID) -> String? {
        guard let value = readValue(uuid) else { return nil }
        var bytes = value[...]
        while bytes.last == 0 { bytes = bytes.dropLast() }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension Capture {
    /// The bytes of the first successful read of `uuid`; nil when it was not read, failed or was withheld.
    public func readValue(_ uuid: GATTUUID) -> [UInt8]? {
        events.first(where: { $0.kind == .read && $0.uuid == uuid && $0.error == nil })?.value
    }
}

/// One step of a captured session.
public struct CaptureEvent: Sendable, Equatable {
    public enum Kind: String, Sendable, Equatable, CaseIterable {
        /// The gateway read a characteristic: `value`, or `error`.
        case read
        /// The gateway wrote `value` (with response): `error` when the meter refused.
        case write
        /// The gateway enabled notifications or indications: `error` when that failed.
        case subscribe
        /// The meter sent `value` (a notification or an indication).
        case value
        /// The link ended (`error` holds the reason when the meter or the stack ended it).
        case disconnected
    }

    /// Milliseconds since the session began.
    public var milliseconds: Int64
    public var kind: Kind
    /// The characteristic; nil only for `disconnected`.
    public var uuid: GATTUUID?
    /// The bytes read, written or sent; nil when none (an error, a subscription, a value kept out).
    public var value: [UInt8]?
    /// Why the operation failed, as the gateway reported it (no value from the meter is quoted).
    public var error: String?
    /// True when the meter sent a value here that the capture does not keep (see `Capture.redacted`).
    public var withheld: Bool

    public init(milliseconds: Int64, kind: Kind, uuid: GATTUUID? = nil, value: [UInt8]? = nil, error: String? = nil,
                withheld: Bool = false) {
        self.milliseconds = milliseconds
        self.kind = kind
        self.uuid = uuid
        self.value = value
        self.error = error
        self.withheld = withheld
    }
}

/// Why a capture file could not be read: the member and what is wrong with it, in one line.
public typealias CaptureError = JSONFieldError
