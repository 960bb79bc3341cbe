import DBusKit
import GatewayCore

/// A Bluetooth adapter as BlueZ presents it (`org.bluez.Adapter1`).
public struct AdapterInfo: Sendable, Equatable {
    public var path: String
    /// `hci0`.
    public var name: String
    public var address: String?
    public var powered: Bool
    public var discovering: Bool
    /// `on`, `off`, `off-blocked` (rfkill), ... (BlueZ 5.66+).
    public var powerState: String?

    init?(path: String, interfaces: InterfaceProperties?) {
        guard let properties = interfaces?[BlueZNames.adapter] else { return nil }
        self.path = path
        self.name = String(path.split(separator: "/").last ?? "")
        self.address = properties["Address"]?.string
        self.powered = properties["Powered"]?.bool ?? false
        self.discovering = properties["Discovering"]?.bool ?? false
        self.powerState = properties["PowerState"]?.string
    }
}

/// A device as BlueZ presents it (`org.bluez.Device1`).
public struct DiscoveredDevice: Sendable, Equatable {
    public var path: String
    /// `AA:BB:CC:DD:EE:FF`.
    public var address: String
    public var name: String?
    public var rssi: Int?
    /// bluetoothd sets RSSI only while it hears the device advertise, also when the value is "not
    /// available" (127, which `rssi` leaves out): whether the device is heard now.
    public var heard: Bool
    /// Advertised or resolved service UUIDs, lower-case 128-bit strings.
    public var uuids: [String]
    public var paired: Bool
    public var trusted: Bool
    public var connected: Bool
    public var servicesResolved: Bool
    /// Path of the adapter that sees the device.
    public var adapter: String?

    init?(path: String, interfaces: InterfaceProperties?) {
        guard let properties = interfaces?[BlueZNames.device], let address = properties["Address"]?.string else {
            return nil
        }
        self.path = path
        self.address = address
        self.name = properties["Name"]?.string ?? properties["Alias"]?.string
        self.rssi = Self.dBm(properties["RSSI"]?.int64)
        self.heard = properties["RSSI"] != nil
        self.uuids = (properties["UUIDs"]?.stringArray ?? []).map { $0.lowercased() }
        self.paired = properties["Paired"]?.bool ?? false
        self.trusted = properties["Trusted"]?.bool ?? false
        self.connected = properties["Connected"]?.bool ?? false
        self.servicesResolved = properties["ServicesResolved"]?.bool ?? false
        self.adapter = properties["Adapter"]?.objectPath
    }

    /// An RSSI as bluetoothd passes it on, in dBm, or nil when the controller could not measure it. HCI
    /// reports 127 (0x7F) for "not available" in an LE advertising report, and bluetoothd forwards it
    /// unchanged; measured values lie in -127...20 dBm. A virtual controller always says 127.
    static func dBm(_ raw: Int64?) -> Int? {
        guard let raw, (-127...20).contains(raw) else { return nil }
        return Int(raw)
    }

    /// Whether the device lists any of `uuids` (true for an empty filter).
    public func advertises(any filter: [GATTUUID]) -> Bool {
        filter.isEmpty || filter.contains { uuids.contains($0.uuidString) }
    }
}

extension BlueZClient {
    // MARK: - Adapters

    /// Adapters in path order.
    public func adapters() -> [AdapterInfo] {
        objects.keys.sorted().compactMap { AdapterInfo(path: $0, interfaces: objects[$0]) }
    }

    /// The adapter called `name` (`hci0`), or with `name` nil the first powered one, else the first one.
    public func adapter(named name: String? = nil) throws(BlueZError) -> AdapterInfo {
        guard let found = Self.pickAdapter(named: name, powered: false, in: objects) else {
            throw BlueZError(.notFound, name.map { "no Bluetooth adapter \($0)" } ?? "no Bluetooth adapter")
        }
        return found
    }

