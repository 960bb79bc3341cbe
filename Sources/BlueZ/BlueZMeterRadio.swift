import DBusKit
import GatewayCore
import Support
import Synchronization

/// The gateway's radio over bluetoothd (the system bus, or `DBUS_SYSTEM_BUS_ADDRESS` when set). For the
/// daemon: events from the BlueZ client's mirror (advertisements of the Glucose Service, devices
/// connecting, adapters coming and going, bluetoothd restarting), discovery or a GATT profile to find
/// meters, and meter links. For the commands (`BlueZMeterRadio+Pairing.swift`): scan, pair, forget.
public final class BlueZMeterRadio: MeterRadio {
    let client: BlueZClient
    let logger: Logger
    /// The adapter the commands use (scan, wait, pair, forget); nil: the first powered one.
    let adapterName: String?
    static let appRoot = "/org/glucosegateway/app"
    static let profilePath = appRoot + "/glucose"

    /// Whose discovery `close` stops.
    enum DiscoveryToStop {
        case none
        case adapter(String?)
    }

    struct State {
        var profileAdapter: String?
        var discovery: DiscoveryToStop
        var exported = false
        var tasks: [Task<Void, Never>] = []
    }
    let state: Mutex<State>

    init(client: BlueZClient, logger: Logger, adapterName: String?, discovery: DiscoveryToStop) {
        self.client = client
        self.logger = logger
        self.adapterName = adapterName
        self.state = Mutex(State(discovery: discovery))
    }

    /// Connects to the system bus for the daemon. bluetoothd need not be running: the client notices
    /// when it starts.
    public static func open(logger: Logger) async throws(GatewayFailure) -> BlueZMeterRadio {
        do {
            let client = try await BlueZClient.connect(logger: logger.with(label: "bluez"))
            return BlueZMeterRadio(client: client, logger: logger, adapterName: nil, discovery: .none)
        } catch {
            throw GatewayFailure(.unavailable, "cannot reach the system bus: \(error)")
        }
    }

