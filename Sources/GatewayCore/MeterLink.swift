/// 16-bit Bluetooth SIG UUIDs the gateway uses, and their 128-bit string form as BlueZ prints it; also a
/// vendor's 128-bit UUID outside the Bluetooth base (then `rawValue` is 0 and `vendor` holds it).
public struct GATTUUID: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt16
    /// A 128-bit UUID outside the Bluetooth base, lower case with dashes; nil for SIG UUIDs.
    public private(set) var vendor: String?
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// A vendor UUID (`c4dea3bc-5a9d-11e9-8647-d663bd873d93`); nil unless 8-4-4-4-12 hex digits. One on the
    /// Bluetooth base is the SIG UUID it names.
    public init?(vendor text: String) {
        let lower = text.lowercased()
        let groups = lower.split(separator: "-", omittingEmptySubsequences: false)
        guard groups.map(\.count) == [8, 4, 4, 4, 12], groups.allSatisfy({ $0.allSatisfy(\.isHexDigit) }) else { return nil }
        if let sig = GATTUUID(string: lower) { self = sig; return }
        rawValue = 0
        vendor = lower
    }

    public static let glucoseService = GATTUUID(rawValue: 0x1808)
    public static let deviceInformationService = GATTUUID(rawValue: 0x180A)
    public static let currentTimeService = GATTUUID(rawValue: 0x1805)
    public static let glucoseMeasurement = GATTUUID(rawValue: 0x2A18)
    public static let glucoseMeasurementContext = GATTUUID(rawValue: 0x2A34)
    public static let glucoseFeature = GATTUUID(rawValue: 0x2A51)
    public static let recordAccessControlPoint = GATTUUID(rawValue: 0x2A52)
    public static let dateTime = GATTUUID(rawValue: 0x2A08)
    public static let currentTime = GATTUUID(rawValue: 0x2A2B)
    public static let manufacturerName = GATTUUID(rawValue: 0x2A29)
    public static let modelNumber = GATTUUID(rawValue: 0x2A24)
    public static let serialNumber = GATTUUID(rawValue: 0x2A25)
    public static let firmwareRevision = GATTUUID(rawValue: 0x2A26)
    public static let softwareRevision = GATTUUID(rawValue: 0x2A28)
    public static let systemID = GATTUUID(rawValue: 0x2A23)
    /// The i-SENS (CareSens, ReliOn) vendor service and its clock characteristic (write, notify).
    public static let isensVendorService = GATTUUID(rawValue: 0xFFF0)
    public static let isensVendorClock = GATTUUID(rawValue: 0xFFF1)
    /// The same on newer i-SENS firmware (protocol 1.5): a 128-bit service and characteristic.
    public static let isensVendorServiceV15 = GATTUUID(knownVendor: "c4dea010-5a9d-11e9-8647-d663bd873d93")
    public static let isensVendorClockV15 = GATTUUID(knownVendor: "c4dea3bc-5a9d-11e9-8647-d663bd873d93")

    private init(knownVendor: String) {
        rawValue = 0
        vendor = knownVendor
    }

    /// `0000xxxx-0000-1000-8000-00805f9b34fb`, lower case, as in BlueZ's `UUID` properties.
    public var uuidString: String {
        if let vendor { return vendor }
        let hex = String(rawValue, radix: 16)
        return "0000" + String(repeating: "0", count: 4 - hex.count) + hex + "-0000-1000-8000-00805f9b34fb"
    }

    /// Parses a 128-bit SIG-base UUID string or a 4-digit short form; nil for anything else (see
    /// `init(vendor:)` for other 128-bit UUIDs).
    public init?(string: String) {
        let lower = string.lowercased()
        if lower.count == 4, let v = UInt16(lower, radix: 16) { self.init(rawValue: v); return }
        guard lower.count == 36, lower.hasPrefix("0000"), lower.hasSuffix("-0000-1000-8000-00805f9b34fb") else { return nil }
        let short = lower.dropFirst(4).prefix(4)
        guard let v = UInt16(short, radix: 16) else { return nil }
        self.init(rawValue: v)
    }

    public var description: String {
        if let vendor { return vendor }
        let hex = String(rawValue, radix: 16)
        return "0x" + String(repeating: "0", count: 4 - hex.count) + hex
    }
}

/// What a connected meter link delivers, in the order the bytes arrived from the meter.
/// One merged sequence keeps the order between 0x2A18, 0x2A34 and 0x2A52, which the download relies on
/// (the RACP response comes after the last record it reports).
public enum MeterLinkEvent: Sendable, Equatable {
    /// A notification or indication of `characteristic`.
    case value(GATTUUID, [UInt8])
    /// The link is gone (meter walked away, bluetoothd restarted, bus lost). No further events follow.
    case disconnected(reason: String)
}

