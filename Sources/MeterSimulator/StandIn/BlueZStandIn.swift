import DBusKit
import GatewayCore
import GlucoseProfile

/// Options of the BlueZ stand-in.
public struct StandInOptions: Sendable {
    /// The bus to own `org.bluez` on (`unix:path=...`).
    public var busAddress: String
    /// The adapter's node name (`hci0`) and address.
    public var adapterName: String = "hci0"
    public var adapterAddress: String = "00:1A:7D:DA:71:01"
    /// Simulated seconds after which an unpaired device nobody connected to disappears once it stops
    /// being seen (BlueZ's `TemporaryTimeout`, default 30).
    public var temporaryTimeout: Double = 30
    /// Simulated seconds `Connect` waits for a meter that is not advertising before it fails.
    public var connectTimeout: Double = 20
    /// Simulated seconds between advertisement reports while discovering.
    public var scanInterval: Double = 1
    /// Bonds are written here (and read at start) so they survive the process; nil keeps them in memory.
    public var statePath: String?
    public var clock: SimulationClock = SimulationClock()
    /// Offer `AcquireNotify` (and the `NotifyAcquired` property) on notify characteristics, as BlueZ does.
    /// Off by default: notifications through the socket are not ordered with the RACP indication on D-Bus.
    public var offerAcquireNotify = false

    public init(busAddress: String) {
        self.busAddress = busAddress
    }
}

/// Builds a `DBusError` with an `org.bluez.Error.*` name.
func bluezError(_ name: String, _ message: String) -> DBusError {
    DBusError(name: "org.bluez.Error." + name, message: message)
}

