import GatewayCore

/// What the Bluetooth side reports to the daemon. Every event is a reason to look again; none carries
/// state the daemon must not re-check (bluetoothd can restart between an event and its handling).
public enum RadioEvent: Sendable, Equatable {
    /// `org.bluez` has an owner again (first start or after a restart).
    case bluetoothdStarted
    /// `org.bluez` lost its owner: every link, notification, discovery and registration is gone.
    case bluetoothdStopped
    /// An adapter appeared, vanished, or changed power.
    case adaptersChanged
    /// A device advertising the Glucose Service was seen, or a device connected (bluetoothd connects
    /// bonded meters itself when a GATT profile is registered).
    case meterSeen(address: String, connected: Bool)
}

/// The Bluetooth side as the daemon sees it at one moment.
public struct RadioState: Sendable, Equatable {
    public var bluetoothdRunning: Bool
    /// The adapter in use (`hci0`), nil when there is none (yet).
    public var adapter: String?
    public var adapterPowered: Bool
    /// `on`, `off`, `off-blocked` (rfkill), ... when bluetoothd reports it (5.66+).
    public var powerState: String?
    public var discovering: Bool

    public init(bluetoothdRunning: Bool, adapter: String?, adapterPowered: Bool, powerState: String? = nil, discovering: Bool = false) {
        self.bluetoothdRunning = bluetoothdRunning
        self.adapter = adapter
        self.adapterPowered = adapterPowered
        self.powerState = powerState
        self.discovering = discovering
    }

    public static let absent = RadioState(bluetoothdRunning: false, adapter: nil, adapterPowered: false)
}

/// The Bluetooth side of the daemon: BlueZ over D-Bus in the product, a fake in tests.
public protocol DaemonRadio: Sendable {
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
    /// Connects and waits for resolved services.
    func connect(address: String, timeout: Duration) async throws(MeterLinkError) -> any MeterLink
    /// Whether BlueZ shows the device connected now.
    func isConnected(address: String) async -> Bool
    /// Disconnects those of `addresses` that BlueZ shows connected (links left by an earlier process).
    /// Returns the addresses it disconnected.
    func closeStale(addresses: [String]) async -> [String]
    /// Releases registrations and the bus.
    func close() async
    /// Whether bluetoothd answers a harmless call within `timeout`. bluetoothd can hold `org.bluez` and
    /// answer nothing (seen after a kernel BUG in its socket release); returns within `timeout` then.
    func bluetoothdAnswers(timeout: Duration) async -> Bool
}

extension DaemonRadio {
    public func bluetoothdAnswers(timeout: Duration) async -> Bool { true }
}