    static func pickAdapter(named name: String?, powered: Bool, in objects: [String: InterfaceProperties]) -> AdapterInfo? {
        let all = objects.keys.sorted().compactMap { AdapterInfo(path: $0, interfaces: objects[$0]) }
        let candidates = name.map { n in all.filter { $0.name == n || $0.path == n } } ?? all
        if let on = candidates.first(where: \.powered) { return on }
        return powered ? nil : candidates.first
    }

    /// Waits until the adapter (named, or any) exists and, when `powered`, is powered: adapters on a
    /// Raspberry Pi come up late.
    public func waitForAdapter(named name: String? = nil, powered: Bool = true,
                               timeout: Duration) async throws(BlueZError) -> AdapterInfo {
        try await wait(timeout: timeout, for: name.map { "adapter \($0)" } ?? "a Bluetooth adapter") { objects, _ in
            Self.pickAdapter(named: name, powered: powered, in: objects)
        }
    }

    /// Powers an adapter on or off (`Powered` is not persistent in BlueZ).
    public func setPowered(_ on: Bool, adapter: AdapterInfo) async throws(BlueZError) {
        try await setProperty(path: adapter.path, interface: BlueZNames.adapter, name: "Powered", value: .bool(on))
    }

    // MARK: - Discovery

    /// Sets the discovery filter (`Transport=le`, `UUIDs`) and starts discovery on the adapter (named, or
    /// the first powered one). Started again automatically after a restart of bluetoothd.
    public func startDiscovery(adapterName: String? = nil, uuids: [GATTUUID] = [.glucoseService]) async throws(BlueZError) {
        let adapter = try adapter(named: adapterName)
        try await beginDiscovery(on: adapter, uuids: uuids)
        rememberDiscovery(adapterName: adapterName, uuids: uuids)
    }

    func beginDiscovery(on adapter: AdapterInfo, uuids: [GATTUUID]) async throws(BlueZError) {
        try await setDiscoveryFilter(on: adapter, uuids: uuids)
        do {
            _ = try await callBlueZ(path: adapter.path, interface: BlueZNames.adapter, member: "StartDiscovery")
        } catch where error.name == BlueZErrorNames.inProgress {
            // Either our session exists already, or bluetoothd's first discovery failed with mgmt Busy and it
            // dropped our session (src/adapter.c start_discovery_complete): a bluetoothd that died leaves
            // its discovery running in the kernel for about 10 s. Only a discovering adapter tells them apart.
            guard await !isDiscovering(adapter) else { return }
            logger.info("bluez: \(adapter.name) refused discovery (\(error.message)) while not discovering; asking again")
            scheduleDiscoveryRetry()
        }
    }

    /// `Transport=le`, no duplicates, the service UUIDs. bluetoothd forgets it with a failed session.
    func setDiscoveryFilter(on adapter: AdapterInfo, uuids: [GATTUUID]) async throws(BlueZError) {
        var filter: [String: DBusValue] = ["Transport": .string("le"), "DuplicateData": .bool(false)]
        if !uuids.isEmpty { filter["UUIDs"] = .strings(uuids.map(\.uuidString)) }
        _ = try await callBlueZ(path: adapter.path, interface: BlueZNames.adapter, member: "SetDiscoveryFilter",
                                arguments: [.vardict(filter)])
    }

    /// `Discovering` as bluetoothd says it now (asked, not taken from the mirror).
    func isDiscovering(_ adapter: AdapterInfo) async -> Bool {
        let reply = try? await callBlueZ(path: adapter.path, interface: DBusNames.properties, member: "Get",
                                         arguments: [.string(BlueZNames.adapter), .string("Discovering")], timeout: .seconds(5))
        return reply?.first?.bool ?? false
    }

    /// Stops the discovery this client started.
    public func stopDiscovery(adapterName: String? = nil) async throws(BlueZError) {
        forgetDiscovery()
        let adapter = try adapter(named: adapterName)
        _ = try await callBlueZ(path: adapter.path, interface: BlueZNames.adapter, member: "StopDiscovery")
    }

    // MARK: - Devices

    /// Devices BlueZ knows, in path order.
    public func devices() -> [DiscoveredDevice] {
        objects.keys.sorted().compactMap { DiscoveredDevice(path: $0, interfaces: objects[$0]) }
    }