/// A stand-in for bluetoothd on a bus without Bluetooth hardware: it owns `org.bluez` and presents an
/// adapter, the simulated meters as devices, and their GATT objects exactly as a central sees them on
/// BlueZ 5.66+ (see the simulator notes for the list of behaviours and the known deviations).
///
/// State that a real bluetoothd keeps on disk (bonds, "paired") survives `restartBluetoothd()`;
/// everything that belongs to the daemon's run (agents, discovery and notify sessions, links,
/// unpaired devices) is lost with the bus name, as when bluetoothd restarts.
public actor BlueZStandIn {
    // MARK: Persistent state

    struct Meter {
        var description: MeterDescription
        let peripheral: MeterPeripheral
        let layout: GATTLayout
        var paired = false
        var trusted = false
        var blocked = false
    }

    struct Device {
        var exported = false
        /// Unpaired and never connected in this run: removed `temporaryTimeout` after last seen.
        var temporary = true
        var connected = false
        var servicesResolved = false
        var gattExported = false
        var lastSeen = ContinuousClock.now
        var rssi: Int16 = -60
        var connectTask: Task<Void, any Error>?
        var pairTask: Task<Void, any Error>?
        var pairAgent: (sender: String, path: String)?
        /// The connection that called `Pair`; bluetoothd cancels the bonding when it leaves the bus.
        var pairCaller: String?
    }

    /// A scripted `Connect` outcome (control method `FailConnect`).
    public enum ConnectFailure: String, Sendable, CaseIterable {
        /// The link comes up briefly (Connected true, then false), then `Failed "le-connection-abort-by-local"`.
        case abortByLocal = "abort-by-local"
        /// `Failed "br-connection-canceled"` (the link dropped while Connect was pending).
        case canceled
        /// `InProgress`.
        case inProgress = "in-progress"
        /// `Connect` never answers; the caller's own timeout ends it.
        case hang
        /// bluez #1489: ServicesResolved=true before the GATT objects are exported.
        case resolvedBeforeExport = "resolved-before-export"
    }

    /// Behaviours of real bluetoothd the stand-in plays on demand, per meter (control method `SetQuirks`).
    public enum Quirk: String, Sendable, CaseIterable {
        /// BlueZ 5.66 (`src/device.c`): when the ATT channel is up before the mgmt "Device Connected" event
        /// is handled, `Connected` turns true without a `PropertiesChanged` signal for the whole connection;
        /// `Properties.Get` says true. `ServicesResolved` is signalled as usual.
        case silentConnected = "silent-connected"
        /// A BlueZ peripheral batches notifications for 10 ms (ATT Multiple Handle Value Notification) but
        /// indicates at once, and with EATT uses another bearer: the RACP response arrives before the
        /// records it ends, which follow `lateRecordsDelay` later.
        case responseBeforeRecords = "response-before-records"
        /// Pairing stalls after the passkey was given and ends with `AuthenticationCanceled` (seen with
        /// EATT on: the kernel's HCI Disconnect timed out, `command 0x0406 tx timeout`, after 34 s).
        case pairingStalls = "pairing-stalls"
    }

    /// How late the records come with `response-before-records` (real time: bluetoothd's batching does
    /// not follow the meter's simulated clock).
    static let lateRecordsDelay: Duration = .milliseconds(60)

    struct Agent {
        var sender: String
        var path: String
        var capability: String
    }

    struct DiscoveryFilter {
        var uuids: [String] = []
        var transport = "auto"
        var pattern = ""
        var rssi: Int16?
    }

    let options: StandInOptions
    let logger: Logger
    private var meters: [String: Meter] = [:]
    private var order: [String] = []
    private var adapterPresent = true
    private var powered = true
    private var callLog: [String] = []
    /// Scripted outcomes of the next `Connect` calls per meter, consumed in order.
    private var connectFailures: [String: [ConnectFailure]] = [:]
    private var rfkillBlocked = false
    private var quirks: [String: Set<Quirk>] = [:]
    /// A discovery the kernel still runs for a bluetoothd that died (`CrashBluetoothd`): until then every
    /// StartDiscovery gets mgmt Busy, which bluetoothd 5.66 answers with InProgress, keeping no session.
    private var kernelDiscoveryUntil: ContinuousClock.Instant?
    /// Notifications held back behind the RACP response (`response-before-records`), per meter.
    private var heldValues: [String: [(GATTUUID, [UInt8])]] = [:]
    /// Bumped by every explicit power change, so a pending hot-plug auto-enable does not override it.
    private var powerChanges = 0
    private let onReady: @Sendable (String) -> Void
    private var eventTasks: [Task<Void, Never>] = []

    // MARK: Per-run state (lost on restart)

    private var connection: DBusConnection?
    private var generation = 0
    private var devices: [String: Device] = [:]
    private var discovery: [String: DiscoveryFilter] = [:]
    private var filters: [String: DiscoveryFilter] = [:]
    private var agents: [String: Agent] = [:]
    private var defaultAgentSender: String?
    /// Characteristic path -> senders holding a notify session.
    private var notifySessions: [String: Set<String>] = [:]
    /// Characteristic path -> the socket of an `AcquireNotify`.
    private var acquired: [String: AcquiredNotify] = [:]
    private var runTasks: [Task<Void, Never>] = []
    /// Senders with a registered GATT application holding a `GattProfile1` for the Glucose Service, and
    /// the application paths: bonded meters are then connected as soon as they advertise.
    private var profiles: [String: Set<String>] = [:]
    private var autoConnecting: Set<String> = []

    public init(meters descriptions: [MeterDescription], options: StandInOptions, logger: Logger,
                onReady: @escaping @Sendable (String) -> Void = { _ in }) {
        self.options = options
        self.logger = logger
        self.onReady = onReady
        for d in descriptions {
            meters[d.address] = Meter(description: d, peripheral: MeterPeripheral(meter: d, clock: options.clock),
                                      layout: GATTLayout(meter: d))
            order.append(d.address)
        }
    }

    // MARK: Paths

    var adapterPath: String { "/org/bluez/" + options.adapterName }
    func devicePath(_ address: String) -> String { adapterPath + "/dev_" + address.replacingColons() }
    func servicePath(_ address: String, _ s: GATTLayout.Service) -> String {
        devicePath(address) + "/service" + GATTLayout.hex4(s.handle)
    }
    func charPath(_ address: String, _ s: GATTLayout.Service, _ c: GATTLayout.Characteristic) -> String {
        servicePath(address, s) + "/char" + GATTLayout.hex4(c.handle)
    }
    func descPath(_ address: String, _ s: GATTLayout.Service, _ c: GATTLayout.Characteristic) -> String? {
        c.cccdHandle.map { charPath(address, s, c) + "/desc" + GATTLayout.hex4($0) }
    }

    /// The meter address and characteristic behind a characteristic path.
    func lookupCharacteristic(_ path: String) -> (String, GATTLayout.Service, GATTLayout.Characteristic)? {
        for (address, m) in meters {
            for s in m.layout.services {
                for c in s.characteristics where charPath(address, s, c) == path { return (address, s, c) }
            }
        }
        return nil
    }

    func address(ofDevicePath path: String) -> String? {
        meters.keys.first { devicePath($0) == path }
    }

    // MARK: Life cycle

    /// Loads bonds, starts the meters and takes `org.bluez`. Throws when the bus is unreachable or the
    /// name is taken.
    public func start() async throws {
        loadState()
        for address in order {
            guard let m = meters[address] else { continue }
            await m.peripheral.start()
            let peripheral = m.peripheral
            eventTasks.append(Task { [weak self] in
                for await event in peripheral.events {
                    await self?.handle(event, from: address)
                }
            })
        }
        try await bringUp()
    }

    /// Releases `org.bluez` and stops the meters.
    public func stop() async {
        await tearDownRun(closeConnection: true)
        for t in eventTasks { t.cancel() }
        for m in meters.values { await m.peripheral.stop() }
    }

    /// Returns when the current bus connection is lost (not when it is closed by a restart).
    public func waitUntilBusLost() async {
        while true {
            guard let c = connection else {
                try? await Task.sleep(for: .milliseconds(100))
                if Task.isCancelled { return }
                continue
            }
            await c.waitForDisconnect()
            if Task.isCancelled { return }
            if connection === c { return }
        }
    }

    private func bringUp() async throws {
        generation += 1
        let gen = generation
        let c = try await DBusConnection.connect(address: options.busAddress)
        connection = c
        devices = [:]
        try await c.exportObjectManager(at: "/")
        try await c.export(path: "/org/bluez", interfaces: [agentManagerInterface(gen), profileManagerInterface()])
        try await c.export(path: ControlInterface.path, interfaces: [controlInterface(gen)])
        if adapterPresent { try await exportAdapter(gen) }
        let owners = try await c.subscribe(MatchRule(type: .signal, sender: DBusNames.bus, interface: DBusNames.bus,
                                                     member: "NameOwnerChanged"))
        runTasks.append(Task { [weak self] in
            for await m in owners {
                guard m.body.count == 3, let name = m.body[0].string, let new = m.body[2].string else { continue }
                if new.isEmpty, name.hasPrefix(":") { await self?.senderLeft(name, generation: gen) }
            }
        })
        let result = try await c.requestName("org.bluez", flags: [.doNotQueue])
        guard result == .primaryOwner || result == .alreadyOwner else {
            await c.close()
            connection = nil
            throw DBusError(.failed, "org.bluez is already owned on this bus")
        }
        let interval = options.scanInterval
        let clock = options.clock
        runTasks.append(Task { [weak self] in
            while !Task.isCancelled {
                await self?.scanTick(generation: gen)
                do { try await clock.sleep(seconds: interval) } catch { return }
            }
        })
        logger.notice("org.bluez owned as \(c.uniqueName) on \(options.busAddress)")
        onReady(c.uniqueName)
    }

    private func tearDownRun(closeConnection: Bool) async {
        for t in runTasks { t.cancel() }
        runTasks.removeAll()
        for (address, d) in devices {
            d.connectTask?.cancel()
            d.pairTask?.cancel()
            if d.connected, let m = meters[address] { await m.peripheral.linkDown() }
        }
        devices = [:]
        discovery = [:]
        filters = [:]
        agents = [:]
        profiles = [:]
        autoConnecting = []
        defaultAgentSender = nil
        notifySessions = [:]
        for path in acquired.keys { await releaseAcquired(path) }
        generation += 1
        if closeConnection, let c = connection {
            connection = nil
            await c.close()
        }
    }

    /// Drops `org.bluez` with every registration and link, then takes it again under a new unique name.
    public func restartBluetoothd() async throws {
        logger.notice("restarting: dropping org.bluez")
        await tearDownRun(closeConnection: true)
        try await options.clock.sleep(seconds: 0.2)
        try await bringUp()
    }

    /// bluetoothd killed (SIGKILL, OOM): like a restart, but a discovery it ran stays on in the kernel for
    /// 10.24 s (simulated), refusing the new bluetoothd's discoveries meanwhile. A SIGTERM'd bluetoothd
    /// powers the adapter off on exit, which ends it; a killed one cannot.
    public func crashBluetoothd() async throws {
        let discovering = !discovery.isEmpty
        logger.notice("crashing: dropping org.bluez" + (discovering ? "; the kernel's discovery stays on" : ""))
        await tearDownRun(closeConnection: true)
        if discovering {
            kernelDiscoveryUntil = ContinuousClock.now + .milliseconds(Int64(options.clock.realSeconds(10.24) * 1000))
        }
        try await options.clock.sleep(seconds: 0.2)
        try await bringUp()
    }

    // MARK: Adapter objects

    private func adapterProperties() -> [String: DBusValue] {
        var discovering = false
        if powered { discovering = !discovery.isEmpty }
        return [
            "Address": .string(options.adapterAddress),
            "AddressType": .string("public"),
            "Name": .string("glucose-gateway-standin"),
            "Alias": .string("glucose-gateway-standin"),
            "Class": .uint32(0),
            "Powered": .bool(powered),
            "PowerState": .string(powered ? "on" : (rfkillBlocked ? "off-blocked" : "off")),
            "Discoverable": .bool(false),
            "DiscoverableTimeout": .uint32(180),
            "Pairable": .bool(true),
            "PairableTimeout": .uint32(0),
            "Discovering": .bool(discovering),
            "UUIDs": .strings(["00001800-0000-1000-8000-00805f9b34fb", "00001801-0000-1000-8000-00805f9b34fb"]),
            "Modalias": .string("usb:v1D6Bp0246d0542"),
            "Roles": .strings(["central", "peripheral"]),
        ]
    }

    private func exportAdapter(_ gen: Int) async throws {
        guard let c = connection else { return }
        try await c.export(path: adapterPath, interfaces: [
            adapterInterface(gen),
            DBusInterface("org.bluez.GattManager1", methods: [
                DBusMethod("RegisterApplication", in: "oa{sv}") { [weak self] call in
                    guard let self else { return [] }
                    try await self.registerApplication(call, gen)
                    return []
                },
                DBusMethod("UnregisterApplication", in: "o") { [weak self] call in
                    guard let self else { return [] }
                    try await self.unregisterApplication(call, gen)
                    return []
                },
            ]),
            DBusInterface("org.bluez.LEAdvertisingManager1", methods: [
                DBusMethod("RegisterAdvertisement", in: "oa{sv}") { [weak self] call in
                    await self?.log(call)
                    throw bluezError("NotSupported", "The stand-in plays meters only")
                },
                DBusMethod("UnregisterAdvertisement", in: "o") { _ in throw bluezError("DoesNotExist", "Does Not Exist") },
            ], properties: [
                "ActiveInstances": .byte(0), "SupportedInstances": .byte(5),
                "SupportedIncludes": .strings(["tx-power", "appearance", "local-name"]),
            ]),
        ])
        // Bonded devices are known from storage at start, as bluetoothd loads them.
        for address in order where meters[address]?.paired == true {
            var d = Device()
            d.temporary = false
            devices[address] = d
            try await exportDevice(address, gen)
        }
    }

    private func adapterInterface(_ gen: Int) -> DBusInterface {
        DBusInterface("org.bluez.Adapter1", methods: [
            DBusMethod("StartDiscovery") { [weak self] call in
                guard let self else { return [] }
                try await self.startDiscovery(call, gen)
                return []
            },
            DBusMethod("StopDiscovery") { [weak self] call in
                guard let self else { return [] }
                try await self.stopDiscovery(call, gen)
                return []
            },
            DBusMethod("SetDiscoveryFilter", in: "a{sv}") { [weak self] call in
                guard let self else { return [] }
                try await self.setDiscoveryFilter(call, gen)
                return []
            },
            DBusMethod("GetDiscoveryFilters", out: "as") { _ in
                [.strings(["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])]
            },
            DBusMethod("RemoveDevice", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.removeDevice(call, gen)
                return []
            },
        ], properties: adapterProperties(), writableProperties: ["Powered", "Alias", "Discoverable", "Pairable"],
        setter: { [weak self] name, value, call in
            guard let self else { return }
            try await self.setAdapterProperty(name, value, call, gen)
        })
    }

    private func setAdapterProperty(_ name: String, _ value: DBusValue, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call, detail: name)
        guard name == "Powered", let on = value.bool else { return }
        if on && rfkillBlocked { throw bluezError("Blocked", "Blocked through rfkill") }
        powerChanges += 1
        guard on != powered else { return }
        if !on {
            for (address, d) in devices where d.connected { await disconnectLink(address, reason: "org.bluez.Reason.Local") }
            if !discovery.isEmpty {
                discovery = [:]
                await setAdapter(["Discovering": .bool(false)])
            }
        }
        powered = on
        await setAdapter(["PowerState": .string(on ? "on" : "off")])
    }

    private func setAdapter(_ changes: [String: DBusValue]) async {
        guard adapterPresent, let c = connection else { return }
        await c.setProperties(path: adapterPath, interface: "org.bluez.Adapter1", changes)
    }

    /// Removes the adapter the way a hot-unplug does: the adapter's interfaces go first, its devices after.
    public func removeAdapter() async {
        guard adapterPresent, let c = connection else { return }
        // Everything below runs with the adapter already gone, so a scan or a call resuming meanwhile
        // cannot bring a device back.
        adapterPresent = false
        discovery = [:]
        for (address, d) in devices {
            d.connectTask?.cancel()
            d.pairTask?.cancel()
            devices[address]?.connected = false
            devices[address]?.servicesResolved = false
            if d.connected, let m = meters[address] { await m.peripheral.linkDown() }
        }
        for path in acquired.keys { await releaseAcquired(path) }
        await c.unexport(path: adapterPath)
        for address in order where devices[address]?.exported == true {
            await unexportDevice(address)
        }
        devices = [:]
        notifySessions = [:]
    }

    /// Re-plugs the adapter as bluetoothd sees a hot-plug with `AutoEnable=true`: the adapter appears
    /// powered off (with its bonded devices), then powers on (`PowerState` off-enabling, then on).
    public func addAdapter() async throws {
        guard !adapterPresent else { return }
        adapterPresent = true
        let wasPowered = powered
        powered = false
        let gen = generation
        powerChanges += 1
        let token = powerChanges
        try await exportAdapter(gen)
        guard wasPowered, !rfkillBlocked else { return }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(50))
            await self?.autoEnable(gen, token)
        }
    }

    private func autoEnable(_ gen: Int, _ token: Int) async {
        guard gen == generation, token == powerChanges, adapterPresent, !powered, !rfkillBlocked else { return }
        await setAdapter(["PowerState": .string("off-enabling")])
        powered = true
        await setAdapter(["Powered": .bool(true), "PowerState": .string("on")])
    }

    // MARK: Discovery

    private func startDiscovery(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard discovery[call.sender] == nil else { throw bluezError("InProgress", "Operation already in progress") }
        if let until = kernelDiscoveryUntil {
            if ContinuousClock.now < until, discovery.isEmpty {
                filters.removeValue(forKey: call.sender)
                throw bluezError("InProgress", "Operation already in progress")
            }
            kernelDiscoveryUntil = nil
        }
        let wasIdle = discovery.isEmpty
        discovery[call.sender] = filters[call.sender] ?? DiscoveryFilter()
        if wasIdle { await setAdapter(["Discovering": .bool(true)]) }
        await scanTick(generation: gen)
    }

    private func stopDiscovery(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard discovery.removeValue(forKey: call.sender) != nil else {
            throw bluezError("Failed", "No discovery started")
        }
        if discovery.isEmpty { await setAdapter(["Discovering": .bool(false)]) }
    }

    private func setDiscoveryFilter(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard let dict = call.arguments.first?.vardict else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        var f = DiscoveryFilter()
        for (key, value) in dict {
            switch key {
            case "UUIDs":
                guard let list = value.stringArray else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
                f.uuids = list.map { $0.lowercased() }.map { GATTUUID(string: $0)?.uuidString ?? $0 }
            case "RSSI":
                guard let v = value.int16 else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
                f.rssi = v
            case "Pathloss":
                guard value.uint16 != nil else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
            case "Transport":
                guard let t = value.string, ["auto", "bredr", "le"].contains(t) else {
                    throw bluezError("InvalidArguments", "Invalid arguments in method call")
                }
                f.transport = t
            case "DuplicateData", "Discoverable":
                guard value.bool != nil else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
            case "Pattern":
                guard let p = value.string else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
                f.pattern = p
            default:
                throw bluezError("InvalidArguments", "Invalid arguments in method call")
            }
        }
        if dict.isEmpty { filters.removeValue(forKey: call.sender) } else { filters[call.sender] = f }
        if discovery[call.sender] != nil { discovery[call.sender] = dict.isEmpty ? DiscoveryFilter() : f }
    }

    /// Whether the merged filters of all discovery sessions let this meter through (filters are OR-merged
    /// across clients, as in bluetoothd).
    private func discoveryMatches(_ m: MeterDescription) -> Bool {
        guard !discovery.isEmpty else { return false }
        for f in discovery.values {
            if f.transport == "bredr" { continue }
            if let min = f.rssi, m.rssi < min { continue }
            if !f.pattern.isEmpty, !m.address.hasPrefix(f.pattern), !m.name.hasPrefix(f.pattern) { continue }
            if f.uuids.isEmpty || f.uuids.contains(GATTUUID.glucoseService.uuidString) { return true }
        }
        return false
    }

    private func scanTick(generation gen: Int) async {
        guard gen == generation, adapterPresent, powered, connection != nil else { return }
        let now = ContinuousClock.now
        for address in order {
            guard let m = meters[address] else { continue }
            let advertising = await m.peripheral.isAdvertising
            let d = devices[address]
            if advertising, d?.connected != true, discoveryMatches(m.description) {
                await seen(address, gen)
            }
            if advertising, !profiles.isEmpty, m.paired, let d, d.exported, !d.connected, d.connectTask == nil, d.pairTask == nil,
               !autoConnecting.contains(address) {
                autoConnect(address, gen)
            } else if let d, d.exported, d.temporary, !d.connected,
                      now - d.lastSeen > .milliseconds(Int64(options.clock.realSeconds(options.temporaryTimeout) * 1000)) {
                logger.info("device \(address) expired")
                await unexportDevice(address)
                devices.removeValue(forKey: address)
            }
        }
    }

    /// An advertisement from the meter: a new device object, or an RSSI update of a known one.
    private func seen(_ address: String, _ gen: Int) async {
        var d = devices[address] ?? Device()
        d.lastSeen = .now
        let base = meters[address]?.description.rssi ?? -60
        d.rssi = base + Int16.random(in: -3...3)
        let wasExported = d.exported
        devices[address] = d
        if wasExported {
            await connection?.setProperties(path: devicePath(address), interface: "org.bluez.Device1", ["RSSI": .int16(d.rssi)])
        } else {
            try? await exportDevice(address, gen)
        }
    }

    // MARK: Device objects

    private func deviceProperties(_ address: String) -> [String: DBusValue] {
        guard let m = meters[address] else { return [:] }
        let d = devices[address] ?? Device()
        var uuids = [GATTUUID.glucoseService.uuidString]
        if d.gattExported { uuids.append(GATTUUID.deviceInformationService.uuidString) }
        var props: [String: DBusValue] = [
            "Address": .string(address),
            "AddressType": .string(m.description.addressType),
            "Name": .string(m.description.name),
            "Alias": .string(m.description.name),
            "Paired": .bool(m.paired),
            "Bonded": .bool(m.paired),
            "Trusted": .bool(m.trusted),
            "Blocked": .bool(m.blocked),
            "LegacyPairing": .bool(false),
            "Connected": .bool(d.connected),
            "UUIDs": .strings(uuids),
            "Adapter": .objectPath(adapterPath),
            "ServicesResolved": .bool(d.servicesResolved),
            "AdvertisingFlags": .bytes([0x06]),
            "Appearance": .uint16(0x0D00),
            "Icon": .string("unknown"),
        ]
        if !discovery.isEmpty || d.connected { props["RSSI"] = .int16(d.rssi) }
        return props
    }

    private func exportDevice(_ address: String, _ gen: Int) async throws {
        guard let c = connection, gen == generation, adapterPresent else { return }
        let path = devicePath(address)
        try await c.export(path: path, interfaces: [
            DBusInterface("org.bluez.Device1", methods: [
                DBusMethod("Connect") { [weak self] call in
                    guard let self else { return [] }
                    try await self.connect(address, call, gen)
                    return []
                },
                DBusMethod("Disconnect") { [weak self] call in
                    guard let self else { return [] }
                    try await self.disconnect(address, call, gen)
                    return []
                },
                DBusMethod("Pair") { [weak self] call in
                    guard let self else { return [] }
                    try await self.pair(address, call, gen)
                    return []
                },
                DBusMethod("CancelPairing") { [weak self] call in
                    guard let self else { return [] }
                    try await self.cancelPairing(address, call, gen)
                    return []
                },
                DBusMethod("ConnectProfile", in: "s") { [weak self] call in
                    await self?.log(call)
                    throw bluezError("NotAvailable", "br-connection-profile-unavailable")
                },
                DBusMethod("DisconnectProfile", in: "s") { [weak self] call in
                    await self?.log(call)
                    throw bluezError("NotSupported", "Operation is not supported")
                },
            ], properties: deviceProperties(address), writableProperties: ["Trusted", "Alias", "Blocked"],
            signals: ["Disconnected": "ss"],
            setter: { [weak self] name, value, call in
                guard let self else { return }
                await self.setDeviceProperty(address, name, value, call)
            }),
        ])
        devices[address, default: Device()].exported = true
    }

    private func setDeviceProperty(_ address: String, _ name: String, _ value: DBusValue, _ call: DBusMethodCall) async {
        log(call, detail: name)
        switch name {
        case "Trusted": meters[address]?.trusted = value.bool ?? false
        case "Blocked": meters[address]?.blocked = value.bool ?? false
        default: break
        }
        saveState()
    }

    private func unexportDevice(_ address: String) async {
        guard let c = connection, let m = meters[address] else { return }
        if devices[address]?.gattExported == true {
            for s in m.layout.services.reversed() {
                for ch in s.characteristics.reversed() {
                    if let dp = descPath(address, s, ch) { await c.unexport(path: dp) }
                    let cp = charPath(address, s, ch)
                    await c.unexport(path: cp)
                    notifySessions.removeValue(forKey: cp)
                }
                await c.unexport(path: servicePath(address, s))
            }
        }
        await c.unexport(path: devicePath(address))
        devices[address]?.exported = false
        devices[address]?.gattExported = false
    }

    private func setDevice(_ address: String, _ changes: [String: DBusValue]) async {
        guard let c = connection, devices[address]?.exported == true else { return }
        await c.setProperties(path: devicePath(address), interface: "org.bluez.Device1", changes)
    }

    // MARK: GATT profile (auto-connect)

    /// `GattManager1.RegisterApplication`: accepted when the application holds a `GattProfile1` whose
    /// UUIDs include the Glucose Service (as bluetoothd then adds bonded devices offering it to its
    /// auto-connect list); GATT server applications are still refused (the stand-in plays meters only).
    private func registerApplication(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        let sender = call.sender
        guard let root = call.arguments.first?.objectPath, let c = connection else {
            throw bluezError("InvalidArguments", "Invalid arguments in method call")
        }
        guard !(profiles[sender]?.contains(root) ?? false) else { throw bluezError("AlreadyExists", "Already Exists") }
        let reply = try await c.call(destination: sender, path: root, interface: "org.freedesktop.DBus.ObjectManager",
                                     member: "GetManagedObjects", timeout: .seconds(5))
        let objects = reply.first?.managedObjects ?? [:]
        let glucose = objects.values.contains { interfaces in
            (interfaces["org.bluez.GattProfile1"]?["UUIDs"]?.stringArray ?? []).map { $0.lowercased() }
                .contains(GATTUUID.glucoseService.uuidString)
        }
        guard glucose else {
            throw bluezError("NotSupported", "The stand-in plays meters only; use simulate-meter --bluez on BlueZ")
        }
        profiles[sender, default: []].insert(root)
        await scanTick(generation: gen)
    }

    private func unregisterApplication(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        let sender = call.sender
        guard let root = call.arguments.first?.objectPath, profiles[sender]?.remove(root) != nil else { throw bluezError("DoesNotExist", "Does Not Exist") }
        if profiles[sender]?.isEmpty == true { profiles.removeValue(forKey: sender) }
    }

    /// bluetoothd connecting a bonded meter by itself (passive scan and accept list): no `Connect` call.
    private func autoConnect(_ address: String, _ gen: Int) {
        autoConnecting.insert(address)
        Task { [weak self] in
            guard let self else { return }
            do {
                try await self.establishLink(address, gen)
                await self.autoConnected(address, gen)
            } catch {
                await self.autoConnectEnded(address)
            }
        }
    }

    private func autoConnected(_ address: String, _ gen: Int) {
        autoConnecting.remove(address)
        devices[address]?.temporary = false
        scheduleServiceResolution(address, gen)
    }

    private func autoConnectEnded(_ address: String) {
        autoConnecting.remove(address)
    }

    // MARK: Connect and disconnect

    private func connect(_ address: String, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard let d = devices[address] else { throw DBusError(.unknownObject, "Device is gone") }
        guard !d.connected else { throw bluezError("AlreadyConnected", "Already Connected") }
        guard d.connectTask == nil, d.pairTask == nil else { throw bluezError("InProgress", "In Progress") }
        devices[address]?.temporary = false
        var early = false
        if var script = connectFailures[address], !script.isEmpty {
            let failure = script.removeFirst()
            connectFailures[address] = script
            logger.info("scripted Connect outcome for \(address): \(failure.rawValue)")
            switch failure {
            case .abortByLocal:
                await setDevice(address, ["Connected": .bool(true)])
                try? await Task.sleep(for: .milliseconds(20))
                await setDevice(address, ["Connected": .bool(false)])
                throw bluezError("Failed", "le-connection-abort-by-local")
            case .canceled:
                throw bluezError("Failed", "br-connection-canceled")
            case .inProgress:
                throw bluezError("InProgress", "In Progress")
            case .hang:
                try? await Task.sleep(for: .seconds(3600))
                throw bluezError("Failed", "le-connection-abort-by-local")
            case .resolvedBeforeExport:
                early = true
            }
        }
        try await establishLink(address, gen)
        // The reply goes out when this returns; services resolve just after it, as in bluetoothd.
        scheduleServiceResolution(address, gen, resolvedBeforeExport: early)
    }

    /// Scripts the outcomes of the next `Connect` calls to a meter.
    public func failConnect(_ address: String, _ outcomes: [ConnectFailure]) throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        connectFailures[address, default: []] += outcomes
    }

    /// A link that already exists when a client starts (bluez #89): the device is connected with services
    /// resolved, without any client having called Connect.
    public func staleConnect(_ address: String) async throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        let gen = generation
        if devices[address]?.exported != true {
            var d = devices[address] ?? Device()
            d.temporary = false
            devices[address] = d
            try await exportDevice(address, gen)
        }
        guard devices[address]?.connected != true else { return }
        try await establishLink(address, gen)
        await resolveServices(address, gen)
    }

    /// rfkill: a blocked adapter is powered off with PowerState "off-blocked" and refuses Powered=true.
    public func setRfkill(blocked: Bool) async {
        guard blocked != rfkillBlocked else { return }
        rfkillBlocked = blocked
        powerChanges += 1
        if blocked {
            for (address, d) in devices where d.connected { await disconnectLink(address, reason: "org.bluez.Reason.Local") }
            if !discovery.isEmpty {
                discovery = [:]
                await setAdapter(["Discovering": .bool(false)])
            }
            powered = false
            await setAdapter(["Powered": .bool(false), "PowerState": .string("off-blocked")])
        } else {
            await setAdapter(["PowerState": .string("off")])
        }
    }

    /// Waits for the meter to be connectable and brings the link up (Connected=true).
    private func establishLink(_ address: String, _ gen: Int) async throws {
        guard let m = meters[address] else { throw DBusError(.unknownObject, "Device is gone") }
        let peripheral = m.peripheral
        let clock = options.clock
        let timeout = options.connectTimeout
        let task = Task {
            var waited = 0.0
            while !(await peripheral.isAdvertising) {
                guard waited < timeout else { throw bluezError("Failed", "le-connection-abort-by-local") }
                try await clock.sleep(seconds: 0.1)
                waited += 0.1
            }
        }
        devices[address]?.connectTask = task
        do {
            try await task.value
        } catch is CancellationError {
            devices[address]?.connectTask = nil
            throw bluezError("Failed", "br-connection-canceled")
        } catch {
            devices[address]?.connectTask = nil
            throw error
        }
        devices[address]?.connectTask = nil
        try checkRun(gen)
        guard adapterPresent, devices[address] != nil else { throw bluezError("Failed", "br-connection-canceled") }
        devices[address]?.connected = true
        await peripheral.linkUp()
        // Notify sessions survive a disconnect: the client configuration is written again on connect.
        for s in m.layout.services {
            for c in s.characteristics where !(notifySessions[charPath(address, s, c)] ?? []).isEmpty {
                await peripheral.setSubscribed(c.uuid, true)
            }
        }
        if quirks[address]?.contains(.silentConnected) == true, let c = connection, devices[address]?.exported == true {
            logger.info("quirk silent-connected: \(address) is connected without a Connected signal")
            await c.setProperties(path: devicePath(address), interface: "org.bluez.Device1", ["Connected": .bool(true)], emit: false)
        } else {
            await setDevice(address, ["Connected": .bool(true)])
        }
    }

    private func scheduleServiceResolution(_ address: String, _ gen: Int, resolvedBeforeExport: Bool = false) {
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(40))
            await self?.resolveServices(address, gen, resolvedBeforeExport: resolvedBeforeExport)
        }
    }

    private func resolveServices(_ address: String, _ gen: Int, resolvedBeforeExport: Bool = false) async {
        guard gen == generation, devices[address]?.connected == true, devices[address]?.servicesResolved == false else { return }
        if resolvedBeforeExport {
            devices[address]?.servicesResolved = true
            await setDevice(address, ["ServicesResolved": .bool(true)])
            try? await Task.sleep(for: .milliseconds(200))
            guard gen == generation, devices[address]?.connected == true else { return }
            if devices[address]?.gattExported != true { await exportGATT(address, gen) }
            return
        }
        if devices[address]?.gattExported != true {
            await exportGATT(address, gen)
            await setDevice(address, ["UUIDs": .strings([GATTUUID.glucoseService.uuidString,
                                                         GATTUUID.deviceInformationService.uuidString])])
        }
        devices[address]?.servicesResolved = true
        await setDevice(address, ["ServicesResolved": .bool(true)])
    }

    private func disconnect(_ address: String, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        if let t = devices[address]?.connectTask {
            t.cancel()
            return
        }
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        await disconnectLink(address, reason: "org.bluez.Reason.Local")
    }

    /// Takes the link down with BlueZ's signal order: ServicesResolved=false, Connected=false, then
    /// `Disconnected(reason, message)` (BlueZ 5.83+).
    func disconnectLink(_ address: String, reason: String) async {
        guard var d = devices[address], d.connected else { return }
        d.pairTask?.cancel()
        d.connected = false
        d.lastSeen = .now
        d.temporary = !(meters[address]?.paired ?? false)
        let wasResolved = d.servicesResolved
        d.servicesResolved = false
        devices[address] = d
        heldValues[address] = nil
        for path in acquired.keys where path.hasPrefix(devicePath(address) + "/") { await releaseAcquired(path) }
        if let m = meters[address] { await m.peripheral.linkDown() }
        if wasResolved { await setDevice(address, ["ServicesResolved": .bool(false)]) }
        await setDevice(address, ["Connected": .bool(false)])
        if let c = connection, d.exported {
            let message = reason.hasSuffix("Remote") ? "Connection terminated by remote user" : "Connection terminated by local host"
            try? await c.emitSignal(path: devicePath(address), interface: "org.bluez.Device1", member: "Disconnected",
                                    arguments: [.string(reason), .string(message)])
        }
    }

    // MARK: Pairing

    private func pair(_ address: String, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard let m = meters[address], devices[address] != nil else { throw DBusError(.unknownObject, "Device is gone") }
        guard !m.paired else { throw bluezError("AlreadyExists", "Already Paired") }
        guard devices[address]?.pairTask == nil, devices[address]?.connectTask == nil else {
            throw bluezError("InProgress", "In Progress")
        }
        devices[address]?.temporary = false
        let agent = agents[call.sender] ?? defaultAgentSender.flatMap { agents[$0] }
        if devices[address]?.connected != true {
            try await establishLink(address, gen)
        }
        guard let agent, ["KeyboardOnly", "KeyboardDisplay"].contains(agent.capability) else {
            // No agent able to type the passkey: SMP fails and the meter drops the link.
            await disconnectLink(address, reason: "org.bluez.Reason.Authentication")
            throw bluezError("AuthenticationFailed", "Authentication Failed")
        }
        guard let c = connection else { throw bluezError("Failed", "Not connected") }
        let devPath = devicePath(address)
        let stalls = quirks[address]?.contains(.pairingStalls) == true
        let task = Task { () throws -> Void in
            let reply: [DBusValue]
            do {
                reply = try await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                         member: "RequestPasskey", arguments: [.objectPath(devPath)], timeout: .seconds(60))
            } catch let error as DBusError {
                if error.isTimeout {
                    _ = try? await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                          member: "Cancel", timeout: .seconds(5))
                    throw bluezError("AuthenticationTimeout", "Authentication Timeout")
                }
                if error.name == .cancelled { throw CancellationError() }
                switch error.name.rawValue {
                case "org.bluez.Error.Canceled": throw bluezError("AuthenticationCanceled", "Authentication Canceled")
                case "org.bluez.Error.Rejected": throw bluezError("AuthenticationRejected", "Authentication Rejected")
                default: throw bluezError("AuthenticationFailed", "Authentication Failed")
                }
            } catch {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
            guard let first = reply.first, let passkey = first.uint32 else {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
            if stalls { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
            guard passkey == m.description.passkey else {
                throw bluezError("AuthenticationFailed", "Authentication Failed")
            }
        }
        devices[address]?.pairTask = task
        devices[address]?.pairAgent = (agent.sender, agent.path)
        devices[address]?.pairCaller = call.sender
        do {
            try await task.value
        } catch {
            devices[address]?.pairTask = nil
            devices[address]?.pairAgent = nil
            await disconnectLink(address, reason: "org.bluez.Reason.Authentication")
            if error is CancellationError { throw bluezError("AuthenticationCanceled", "Authentication Canceled") }
            throw error
        }
        devices[address]?.pairTask = nil
        devices[address]?.pairAgent = nil
        try checkRun(gen)
        meters[address]?.paired = true
        saveState()
        await setDevice(address, ["Paired": .bool(true), "Bonded": .bool(true)])
        // Pair also resolves services before it returns.
        await resolveServices(address, gen)
    }

    private func cancelPairing(_ address: String, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard let task = devices[address]?.pairTask else { throw bluezError("DoesNotExist", "Does Not Exist") }
        if let agent = devices[address]?.pairAgent, let c = connection {
            _ = try? await c.call(destination: agent.sender, path: agent.path, interface: "org.bluez.Agent1",
                                  member: "Cancel", timeout: .seconds(5))
        }
        task.cancel()
    }

    // MARK: RemoveDevice

    private func removeDevice(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard let path = call.arguments.first?.objectPath else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        guard let address = address(ofDevicePath: path), devices[address]?.exported == true else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        devices[address]?.pairTask?.cancel()
        devices[address]?.connectTask?.cancel()
        await disconnectLink(address, reason: "org.bluez.Reason.Local")
        await unexportDevice(address)
        devices.removeValue(forKey: address)
        meters[address]?.paired = false
        meters[address]?.trusted = false
        saveState()
    }

    // MARK: GATT objects

    private func exportGATT(_ address: String, _ gen: Int) async {
        guard let c = connection, let m = meters[address], gen == generation else { return }
        let dev = devicePath(address)
        for s in m.layout.services {
            let sp = servicePath(address, s)
            try? await c.export(path: sp, interfaces: [
                DBusInterface("org.bluez.GattService1", properties: [
                    "UUID": .string(s.uuid.uuidString), "Device": .objectPath(dev), "Primary": .bool(true),
                    "Includes": .objectPaths([]), "Handle": .uint16(s.handle),
                ]),
            ])
            for ch in s.characteristics {
                let cp = charPath(address, s, ch)
                var props: [String: DBusValue] = [
                    "UUID": .string(ch.uuid.uuidString), "Service": .objectPath(sp), "Value": .bytes([]),
                    "Flags": .strings(ch.flags), "Handle": .uint16(ch.valueHandle), "MTU": .uint16(23),
                ]
                if ch.notifies { props["Notifying"] = .bool(!(notifySessions[cp] ?? []).isEmpty) }
                if options.offerAcquireNotify, ch.flags.contains("notify") { props["NotifyAcquired"] = .bool(false) }
                let uuid = ch.uuid
                try? await c.export(path: cp, interfaces: [
                    DBusInterface("org.bluez.GattCharacteristic1", methods: [
                        DBusMethod("ReadValue", in: "a{sv}", out: "ay") { [weak self] call in
                            guard let self else { return [] }
                            return [.bytes(try await self.readValue(address, uuid, cp, call, gen))]
                        },
                        DBusMethod("WriteValue", in: "aya{sv}") { [weak self] call in
                            guard let self else { return [] }
                            try await self.writeValue(address, uuid, call, gen)
                            return []
                        },
                        DBusMethod("StartNotify") { [weak self] call in
                            guard let self else { return [] }
                            try await self.startNotify(address, uuid, cp, call, gen)
                            return []
                        },
                        DBusMethod("AcquireNotify", in: "a{sv}", out: "hq") { [weak self] call in
                            guard let self else { return [] }
                            return try await self.acquireNotify(address, uuid, cp, call, gen)
                        },
                        DBusMethod("StopNotify") { [weak self] call in
                            guard let self else { return [] }
                            try await self.stopNotify(address, uuid, cp, call, gen)
                            return []
                        },
                    ], properties: props),
                ])
                if let dp = descPath(address, s, ch), let cccd = ch.cccdHandle {
                    try? await c.export(path: dp, interfaces: [
                        DBusInterface("org.bluez.GattDescriptor1", methods: [
                            DBusMethod("ReadValue", in: "a{sv}", out: "ay") { [weak self] call in
                                guard let self else { return [] }
                                return [.bytes(try await self.readCCCD(address, ch, cp, call, gen))]
                            },
                            DBusMethod("WriteValue", in: "aya{sv}") { [weak self] call in
                                await self?.log(call)
                                throw bluezError("NotPermitted", "Write not permitted")
                            },
                        ], properties: [
                            "UUID": .string("00002902-0000-1000-8000-00805f9b34fb"), "Characteristic": .objectPath(cp),
                            "Value": .bytes([]), "Flags": .strings(["read", "write"]), "Handle": .uint16(cccd),
                        ]),
                    ])
                }
            }
        }
        devices[address]?.gattExported = true
    }

    private func checkAccess(_ address: String, _ uuid: GATTUUID, _ gen: Int) throws {
        try checkRun(gen)
        guard devices[address]?.connected == true else { throw bluezError("Failed", "Not connected") }
        guard let m = meters[address] else { throw DBusError(.unknownObject, "Device is gone") }
        if m.layout.characteristic(uuid)?.needsBonding == true, !m.paired {
            throw bluezError("NotPermitted", "Not paired")
        }
    }

    private func readValue(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                           _ gen: Int) async throws -> [UInt8] {
        log(call)
        try checkAccess(address, uuid, gen)
        guard let m = meters[address], let value = await m.peripheral.read(uuid) else {
            throw bluezError("NotPermitted", "Read not permitted")
        }
        // A read updates the cached Value, which emits PropertiesChanged like a notification would.
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Value": .bytes(value)])
        return value
    }

    private func readCCCD(_ address: String, _ ch: GATTLayout.Characteristic, _ charPath: String,
                          _ call: DBusMethodCall, _ gen: Int) async throws -> [UInt8] {
        log(call)
        try checkAccess(address, ch.uuid, gen)
        let on = !(notifySessions[charPath] ?? []).isEmpty
        let bits: UInt8 = on ? (ch.flags.contains("notify") ? 0x01 : 0x02) : 0
        return [bits, 0]
    }

    private func writeValue(_ address: String, _ uuid: GATTUUID, _ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkAccess(address, uuid, gen)
        guard uuid == .recordAccessControlPoint, let m = meters[address] else {
            throw bluezError("NotPermitted", "Write not permitted")
        }
        guard let bytes = call.arguments.first?.bytes else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        if let type = call.arguments.dropFirst().first?.vardict?["type"]?.string, type == "command" {
            // RACP has no write-without-response property.
            throw bluezError("NotSupported", "Operation is not supported")
        }
        do {
            try await m.peripheral.writeRACP(bytes)
        } catch {
            throw bluezError("Failed", "Operation failed with ATT error: " + hexByte(error.code))
        }
        // The write response reaches the client before the first notification of the procedure.
        let peripheral = m.peripheral
        Task {
            try? await Task.sleep(for: .milliseconds(20))
            await peripheral.runProcedure()
        }
    }

    private func startNotify(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                             _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        try checkAccess(address, uuid, gen)
        guard acquired[path] == nil else { throw bluezError("NotPermitted", "Notify acquired") }
        var sessions = notifySessions[path] ?? []
        guard !sessions.contains(call.sender) else { return }
        let first = sessions.isEmpty
        sessions.insert(call.sender)
        notifySessions[path] = sessions
        if first {
            await meters[address]?.peripheral.setSubscribed(uuid, true)
            await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Notifying": .bool(true)])
        }
    }

    private func stopNotify(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                            _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard var sessions = notifySessions[path], sessions.remove(call.sender) != nil else {
            throw bluezError("Failed", "No notify session started")
        }
        notifySessions[path] = sessions
        if sessions.isEmpty { await endNotify(address, uuid, path) }
    }

    private func endNotify(_ address: String, _ uuid: GATTUUID, _ path: String) async {
        notifySessions.removeValue(forKey: path)
        await meters[address]?.peripheral.setSubscribed(uuid, false)
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Notifying": .bool(false)])
    }

    private func acquireNotify(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                               _ gen: Int) async throws -> [DBusValue] {
        log(call)
        try checkRun(gen)
        guard options.offerAcquireNotify, meters[address]?.layout.characteristic(uuid)?.flags.contains("notify") == true else {
            throw bluezError("NotSupported", "Operation is not supported")
        }
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        try checkAccess(address, uuid, gen)
        guard acquired[path] == nil else { throw bluezError("NotPermitted", "Notify acquired") }
        guard (notifySessions[path] ?? []).isEmpty else { throw bluezError("InProgress", "In Progress") }
        let session = try AcquiredNotify.open { [weak self] in
            Task { await self?.releaseAcquired(path) }
        }
        acquired[path] = session
        await meters[address]?.peripheral.setSubscribed(uuid, true)
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1",
                                        ["NotifyAcquired": .bool(true), "Notifying": .bool(true)])
        return [.unixFD(session.peerDescriptor), .uint16(23)]
    }

    /// The client closed its end, the link dropped, or bluetoothd went away.
    private func releaseAcquired(_ path: String) async {
        guard let session = acquired.removeValue(forKey: path) else { return }
        session.close()
        if let (address, _, ch) = lookupCharacteristic(path) {
            await meters[address]?.peripheral.setSubscribed(ch.uuid, false)
            await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1",
                                            ["NotifyAcquired": .bool(false), "Notifying": .bool(false)])
        }
    }

    // MARK: Meter events

    private func handle(_ event: PeripheralEvent, from address: String) async {
        guard meters[address] != nil else { return }
        switch event {
        case .value(let uuid, let bytes):
            guard devices[address]?.connected == true else { return }
            if quirks[address]?.contains(.responseBeforeRecords) == true {
                guard uuid == .recordAccessControlPoint else {
                    heldValues[address, default: []].append((uuid, bytes))
                    return
                }
                await deliver(address, uuid, bytes)
                let held = heldValues.removeValue(forKey: address) ?? []
                guard !held.isEmpty else { return }
                let gen = generation
                Task { [weak self] in
                    try? await Task.sleep(for: Self.lateRecordsDelay)
                    await self?.deliverLate(address, held, gen)
                }
                return
            }
            await deliver(address, uuid, bytes)
        case .dropLink:
            logger.info("meter \(address) drops the link")
            await disconnectLink(address, reason: "org.bluez.Reason.Remote")
        case .advertising(let on):
            logger.debug("meter \(address) advertising \(on ? "on" : "off")")
            if on { await scanTick(generation: generation) }
        case .recordAdded(let seq):
            logger.info("meter \(address) stored record \(seq)")
        }
    }

    private func deliverLate(_ address: String, _ values: [(GATTUUID, [UInt8])], _ gen: Int) async {
        guard gen == generation else { return }
        for (uuid, bytes) in values {
            guard devices[address]?.connected == true else { return }
            await deliver(address, uuid, bytes)
        }
    }

    /// Sends one notification or indication as bluetoothd shows it: `Value` changing on the characteristic
    /// (or through the socket of an `AcquireNotify`).
    private func deliver(_ address: String, _ uuid: GATTUUID, _ bytes: [UInt8]) async {
        guard let m = meters[address], devices[address]?.connected == true, let c = connection else { return }
        for s in m.layout.services {
            for ch in s.characteristics where ch.uuid == uuid {
                let path = charPath(address, s, ch)
                if let session = acquired[path] {
                    // An acquired notification goes through the socket only; Value is not updated.
                    if !session.send(bytes) { await releaseAcquired(path) }
                    continue
                }
                await c.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Value": .bytes(bytes)])
            }
        }
    }

    // MARK: Agents

    private func agentManagerInterface(_ gen: Int) -> DBusInterface {
        DBusInterface("org.bluez.AgentManager1", methods: [
            DBusMethod("RegisterAgent", in: "os") { [weak self] call in
                guard let self else { return [] }
                try await self.registerAgent(call, gen)
                return []
            },
            DBusMethod("UnregisterAgent", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.unregisterAgent(call, gen)
                return []
            },
            DBusMethod("RequestDefaultAgent", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.requestDefaultAgent(call, gen)
                return []
            },
        ])
    }

    private func profileManagerInterface() -> DBusInterface {
        DBusInterface("org.bluez.ProfileManager1", methods: [
            DBusMethod("RegisterProfile", in: "osa{sv}") { _ in throw bluezError("NotSupported", "Operation is not supported") },
            DBusMethod("UnregisterProfile", in: "o") { _ in throw bluezError("DoesNotExist", "Does Not Exist") },
        ])
    }

    private func registerAgent(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard call.arguments.count == 2, let path = call.arguments[0].objectPath, let cap = call.arguments[1].string else {
            throw bluezError("InvalidArguments", "Invalid arguments in method call")
        }
        let capability = cap.isEmpty ? "KeyboardDisplay" : cap
        guard ["DisplayOnly", "DisplayYesNo", "KeyboardOnly", "NoInputNoOutput", "KeyboardDisplay"].contains(capability) else {
            throw bluezError("InvalidArguments", "Invalid arguments in method call")
        }
        guard agents[call.sender] == nil else { throw bluezError("AlreadyExists", "Already Exists") }
        agents[call.sender] = Agent(sender: call.sender, path: path, capability: capability)
    }

    private func unregisterAgent(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard let path = call.arguments.first?.objectPath, let a = agents[call.sender], a.path == path else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        agents.removeValue(forKey: call.sender)
        if defaultAgentSender == call.sender { defaultAgentSender = nil }
    }

    private func requestDefaultAgent(_ call: DBusMethodCall, _ gen: Int) async throws {
        log(call)
        try checkRun(gen)
        guard let path = call.arguments.first?.objectPath, let a = agents[call.sender], a.path == path else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        defaultAgentSender = call.sender
    }

    /// A client left the bus: its agent, discovery session and notify sessions end with it, and a
    /// pairing it started is cancelled.
    private func senderLeft(_ sender: String, generation gen: Int) async {
        guard gen == generation else { return }
        agents.removeValue(forKey: sender)
        profiles.removeValue(forKey: sender)
        if defaultAgentSender == sender { defaultAgentSender = nil }
        filters.removeValue(forKey: sender)
        if discovery.removeValue(forKey: sender) != nil, discovery.isEmpty {
            await setAdapter(["Discovering": .bool(false)])
        }
        for (path, var sessions) in notifySessions where sessions.contains(sender) {
            sessions.remove(sender)
            if sessions.isEmpty, let (address, _, ch) = lookupCharacteristic(path) {
                await endNotify(address, ch.uuid, path)
            } else {
                notifySessions[path] = sessions
            }
        }
        for d in devices.values where d.pairAgent?.sender == sender || d.pairCaller == sender {
            d.pairTask?.cancel()
        }
    }

    // MARK: Control

    /// Replaces the quirks played for a meter.
    public func setQuirks(_ address: String, _ set: Set<Quirk>) throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        quirks[address] = set
        if !set.contains(.responseBeforeRecords) { heldValues[address] = nil }
    }

    /// bluetoothd hung (as after a kernel BUG in its socket release): it keeps `org.bluez` but answers no
    /// call for `seconds` of real time; 0 means for good (the process must then be killed).
    public func stopAnswering(seconds: Double) async {
        guard let c = connection else { return }
        logger.notice("no longer answering calls" + (seconds > 0 ? " for \(seconds) s" : ""))
        await c.setAnsweringCalls(false)
        guard seconds > 0 else { return }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(Int64(min(seconds, 86_400) * 1000)))
            await self?.answerAgain(c)
        }
    }

    private func answerAgain(_ c: DBusConnection) async {
        guard connection === c else { return }
        logger.notice("answering calls again")
        await c.setAnsweringCalls(true)
    }

    /// Scripted failure: the meter drops the link now.
    public func dropLink(_ address: String) async throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        await disconnectLink(address, reason: "org.bluez.Reason.Remote")
    }

    func meterPeripheral(_ address: String) throws -> MeterPeripheral {
        guard let m = meters[address] else { throw DBusError(.invalidArgs, "no meter \(address)") }
        return m.peripheral
    }

    var meterAddresses: [String] { order }

    func setFaults(_ address: String, _ faults: MeterFaults) async throws {
        try await meterPeripheral(address).setFaults(faults)
        meters[address]?.description.faults = faults
    }

    var calls: [String] { callLog }
    func clearCalls() { callLog.removeAll() }

    // MARK: Helpers

    private func checkRun(_ gen: Int) throws {
        guard gen == generation else { throw DBusError(.unknownObject, "bluetoothd restarted") }
    }

    private func log(_ call: DBusMethodCall, detail: String? = nil) {
        var entry = "\(call.interface ?? "").\(call.member) \(call.path)"
        if let detail { entry += " " + detail }
        callLog.append(entry)
        if callLog.count > 10_000 { callLog.removeFirst(callLog.count - 10_000) }
        logger.debug("call \(entry) from \(call.sender)")
    }

    private func loadState() {
        guard let path = options.statePath, let bonded = StandInState.load(path: path) else { return }
        for a in bonded where meters[a] != nil {
            meters[a]?.paired = true
            meters[a]?.trusted = true
        }
    }

    private func saveState() {
        guard let path = options.statePath else { return }
        let bonded = order.filter { meters[$0]?.paired == true }
        do { try StandInState.save(bonded: bonded, path: path) } catch {
            logger.warning("cannot write state file: \(error)")
        }
    }
}

func hexByte(_ v: UInt8) -> String {
    let h = String(v, radix: 16)
    return "0x" + (h.count < 2 ? "0" : "") + h
}