/// Why a link operation failed. `attError` carries the ATT error code where the stack reports one
/// (0x80 procedure already in progress, 0x81 client characteristic configuration improperly configured).
public struct MeterLinkError: Error, Sendable, CustomStringConvertible, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Worth retrying (aborted connection, busy, in progress).
        case transient
        /// Not worth retrying (not permitted, authentication failed, no such device).
        case permanent
        /// The link is gone.
        case disconnected
        /// The operation did not finish in time.
        case timeout
        /// The meter lacks the characteristic or service.
        case notSupported
        /// The meter no longer has the bond this gateway holds (reset, or paired with another device):
        /// the link is refused at encryption with the stored key, every time, until the meter is paired
        /// again. Only for a meter BlueZ shows bonded; see `BlueZClient.connectMeter` for the evidence.
        case bondLost
    }
    public var kind: Kind
    public var message: String
    public var attError: UInt8?
    /// For a failed connection of another kind: how many of its attempts the meter refused at encryption
    /// with the stored key. Evidence of a lost bond that a caller adds up across connections (a meter that
    /// advertises in bursts refuses one attempt and lets the next run into its pause).
    public var keyRefusals: Int
    public init(_ kind: Kind, _ message: String, attError: UInt8? = nil, keyRefusals: Int = 0) {
        self.kind = kind
        self.message = message
        self.attError = attError
        self.keyRefusals = keyRefusals
    }
    public var description: String { message }
}

/// A connected meter, with services resolved: the seam between the download procedure (Gateway)
/// and the Bluetooth stack (BlueZ). Tests use an in-memory fake; the daemon uses BlueZ over D-Bus.
public protocol MeterLink: Sendable {
    /// The meter's Bluetooth address, `AA:BB:CC:DD:EE:FF`.
    var address: String { get }
    /// Every event of the link, merged in arrival order. Values appear only for subscribed characteristics.
    var events: AsyncStream<MeterLinkEvent> { get }
    /// The same events in groups, as the link took them in together (a burst of notifications), so a
    /// consumer pays for one stream element per group. A consumer reads either this or `events`, not
    /// both. By default each event is a group of its own.
    var eventGroups: AsyncStream<[MeterLinkEvent]> { get }
    /// Whether the resolved GATT database has this characteristic (in any service).
    func hasCharacteristic(_ uuid: GATTUUID) async -> Bool
    /// Reads a characteristic's value.
    func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8]
    /// Writes with response (RACP needs it). An ATT error from the meter is thrown with `attError` set.
    func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError)
    /// Enables notifications or indications (whichever the characteristic supports).
    func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError)
    /// Disables them again; never throws, a gone link has nothing to stop.
    func unsubscribe(_ uuid: GATTUUID) async
    /// Stops every subscription and disconnects.
    func disconnect() async
    /// Reads several characteristics, each result as `read` would give it, in the order asked. A link may
    /// send the requests together instead of one after the other's answer; the meter sees the same order.
    func read(_ uuids: [GATTUUID]) async -> [Result<[UInt8], MeterLinkError>]
    /// Subscribes to several characteristics, each result as `subscribe` would give it, in the order
    /// asked; every one has its answer before this returns. A link may send the requests together.
    func subscribe(_ uuids: [GATTUUID]) async -> [Result<Void, MeterLinkError>]
    /// Unsubscribes from several characteristics, as `unsubscribe` each, in the order given; a link may send
    /// the requests together.
    func unsubscribe(_ uuids: [GATTUUID]) async
}

extension MeterLink {
    public func read(_ uuids: [GATTUUID]) async -> [Result<[UInt8], MeterLinkError>] {
        var results: [Result<[UInt8], MeterLinkError>] = []
        for uuid in uuids {
            do { results.append(.success(try await read(uuid))) } catch { results.append(.failure(error)) }
        }
        return results
    }

    public func unsubscribe(_ uuids: [GATTUUID]) async {
        for uuid in uuids { await unsubscribe(uuid) }
    }

    public func subscribe(_ uuids: [GATTUUID]) async -> [Result<Void, MeterLinkError>] {
        var results: [Result<Void, MeterLinkError>] = []
        for uuid in uuids {
            do { results.append(.success(try await subscribe(uuid))) } catch { results.append(.failure(error)) }
        }
        return results
    }
}