    /// The device with this address (any case), if BlueZ knows it.
    public func device(address: String) -> DiscoveredDevice? {
        let wanted = address.uppercased()
        return devices().first { $0.address.uppercased() == wanted }
    }

    /// Waits until BlueZ knows a device with this address (discovery must be running for a new one).
    public func waitForDevice(address: String, timeout: Duration) async throws(BlueZError) -> DiscoveredDevice {
        let wanted = address.uppercased()
        return try await wait(timeout: timeout, for: "device \(address)") { objects, _ in
            objects.keys.sorted().lazy.compactMap { DiscoveredDevice(path: $0, interfaces: objects[$0]) }
                .first { $0.address.uppercased() == wanted }
        }
    }

    /// Removes a device and its bond (`Adapter1.RemoveDevice`). Returns false when BlueZ did not know it.
    @discardableResult
    public func removeDevice(address: String) async throws(BlueZError) -> Bool {
        guard let device = device(address: address) else { return false }
        let adapterPath = device.adapter ?? String(device.path.split(separator: "/").dropLast().joined(separator: "/").prepending("/"))
        do {
            _ = try await callBlueZ(path: adapterPath, interface: BlueZNames.adapter, member: "RemoveDevice",
                                    arguments: [.objectPath(device.path)])
        } catch where error.name == BlueZErrorNames.doesNotExist {
            return false
        }
        // BlueZ 5.66 sends InterfacesRemoved before the reply: let the mirror apply it before anyone looks
        // again. BlueZ 5.82 replies at once for a connected device and removes it (object, bond and key)
        // only when its link is down: until then the object still says Paired=true, which a caller
        // waiting for the meter would take for a working bond. Wait for the object to go (bounded: the
        // removal stands either way). Not for a device that was not connected: bluetoothd removes it
        // before replying, except 5.82 after a link the meter ended by refusing the key, which keeps it
        // until the next link ends; waiting cannot help there (`MeterPairing` connects once instead).
        await caughtUp()
        guard device.connected else { return true }
        let path = device.path
        _ = try? await wait(timeout: removalTimeout, for: "the removal of \(address)") { objects, _ in
            objects[path] == nil ? true : nil
        }
        return true
    }

    /// Paths of the GATT characteristics under a device, by UUID (lower-case 128-bit string). Where a UUID
    /// occurs twice the first path wins.
    public func characteristics(of devicePath: String) -> [String: String] {
        var out: [String: String] = [:]
        let prefix = devicePath + "/"
        for path in objects.keys.sorted() where path.hasPrefix(prefix) {
            guard let uuid = objects[path]?[BlueZNames.gattCharacteristic]?["UUID"]?.string?.lowercased() else { continue }
            if out[uuid] == nil { out[uuid] = path }
        }
        return out
    }

    /// Paths of the characteristics under a device whose notifications bluetoothd can hand over through a
    /// socket (`AcquireNotify`): those with a `NotifyAcquired` property, which bluetoothd gives a
    /// characteristic that notifies (not one that only indicates).
    public func acquirableCharacteristics(of devicePath: String) -> Set<String> {
        let prefix = devicePath + "/"
        var out: Set<String> = []
        for (path, interfaces) in objects where path.hasPrefix(prefix) {
            if interfaces[BlueZNames.gattCharacteristic]?["NotifyAcquired"] != nil { out.insert(path) }
        }
        return out
    }

    /// Paths of the GATT services under a device, by UUID.
    public func services(of devicePath: String) -> [String: String] {
        var out: [String: String] = [:]
        let prefix = devicePath + "/"
        for path in objects.keys.sorted() where path.hasPrefix(prefix) {
            guard let uuid = objects[path]?[BlueZNames.gattService]?["UUID"]?.string?.lowercased() else { continue }
            if out[uuid] == nil { out[uuid] = path }
        }
        return out
    }
}

extension String {
    fileprivate func prepending(_ prefix: String) -> String { prefix + self }
}
