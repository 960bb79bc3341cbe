import DBusKit
import GatewayCore
import Support
import Synchronization

/// Interfaces and their properties, by interface name.
public typealias InterfaceProperties = [String: [String: DBusValue]]

/// What bluetoothd did, as seen through its bus name.
public enum BluetoothdEvent: Sendable, Equatable {
    /// `org.bluez` lost its owner: every object, connection, notification and registration is gone.
    case stopped
    /// `org.bluez` has an owner again (a new unique name). The mirror has been reloaded and the agent and
    /// discovery registered again.
    case started(uniqueName: String)
}

/// A client of bluetoothd over D-Bus.
///
/// It keeps a mirror of BlueZ's object tree (the match rules are installed before `GetManagedObjects`,
/// then `InterfacesAdded`, `InterfacesRemoved` and `PropertiesChanged` keep it current) and follows the
/// owner of `org.bluez`, so a restart of bluetoothd is noticed: the mirror is reloaded, and the pairing
/// agent and discovery are registered again. Meter links end with `.disconnected` when bluetoothd stops.
public actor BlueZClient {
    public nonisolated let connection: DBusConnection
    let logger: Logger
    private let ownsConnection: Bool
    /// The clock a meter link's lifetime is measured on, to tell a meter that refuses the bond's key from
    /// one that drops its links late (`LinkCore.authenticationFailure`). Connect deadlines and retry
    /// pauses stay on the real clock: they wait for bluetoothd, which a test's clock does not move.
    let linkClock: any SessionClock

    /// The unique name of bluetoothd, nil while `org.bluez` has no owner.
    public private(set) var owner: String?
    /// The object tree, by path.
    public internal(set) var objects: [String: InterfaceProperties] = [:]

    private var waiters: [Int: AsyncStream<Void>.Continuation] = [:]
    private var barriers: [Int: CheckedContinuation<Void, Never>] = [:]
    static let barrierInterface = "org.glucosegateway.Barrier"
    private var deviceWatchers: [Int: (filter: [GATTUUID], continuation: AsyncStream<DiscoveredDevice>.Continuation)] = [:]
    private var eventWatchers: [Int: AsyncStream<BluetoothdEvent>.Continuation] = [:]
    private var pump: Task<Void, Never>?
    private var nextKey = 0
    private var closed = false

    /// The discovery this client asked for, to be asked again after a restart of bluetoothd.
    private var discovery: (adapterName: String?, uuids: [GATTUUID])?
    /// Connections under way that paused this client's discovery, and the adapter it was paused on.
    private var connectsPausingDiscovery = 0
    private var discoveryPausedOn: AdapterInfo?
    var agent: PairingAgent?

    /// Default timeout of ordinary calls (properties, discovery, GATT operations).
    public var callTimeout: Duration = .seconds(15)
    /// How long `removeDevice` waits for BlueZ to drop a device it removes only once its link is down
    /// (5.82: a connected device's disconnection takes up to a supervision timeout).
    public var removalTimeout: Duration = .seconds(10)

    /// Whether a meter link takes notifications through `AcquireNotify` sockets where bluetoothd offers
    /// them (else, and where an acquisition fails, through `StartNotify` and the bus).
    public var acquiresNotifications = true

    public func setAcquiresNotifications(_ on: Bool) { acquiresNotifications = on }

    init(connection: DBusConnection, logger: Logger, ownsConnection: Bool, linkClock: any SessionClock = ContinuousClock()) {
        self.connection = connection
        self.logger = logger
        self.ownsConnection = ownsConnection
        self.linkClock = linkClock
    }

    /// Connects to the system bus (or `bus`, a D-Bus address) and loads the object tree. bluetoothd need
    /// not be running yet: the client notices when it starts. `linkClock`: see ``linkClock``.
    public static func connect(bus address: String? = nil, logger: Logger = .silent,
                               linkClock: any SessionClock = ContinuousClock()) async throws(BlueZError) -> BlueZClient {
        let connection: DBusConnection
        do {
            if let address {
                connection = try await DBusConnection.connect(address: address)
            } else {
                connection = try await DBusConnection.system()
            }
        } catch {
            throw BlueZError(.disconnected, "cannot connect to the bus: \(error.message)", name: error.name.rawValue)
        }
        let client = BlueZClient(connection: connection, logger: logger, ownsConnection: true, linkClock: linkClock)
        do {
            try await client.start()
        } catch {
            await connection.close()
            throw error
        }
        return client
    }

    /// Uses an existing connection (which the caller closes).
    public static func attach(to connection: DBusConnection, logger: Logger = .silent) async throws(BlueZError) -> BlueZClient {
        let client = BlueZClient(connection: connection, logger: logger, ownsConnection: false)
        try await client.start()
        return client
    }

    private func start() async throws(BlueZError) {
        let signals: AsyncStream<DBusMessage>
        do {
            signals = try await connection.subscribe([
                // Everything bluetoothd broadcasts: ObjectManager signals on / and PropertiesChanged.
                MatchRule(sender: BlueZNames.service),
                MatchRule(sender: DBusNames.bus, interface: DBusNames.bus, member: "NameOwnerChanged",
                          path: DBusNames.busPath, arguments: [0: BlueZNames.service]),
                MatchRule(sender: connection.uniqueName, interface: Self.barrierInterface, member: "Reached"),
            ], where: { !Self.isNotification($0) })
            owner = try await connection.nameOwner(of: BlueZNames.service)
        } catch {
            throw BlueZError(error)
        }
        if owner != nil { await reload() }
        pump = Task { [weak self] in
            for await message in signals {
                guard let self else { return }
                await self.apply(message)
            }
            await self?.busLost()
        }
    }

    /// Stops following bluetoothd; closes the connection if this client opened it. Links end.
    public func close() async {
        guard !closed else { return }
        closed = true
        pump?.cancel()
        discoveryRetry?.cancel()
        pump = nil
        if let agent {
            _ = try? await connection.call(destination: BlueZNames.service, path: BlueZNames.root,
                                           interface: BlueZNames.agentManager, member: "UnregisterAgent",
                                           arguments: [.objectPath(agent.path)], timeout: .seconds(2))
        }
        finishAll(with: .stopped)
        if ownsConnection { await connection.close() }
    }

    /// Yields each time bluetoothd stops or starts (after the client has caught up with it).
    public func bluetoothdEvents() -> AsyncStream<BluetoothdEvent> {
        let (stream, continuation) = AsyncStream.makeStream(of: BluetoothdEvent.self)
        let key = takeKey()
        eventWatchers[key] = continuation
        continuation.onTermination = { _ in Task { await self.removeEventWatcher(key) } }
        return stream
    }

    /// The unique name of each new bluetoothd after a restart (mirror reloaded, registrations renewed).
    public func bluetoothdRestarts() -> AsyncStream<String> {
        let events = bluetoothdEvents()
        let (stream, continuation) = AsyncStream.makeStream(of: String.self)
        let task = Task {
            for await event in events {
                if case .started(let name) = event { continuation.yield(name) }
            }
            continuation.finish()
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    private func removeEventWatcher(_ key: Int) { eventWatchers[key] = nil }

    func takeKey() -> Int {
        nextKey += 1
        return nextKey
    }

    // MARK: - Mirror

    private func reload() async {
        guard let owner else { return }
        do {
            let reply = try await connection.call(destination: owner, path: "/", interface: DBusNames.objectManager,
                                                  member: "GetManagedObjects", timeout: callTimeout)
            guard let tree = reply.first?.managedObjects else {
                logger.warning("bluez: GetManagedObjects reply has an unexpected type")
                return
            }
            // Signals queued meanwhile are applied afterwards, in order, so the newest state wins.
            objects = tree
            changed()
            for path in tree.keys.sorted() where tree[path]?[BlueZNames.device] != nil { deviceChanged(path) }
        } catch {
            logger.warning("bluez: GetManagedObjects failed: \(error)")
        }
    }

    /// A GATT notification (`Value` alone changing on a characteristic). The mirror leaves these to the
    /// meter links: applying thousands of them per download would cost a task hop and a copy each. Other
    /// subscribers of BlueZ's `PropertiesChanged` can skip them the same way:
    /// `connection.subscribe(rules, where: { !BlueZClient.isNotification($0) })`.
    public nonisolated static func isNotification(_ message: DBusMessage) -> Bool {
        guard message.member == "PropertiesChanged", message.body.count >= 2,
              case .string(let interface) = message.body[0], interface == BlueZNames.gattCharacteristic,
              let entries = message.body[1].dictionaryEntries, entries.count == 1,
              case .string("Value") = entries[0].key else { return false }
        return true
    }

    private func apply(_ message: DBusMessage) async {
        if message.interface == Self.barrierInterface {
            guard message.sender == connection.uniqueName, let key = message.body.first?.int64 else { return }
            barriers.removeValue(forKey: Int(key))?.resume()
            return
        }
        if message.interface == DBusNames.bus && message.member == "NameOwnerChanged" {
            guard message.body.count == 3, let new = message.body[2].string else { return }
            await ownerChanged(to: new.isEmpty ? nil : new)
            return
        }
        guard let owner, message.sender == owner else { return }
        switch (message.interface, message.member) {
        case (DBusNames.objectManager?, "InterfacesAdded"):
            guard message.body.count == 2, let path = message.body[0].objectPath,
                  let added = message.body[1].interfaces else { return }
            var entry = objects[path] ?? [:]
            for (name, properties) in added { entry[name] = properties }
            objects[path] = entry
            changed()
            if added[BlueZNames.device] != nil { deviceChanged(path) }
            if added[BlueZNames.adapter] != nil { adapterReturned() }
        case (DBusNames.objectManager?, "InterfacesRemoved"):
            guard message.body.count == 2, let path = message.body[0].objectPath,
                  let names = message.body[1].stringArray, var entry = objects[path] else { return }
            for name in names { entry[name] = nil }
            objects[path] = entry.isEmpty ? nil : entry
            changed()
        case (DBusNames.properties?, "PropertiesChanged"):
            guard message.body.count >= 2, let path = message.path, let interface = message.body[0].string,
                  let changes = message.body[1].vardict, var entry = objects[path],
                  var properties = entry[interface] else { return }
            for (name, value) in changes { properties[name] = value }
            if message.body.count == 3, let invalidated = message.body[2].stringArray {
                for name in invalidated { properties[name] = nil }
            }
            entry[interface] = properties
            objects[path] = entry
            changed()
            if interface == BlueZNames.adapter, changes["Powered"]?.bool == true { adapterReturned() }
            if interface == BlueZNames.device,
               !Set(changes.keys).isDisjoint(with: ["RSSI", "Name", "Alias", "UUIDs", "Paired", "ManufacturerData", "ServiceData"]) {
                deviceChanged(path)
            }
        default:
            break
        }
    }

    private func ownerChanged(to new: String?) async {
        guard new != owner else { return }
        if owner != nil {
            logger.notice("bluez: bluetoothd left the bus")
            owner = nil
            objects.removeAll()
            changed()
            for watcher in eventWatchers.values { watcher.yield(.stopped) }
        }
        guard let new else { return }
        logger.notice("bluez: bluetoothd is on the bus as \(new)")
        owner = new
        await reload()
        await registerAgain()
        if owner == new {
            for watcher in eventWatchers.values { watcher.yield(.started(uniqueName: new)) }
        }
    }

    /// Registers the agent and the discovery again with a new bluetoothd.
    private func registerAgain() async {
        if let agent {
            do {
                try await registerAgent(agent)
            } catch {
                logger.warning("bluez: registering the pairing agent again failed: \(error)")
            }
        }
        if let discovery {
            do {
                let adapter = try await waitForAdapter(named: discovery.adapterName, timeout: .seconds(30))
                try await beginDiscovery(on: adapter, uuids: discovery.uuids)
            } catch {
                logger.warning("bluez: starting discovery again failed: \(error)")
            }
        }
    }

    /// An adapter was plugged in or powered on: BlueZ has no discovery session for it, so ask again.
    private func adapterReturned() {
        guard let discovery else { return }
        Task {
            do {
                let adapter = try await self.waitForAdapter(named: discovery.adapterName, timeout: .seconds(30))
                guard self.discoveryWanted else { return }
                try await self.beginDiscovery(on: adapter, uuids: discovery.uuids)
            } catch {
                self.logger.warning("bluez: starting discovery on the returning adapter failed: \(error)")
            }
        }
    }

    private var discoveryWanted: Bool { discovery != nil }

    /// Pause between attempts to start a discovery that bluetoothd refused while not discovering, and
    /// how many attempts (the kernel's left-over discovery ends after 10.24 s).
    public var discoveryRetryDelay: Duration = .seconds(1)
    public var discoveryRetryAttempts = 30
    private var discoveryRetry: Task<Void, Never>?

    /// Asks for the wanted discovery again, in the background, until the adapter discovers.
    func scheduleDiscoveryRetry() {
        guard discoveryRetry == nil else { return }
        discoveryRetry = Task {
            defer { self.discoveryRetryEnded() }
            for _ in 0..<self.discoveryRetryAttempts {
                do { try await Task.sleep(for: self.discoveryRetryDelay) } catch { return }
                guard let wanted = self.discovery, !self.closed else { return }
                guard let adapter = try? self.adapter(named: wanted.adapterName), adapter.powered else { continue }
                if await self.isDiscovering(adapter) { return }
                do {
                    try await self.setDiscoveryFilter(on: adapter, uuids: wanted.uuids)
                    _ = try await self.callBlueZ(path: adapter.path, interface: BlueZNames.adapter, member: "StartDiscovery")
                    self.logger.info("bluez: discovery on \(adapter.name) started")
                    return
                } catch {
                    self.logger.debug("bluez: discovery on \(adapter.name) still refused: \(error)")
                }
            }
            self.logger.warning("bluez: discovery could not be started; meters will not be found until bluetoothd allows it")
        }
    }

    private func discoveryRetryEnded() { discoveryRetry = nil }

    private func busLost() {
        let pending = barriers
        barriers.removeAll()
        for (_, barrier) in pending { barrier.resume() }
        guard !closed else { return }
        logger.error("bluez: the connection to the bus was lost")
        owner = nil
        objects.removeAll()
        finishAll(with: .stopped)
    }

    /// Returns once the mirror has applied every signal this connection had received when it was called.
    ///
    /// A reply (say, to `Connect`) is delivered straight to the caller, while the signals sent before it
    /// (`Connected=true`) reach the mirror through its own stream; a signal sent to ourselves through the
    /// bus arrives after all of them and marks the point.
    func caughtUp() async {
        guard !closed else { return }
        let key = takeKey()
        let connection = self.connection
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            barriers[key] = continuation
            Task {
                do {
                    try await connection.emitSignal(path: BlueZClient.agentPath, interface: Self.barrierInterface,
                                                    member: "Reached", arguments: [.int64(Int64(key))],
                                                    destination: connection.uniqueName)
                } catch {
                    self.releaseBarrier(key)
                }
            }
        }
    }

    private func releaseBarrier(_ key: Int) {
        barriers.removeValue(forKey: key)?.resume()
    }

    private func finishAll(with event: BluetoothdEvent) {
        let pending = barriers
        barriers.removeAll()
        for (_, barrier) in pending { barrier.resume() }
        for watcher in eventWatchers.values {
            watcher.yield(event)
            watcher.finish()
        }
        eventWatchers.removeAll()
        for watcher in deviceWatchers.values { watcher.continuation.finish() }
        deviceWatchers.removeAll()
        for waiter in waiters.values { waiter.finish() }
        waiters.removeAll()
    }

    private func changed() {
        for waiter in waiters.values { waiter.yield(()) }
    }

    /// The mirror was corrected from outside the signal path (a property read back from bluetoothd).
    func markChanged() { changed() }

    // MARK: - Waiting on the mirror

    /// Waits until `check` returns a value for the current mirror (checked now and after every change).
    /// `check` may throw to stop waiting. Fails with `.timeout` after `timeout`, `.disconnected` when the
    /// bus is lost.
    func wait<T: Sendable>(
        timeout: Duration, for what: String,
        _ check: @Sendable (_ objects: [String: InterfaceProperties], _ owner: String?) throws(BlueZError) -> T?
    ) async throws(BlueZError) -> T {
        if let value = try check(objects, owner) { return value }
        let key = takeKey()
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        waiters[key] = continuation
        defer { waiters[key] = nil }
        let deadline = ContinuousClock.now + timeout
        let timer = Task {
            try? await Task.sleep(until: deadline, clock: .continuous)
            continuation.yield(())
        }
        defer { timer.cancel() }
        for await _ in stream {
            if let value = try check(objects, owner) { return value }
            if ContinuousClock.now >= deadline { throw BlueZError(.timeout, "timed out waiting for \(what)") }
        }
        if Task.isCancelled { throw BlueZError(.timeout, "cancelled while waiting for \(what)") }
        throw BlueZError(.disconnected, "the bus connection closed while waiting for \(what)")
    }

    // MARK: - Devices appearing

    /// Devices known now and each time one appears or updates its advertisement (RSSI, name, UUIDs,
    /// paired), limited to those advertising any of `uuids` (all devices when empty). BlueZ merges the
    /// discovery filters of all clients, so the filter is applied here too.
    public func discoveredDevices(matching uuids: [GATTUUID] = [.glucoseService]) -> AsyncStream<DiscoveredDevice> {
        let (stream, continuation) = AsyncStream.makeStream(of: DiscoveredDevice.self, bufferingPolicy: .bufferingNewest(256))
        let key = takeKey()
        deviceWatchers[key] = (uuids, continuation)
        continuation.onTermination = { _ in Task { await self.removeDeviceWatcher(key) } }
        for device in devices() where device.advertises(any: uuids) { continuation.yield(device) }
        if closed { continuation.finish() }
        return stream
    }

    private func removeDeviceWatcher(_ key: Int) { deviceWatchers[key] = nil }

    private func deviceChanged(_ path: String) {
        guard !deviceWatchers.isEmpty, let device = DiscoveredDevice(path: path, interfaces: objects[path]) else { return }
        for watcher in deviceWatchers.values where device.advertises(any: watcher.filter) {
            watcher.continuation.yield(device)
        }
    }

    // MARK: - Calls

    /// Calls bluetoothd, mapping the D-Bus error.
    func callBlueZ(path: String, interface: String, member: String, arguments: [DBusValue] = [],
                   timeout: Duration? = nil) async throws(BlueZError) -> [DBusValue] {
        do {
            return try await connection.call(destination: BlueZNames.service, path: path, interface: interface,
                                             member: member, arguments: arguments, timeout: timeout ?? callTimeout)
        } catch {
            throw BlueZError(error)
        }
    }

    /// Whether bluetoothd answers a harmless call (`Properties.GetAll` of `AgentManager1` on `/org/bluez`)
    /// within `timeout`. Any reply counts, an error reply too; only silence does not: bluetoothd can keep
    /// its bus name while its main loop is stuck (seen after a kernel BUG in its socket release). False
    /// also when `org.bluez` has no owner.
    public func bluetoothdAnswers(timeout: Duration) async -> Bool {
        guard owner != nil else { return false }
        do {
            _ = try await connection.call(destination: BlueZNames.service, path: BlueZNames.root,
                                          interface: DBusNames.properties, member: "GetAll",
                                          arguments: [.string(BlueZNames.agentManager)], timeout: timeout)
            return true
        } catch {
            return !(error.isTimeout || error.isDisconnected)
        }
    }

    /// Sets a property of a BlueZ object.
    public func setProperty(path: String, interface: String, name: String, value: DBusValue) async throws(BlueZError) {
        _ = try await callBlueZ(path: path, interface: DBusNames.properties, member: "Set",
                                arguments: [.string(interface), .string(name), .variant(value)])
    }

    // MARK: - Discovery registration (bookkeeping shared with the adapter extension)

    func rememberDiscovery(adapterName: String?, uuids: [GATTUUID]) { discovery = (adapterName, uuids) }
    func forgetDiscovery() { discovery = nil }

    /// Stops this client's discovery for the first of the connections under way (see `connectMeter`);
    /// it is kept as wanted, so ``resumeDiscoveryAfterConnect()`` starts it again after the last.
    func pauseDiscoveryForConnect() async {
        connectsPausingDiscovery += 1
        guard connectsPausingDiscovery == 1, let discovery, let adapter = try? adapter(named: discovery.adapterName) else { return }
        do {
            _ = try await callBlueZ(path: adapter.path, interface: BlueZNames.adapter, member: "StopDiscovery", timeout: .seconds(5))
            discoveryPausedOn = adapter
        } catch {
            logger.info("bluez: pausing discovery to connect failed: \(error)")
        }
    }

    func resumeDiscoveryAfterConnect() async {
        connectsPausingDiscovery = max(0, connectsPausingDiscovery - 1)
        guard connectsPausingDiscovery == 0, let adapter = discoveryPausedOn else { return }
        discoveryPausedOn = nil
        // Stopped meanwhile (`stopDiscovery`): stays stopped.
        guard let discovery else { return }
        do {
            try await beginDiscovery(on: adapter, uuids: discovery.uuids)
        } catch {
            logger.warning("bluez: starting discovery again after connecting failed: \(error)")
        }
    }
}
