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

/// How the gateway finds meters: BlueZ discovery with a Glucose Service filter, or only meters already
/// known to BlueZ (paired), connected by profile when they advertise.
public enum ScanMode: String, Sendable, CaseIterable {
    case discovery
    case profile
}
