import DBusKit
import GatewayCore
import GlucoseProfile
import Support

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
    /// A value goes into the socket the moment the meter sends it, while signals go out through the bus
    /// later, as with bluetoothd.
    public var offerAcquireNotify = true
    /// Send `Device1.Disconnected(reason, message)` before `Connected=false`, as BlueZ 5.83+ does. BlueZ
    /// 5.66 (Debian 12) and 5.82 (Debian 13, Raspberry Pi OS trixie) have no such signal: their
    /// introspection lists none on Device1 (seen in the real-stack bed's bluez-objects.txt), so a link
    /// ends with `ServicesResolved=false` and `Connected=false` alone and the gateway has no reason to go by.
    public var disconnectedSignal = true
    /// Simulated seconds a connected device stays after `Adapter1.RemoveDevice` has replied, or nil to
    /// remove it before the reply (BlueZ 5.66). BlueZ 5.82 replies at once, disconnects, and removes the
    /// object, its bond and its key only when the link is down: until then the object still says
    /// `Paired=true` and a `Connect` still uses the old key (seen in the bond-loss scenario on trixie).
    public var removalAfterDisconnect: Double?
    /// BlueZ 5.82 after a link that ended in an authentication failure (the meter refused the stored
    /// key): bluetoothd still counts the device's GATT profiles as connected, so `Adapter1.RemoveDevice`
    /// takes its "connected" path: it replies at once (bluetoothd marks the device temporary), and the
    /// object with `Paired=true`, its bond and its key stay until the *next* link to it ends (seen in the
    /// bond-loss scenario on trixie: `Removing temporary device` only after the next `Connect` was
    /// refused). False removes such a device at once, as BlueZ 5.66 does.
    public var removalWaitsForNextLinkAfterAuthenticationFailure = false
    /// The adapter has no public address (some USB dongles; bluetoothd then uses a static random one):
    /// Linux 6.1 connects from the non-resolvable address of its last active scan when it connects while
    /// discovery runs, and a bonded meter, which does not know that address, refuses the key as if it had
    /// lost the bond (seen on the Bumble meter in the real-stack bed).
    public var adapterWithoutPublicAddress = false

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
/// unpaired devices) is lost with the bus name, as when bluetoothd restarts. Each run is a
/// ``BluetoothdRun``; work started in a run ends with it.
///
/// This file holds the state, the paths, the life cycle and the control methods; the D-Bus interfaces
/// are in `BlueZStandIn+Adapter`, `+Discovery`, `+Device`, `+Pairing`, `+GATT` and `+Agents`.
public actor BlueZStandIn {
    // MARK: Persistent state

    struct Meter {
        var description: MeterDescription
        let peripheral: MeterPeripheral
        let layout: GATTLayout
        var paired = false
        var trusted = false
        var blocked = false
        /// The meter forgot its bond (control method `ForgetBond`) while bluetoothd keeps its key, and
        /// how many connections it refused since (see `BlueZStandIn+Pairing`).
        var forgotBond = false
        var bondRefusals = 0
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
        /// The last link ended in an authentication failure and bluetoothd still counts the device's
        /// profiles as connected (`removalWaitsForNextLinkAfterAuthenticationFailure`).
        var profilesLeftConnected = false
        /// `RemoveDevice` was answered; the device goes when its next link ends.
        var removalPending = false
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
        /// bluetoothd finds the acquired socket of the Glucose Measurement full when the 5th and the 6th
        /// value of it come, and drops both (`notify_io_cb` in `src/gatt-client.c` only logs the failed
        /// send); after that the quirk is over.
        case fullSocket = "full-socket"
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
    var meters: [String: Meter] = [:]
    var order: [String] = []
    var adapterPresent = true
    var powered = true
    private var callLog: [String] = []
    /// Scripted outcomes of the next `Connect` calls per meter, consumed in order.
    var connectFailures: [String: [ConnectFailure]] = [:]
    var rfkillBlocked = false
    var quirks: [String: Set<Quirk>] = [:]
    /// A discovery the kernel still runs for a bluetoothd that died (`CrashBluetoothd`): until then every
    /// StartDiscovery gets mgmt Busy, which bluetoothd 5.66 answers with InProgress, keeping no session.
    var kernelDiscoveryUntil: ContinuousClock.Instant?
    /// Notifications held back behind the RACP response (`response-before-records`), per meter.
    var heldValues: [String: [(GATTUUID, [UInt8])]] = [:]
    /// Bumped by every explicit power change, so a pending hot-plug auto-enable does not override it.
    var powerChanges = 0
    private let onReady: @Sendable (String) -> Void
    private var eventTasks: [Task<Void, Never>] = []

    // MARK: Per-run state (lost on restart)

    var connection: DBusConnection?
    /// The run now: the one that owns `org.bluez`, or the pause between two runs.
    private(set) var currentRun = BluetoothdRun()
    var devices: [String: Device] = [:]
    var discovery: [String: DiscoveryFilter] = [:]
    var filters: [String: DiscoveryFilter] = [:]
    var agents: [String: Agent] = [:]
    var defaultAgentSender: String?
    /// Characteristic path -> senders holding a notify session.
    var notifySessions: [String: Set<String>] = [:]
    /// Characteristic path -> the socket of an `AcquireNotify`.
    var acquired: [String: AcquiredNotify] = [:]
    /// Values lost because an acquired socket was full.
    public internal(set) var droppedValues = 0
    /// Glucose Measurement values sent through an acquired socket since the `full-socket` quirk was set, per meter.
    var fullSocketCount: [String: Int] = [:]
    private var runTasks: [Task<Void, Never>] = []
    /// Senders with a registered GATT application holding a `GattProfile1` for the Glucose Service, and
    /// the application paths: bonded meters are then connected as soon as they advertise.
    var profiles: [String: Set<String>] = [:]
    var autoConnecting: Set<String> = []

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
        currentRun.end()
        currentRun = BluetoothdRun()
        let run = currentRun
        let c = try await DBusConnection.connect(address: options.busAddress)
        connection = c
        devices = [:]
        try await c.exportObjectManager(at: "/")
        try await c.export(path: "/org/bluez", interfaces: [agentManagerInterface(run), profileManagerInterface()])
        try await c.export(path: ControlInterface.path, interfaces: [controlInterface()])
        if adapterPresent { try await exportAdapter(run) }
        let owners = try await c.subscribe(MatchRule(type: .signal, sender: DBusNames.bus, interface: DBusNames.bus,
                                                     member: "NameOwnerChanged"))
        runTasks.append(Task { [weak self] in
            for await m in owners {
                guard m.body.count == 3, let name = m.body[0].string, let new = m.body[2].string else { continue }
                if new.isEmpty, name.hasPrefix(":") { await self?.senderLeft(name, run) }
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
                await self?.scanTick(run)
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
        currentRun.end()
        currentRun = BluetoothdRun()
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

    // MARK: Control

    /// Replaces the quirks played for a meter.
    public func setQuirks(_ address: String, _ set: Set<Quirk>) throws {
        guard meters[address] != nil else { throw DBusError(.invalidArgs, "no meter \(address)") }
        quirks[address] = set
        fullSocketCount[address] = nil
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

    func log(_ call: DBusMethodCall, detail: String? = nil) {
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

    func saveState() {
        guard let path = options.statePath else { return }
        let bonded = order.filter { meters[$0]?.paired == true }
        do { try StandInState.save(bonded: bonded, path: path) } catch {
            logger.warning("cannot write state file: \(error)")
        }
    }
}
