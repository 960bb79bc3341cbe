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
        /// The meter asked for the passkey it displays and none was given.
        case passkeyNeeded
        /// The meter pairs by numeric comparison and nobody could be asked to compare the digits.
        case confirmationNeeded
        /// The person said the meter shows other digits than the gateway (numeric comparison).
        case numbersDiffer
        /// The meter refused the pairing after the digits were confirmed here (No pressed on the meter).
        case rejectedOnMeter
        /// Pairing or connecting did not finish in time.
        case timeout
        /// The device is not a glucose meter (no Glucose Service).
        case notAMeter
        /// The meter lost the bond this gateway holds: it must be paired again (`MeterLinkError.Kind.bondLost`).
        case bondLost
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

extension MeterAccessError {
    /// A failed `connect` in the terms of a command: no answer in time, not a meter, or not reachable.
    public init(connecting error: MeterLinkError) {
        switch error.kind {
        case .timeout: self.init(.timeout, error.message)
        case .notSupported: self.init(.notAMeter, error.message)
        case .bondLost: self.init(.bondLost, error.message)
        case .transient, .permanent, .disconnected: self.init(.notFound, error.message)
        }
    }
}

/// The Bluetooth side of the gateway: what the daemon follows (events, state, watching for meters,
/// connections) and what the commands do (scan, pair, forget). BlueZ implements it (`BlueZMeterRadio`);
/// tests use a fake.
public protocol MeterRadio: Sendable {
    // MARK: The daemon

    /// Every event from now on, in order. The stream ends only when the radio is closed or the bus is lost.
    func events() async -> AsyncStream<RadioEvent>
    /// The state now, for the adapter named (or the first powered one).
    func state(adapter: String?) async -> RadioState
    /// Powers the adapter on when it is off (best effort; rfkill cannot be lifted from here).
    func powerOn(adapter: String?) async
    /// Makes the adapter look for meters: LE discovery filtered to the Glucose Service, or a GATT
    /// profile for 0x1808 so bluetoothd connects bonded meters itself. Returns the mode in effect
    /// (profile falls back to discovery where bluetoothd refuses it). Idempotent.
    func startWatching(adapter: String?, mode: ScanMode) async throws(MeterLinkError) -> ScanMode
    /// Whether BlueZ shows the device connected now.
    func isConnected(address: String) async -> Bool
    /// Disconnects those of `addresses` that BlueZ shows connected (links left by an earlier process).
    /// Returns the addresses it disconnected.
    func closeStale(addresses: [String]) async -> [String]
    /// Whether bluetoothd answers a harmless call within `timeout`. bluetoothd can hold `org.bluez` and
    /// answer nothing (seen after a kernel BUG in its socket release); returns within `timeout` then.
    func bluetoothdAnswers(timeout: Duration) async -> Bool

    // MARK: Both

    /// Connects and waits for resolved services. The error keeps the link's kind (the daemon counts
    /// failures by it); commands put it in their terms with `MeterAccessError(connecting:)`.
    func connect(address: String, timeout: Duration) async throws(MeterLinkError) -> any MeterLink
    /// Releases registrations, discovery and the bus.
    func close() async

    // MARK: The commands

    /// Meters advertising the Glucose Service during `timeout`, strongest first.
    func scan(timeout: Duration) async throws(MeterAccessError) -> [NearbyMeter]
    /// Waits until the meter is seen (advertising, or already connected), up to `timeout`.
    func waitForMeter(address: String, timeout: Duration) async throws(MeterAccessError) -> NearbyMeter
    /// Pairs with the meter through the gateway's own agent, answering what the meter's pairing method
    /// asks from `input`, then trusts it. Returns the method used, nil when the adapter was bonded
    /// with the meter already.
    func pair(address: String, input: PairingInput, timeout: Duration) async throws(MeterAccessError) -> PairingMethod?
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
