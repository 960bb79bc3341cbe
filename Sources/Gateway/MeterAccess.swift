import GatewayCore

/// A meter seen advertising the Glucose Service.
public struct NearbyMeter: Sendable, Equatable {
    public var address: String
    public var name: String?
    public var rssi: Int?
    /// Bonded with this gateway's adapter.
    public var paired: Bool
    public init(address: String, name: String?, rssi: Int?, paired: Bool) {
        self.address = address
        self.name = name
        self.rssi = rssi
        self.paired = paired
    }
}

/// Why the radio side failed, in words a user can act on.
public struct MeterAccessError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// No adapter, adapter off or blocked, bluetoothd not running.
        case adapterUnavailable
        /// The meter was not seen (not advertising, out of range) within the time allowed.
        case notFound
        /// The meter refused the passkey.
        case authenticationFailed
        /// The meter refused to pair before asking for a passkey (not in pairing mode).
        case pairingRefused
        /// Pairing or connecting did not finish in time.
        case timeout
        /// The device is not a glucose meter (no Glucose Service).
        case notAMeter
        case failed
    }
    public var kind: Kind
    public var message: String
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
    public var description: String { message }
}

/// The Bluetooth side as meter sessions and commands need it. BlueZ implements it for the gateway;
/// tests use a fake.
public protocol MeterRadio: Sendable {
    /// Meters advertising the Glucose Service during `timeout`, strongest first.
    func scan(timeout: Duration) async throws(MeterAccessError) -> [NearbyMeter]
    /// Waits until the meter is seen (advertising, or already connected), up to `timeout`.
    func waitForMeter(address: String, timeout: Duration) async throws(MeterAccessError) -> NearbyMeter
    /// Connects and waits for resolved services.
    func connect(address: String, timeout: Duration) async throws(MeterAccessError) -> any MeterLink
    /// Pairs with the meter's passkey through the gateway's own agent, then trusts it.
    func pair(address: String, passkey: UInt32, timeout: Duration) async throws(MeterAccessError)
    /// Removes the bond; false when the adapter did not know the meter.
    func forget(address: String) async throws(MeterAccessError) -> Bool
}

/// Bluetooth addresses as users type them.
public enum MeterAddress {
    /// `AA:BB:CC:DD:EE:FF` in upper case, or nil when `text` is not a Bluetooth address. Dashes are
    /// accepted in place of colons.
    public static func normalize(_ text: String) -> String? {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        let pieces = parts.count == 6 ? parts : text.split(separator: "-", omittingEmptySubsequences: false)
        guard pieces.count == 6 else { return nil }
        var out: [String] = []
        for p in pieces {
            guard p.count == 2, p.utf8.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x41 && $0 <= 0x46) || ($0 >= 0x61 && $0 <= 0x66) }) else {
                return nil
            }
            out.append(p.uppercased())
        }
        return out.joined(separator: ":")
    }
}