    public func events() async -> AsyncStream<RadioEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: RadioEvent.self, bufferingPolicy: .unbounded)
        let lifecycle = await client.bluetoothdEvents()
        let devices = await client.discoveredDevices(matching: [.glucoseService])
        let client = self.client
        let signals = try? await client.connection.subscribe([
            MatchRule(sender: BlueZNames.service, interface: DBusNames.properties, member: "PropertiesChanged", pathNamespace: BlueZNames.root),
            MatchRule(sender: BlueZNames.service, interface: DBusNames.objectManager),
        ])
        var tasks: [Task<Void, Never>] = []
        tasks.append(Task {
            for await event in lifecycle {
                switch event {
                case .started: continuation.yield(.bluetoothdStarted)
                case .stopped: continuation.yield(.bluetoothdStopped)
                }
            }
            // The client's event stream ends only when the bus is lost or the client closed.
            continuation.finish()
        })
        tasks.append(Task {
            for await device in devices {
                // A device known from storage but not heard now has no RSSI; only live ones count.
                guard device.heard || device.connected else { continue }
                continuation.yield(.meterSeen(address: device.address, connected: device.connected))
            }
        })
        if let signals {
            tasks.append(Task {
                for await message in signals {
                    if let event = await Self.event(from: message, client: client) { continuation.yield(event) }
                }
            })
        }
        let started = tasks
        state.withLock { $0.tasks += started }
        continuation.onTermination = { _ in for t in started { t.cancel() } }
        return stream
    }

    /// Device connections (bluetoothd connecting a bonded meter through the profile) and adapter changes.
    static func event(from message: DBusMessage, client: BlueZClient) async -> RadioEvent? {
        switch message.member {
        case "PropertiesChanged":
            guard message.body.count >= 2, let interface = message.body[0].string, let changes = message.body[1].vardict,
                  let path = message.path else { return nil }
            if interface == BlueZNames.adapter, changes["Powered"] != nil || changes["PowerState"] != nil {
                if let powered = changes["Powered"]?.bool {
                    await mirrorCaughtUp(client) { adapters in adapters.contains { $0.path == path && $0.powered == powered } }
                }
                return .adaptersChanged
            }
            // ServicesResolved too: BlueZ 5.66 can bring a link up without ever signalling Connected=true.
            if interface == BlueZNames.device, changes["Connected"]?.bool == true || changes["ServicesResolved"]?.bool == true {
                let known = await client.devices().first { $0.path == path }
                guard let address = known?.address ?? Self.address(fromPath: path) else { return nil }
                if let known, !known.uuids.isEmpty, !known.advertises(any: [.glucoseService]) { return nil }
                return .meterSeen(address: address, connected: true)
            }
            return nil
        case "InterfacesAdded":
            guard message.body.count == 2, let path = message.body[0].objectPath, let added = message.body[1].interfaces,
                  added[BlueZNames.adapter] != nil else { return nil }
            // The client's mirror applies the same signal on its own task: look once it has.
            await mirrorCaughtUp(client) { adapters in adapters.contains { $0.path == path } }
            return .adaptersChanged
        case "InterfacesRemoved":
            guard message.body.count == 2, let path = message.body[0].objectPath, let names = message.body[1].stringArray,
                  names.contains(BlueZNames.adapter) else { return nil }
            await mirrorCaughtUp(client) { adapters in !adapters.contains { $0.path == path } }
            return .adaptersChanged
        default:
            return nil
        }
    }

    /// Waits (briefly, only after a signal) until the BlueZ client's mirror shows what the signal said.
    static func mirrorCaughtUp(_ client: BlueZClient, _ check: @Sendable ([AdapterInfo]) -> Bool) async {
        for _ in 0..<100 {
            if check(await client.adapters()) { return }
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF` -> `AA:BB:CC:DD:EE:FF`.
    static func address(fromPath path: String) -> String? {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return nil }
        let parts = last.dropFirst(4).split(separator: "_")
        guard parts.count == 6, parts.allSatisfy({ $0.count == 2 && UInt8($0, radix: 16) != nil }) else { return nil }
        return parts.map { $0.uppercased() }.joined(separator: ":")
    }

    public func state(adapter: String?) async -> RadioState {
        guard await client.owner != nil else { return .absent }
        let adapters = await client.adapters()
        let candidates = adapter.map { name in adapters.filter { $0.name == name || $0.address == name || $0.path == name } } ?? adapters
        guard let chosen = candidates.first(where: \.powered) ?? candidates.first else {
            return RadioState(bluetoothdRunning: true, adapter: nil, adapterPowered: false)
        }
        return RadioState(bluetoothdRunning: true, adapter: chosen.name, adapterPowered: chosen.powered,
                          powerState: chosen.powerState, discovering: chosen.discovering)
    }

    public func powerOn(adapter: String?) async {
        guard let info = try? await client.adapter(named: adapter) else { return }
        do {
            try await client.setPowered(true, adapter: info)
        } catch {
            logger.warning("cannot power on \(info.name): \(error)")
        }
    }

    public func startWatching(adapter: String?, mode: ScanMode) async throws(MeterLinkError) -> ScanMode {
        guard let info = try? await client.adapter(named: adapter) else {
            throw MeterLinkError(.disconnected, "no adapter")
        }
        if mode == .profile {
            do {
                try await registerProfile(adapterPath: info.path)
                state.withLock { $0.profileAdapter = info.path }
                return .profile
            } catch {
                logger.notice("bluetoothd refused the GATT profile (\(error)); using discovery instead")
            }
        }
        do {
            try await client.startDiscovery(adapterName: info.name, uuids: [.glucoseService])
        } catch {
            throw error.meterLinkError
        }
        state.withLock { $0.discovery = .adapter(info.name) }
        return .discovery
    }

    /// `GattManager1.RegisterApplication` with one `GattProfile1` object for 0x1808: bluetoothd then
    /// connects bonded meters itself when they advertise (passive scan and accept list).
    private func registerProfile(adapterPath: String) async throws(BlueZError) {
        let connection = client.connection
        let needsExport = state.withLock { s -> Bool in
            defer { s.exported = true }
            return !s.exported
        }
        do {
            if needsExport {
                try await connection.exportObjectManager(at: Self.appRoot)
                try await connection.export(path: Self.profilePath, interfaces: [
                    DBusInterface(BlueZNames.gattProfile, methods: [
                        DBusMethod("Release") { _ in [] },
                    ], properties: ["UUIDs": .strings([GATTUUID.glucoseService.uuidString])]),
                ])
            }
            _ = try await connection.call(destination: BlueZNames.service, path: adapterPath, interface: BlueZNames.gattManager,
                                          member: "RegisterApplication", arguments: [.objectPath(Self.appRoot), .vardict([:])],
                                          timeout: .seconds(10))
        } catch where error.name.rawValue == BlueZErrorNames.alreadyExists {
            return
        } catch {
            throw BlueZError(error)
        }
    }

    public func connect(address: String, timeout: Duration) async throws(MeterLinkError) -> any MeterLink {
        try await client.connectMeter(address: address, timeout: timeout)
    }

    public func isConnected(address: String) async -> Bool {
        guard let device = await client.device(address: address) else { return false }
        return device.connected || device.servicesResolved
    }

    public func closeStale(addresses: [String]) async -> [String] {
        var closed: [String] = []
        for address in addresses {
            guard let device = await client.device(address: address), device.connected else { continue }
            do {
                _ = try await client.connection.call(destination: BlueZNames.service, path: device.path, interface: BlueZNames.device,
                                                     member: "Disconnect", timeout: .seconds(5))
                closed.append(address)
            } catch {
                logger.info("\(address): cannot close the connection left from before: \(error.message)")
            }
        }
        return closed
    }

    public func bluetoothdAnswers(timeout: Duration) async -> Bool {
        await client.bluetoothdAnswers(timeout: timeout)
    }

    public func close() async {
        let (tasks, profileAdapter, discovery) = state.withLock { s in
            defer { s.tasks.removeAll() }
            return (s.tasks, s.profileAdapter, s.discovery)
        }
        for t in tasks { t.cancel() }
        if let profileAdapter {
            _ = try? await client.connection.call(destination: BlueZNames.service, path: profileAdapter, interface: BlueZNames.gattManager,
                                                  member: "UnregisterApplication", arguments: [.objectPath(Self.appRoot)], timeout: .seconds(2))
        }
        if case let .adapter(name) = discovery { _ = try? await client.stopDiscovery(adapterName: name) }
        await client.close()
    }
}
