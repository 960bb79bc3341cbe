import DBusKit
import GatewayCore
import Synchronization

/// Retry pacing for transient connection failures.
public struct Backoff: Sendable, Equatable {
    public var initial: Duration
    public var maximum: Duration
    public var attempts: Int

    public init(initial: Duration = .milliseconds(250), maximum: Duration = .seconds(4), attempts: Int = 6) {
        self.initial = initial
        self.maximum = maximum
        self.attempts = attempts
    }

    /// The pause before retry number `attempt` (1-based): initial, doubling, capped.
    public func delay(before attempt: Int) -> Duration {
        var delay = initial
        for _ in 1..<max(1, attempt) {
            delay = delay * 2
            if delay >= maximum { return maximum }
        }
        return min(delay, maximum)
    }
}

extension BlueZClient {
    /// Connects to a meter and waits until its GATT services are resolved.
    ///
    /// BlueZ replies to `Connect` before service discovery ends, so this waits for `ServicesResolved`
    /// while watching for `Connected=false` and for the object vanishing. Transient failures
    /// (`le-connection-abort-by-local`, `br-connection-canceled`, `InProgress`, a drop before resolution)
    /// are retried with `backoff` while time remains; permanent ones are thrown at once.
    public func connectMeter(address: String, timeout: Duration = .seconds(60),
                             backoff: Backoff = Backoff()) async throws(MeterLinkError) -> BlueZMeterLink {
        do {
            return try await connectLink(address: address, timeout: timeout, backoff: backoff)
        } catch {
            throw error.meterLinkError
        }
    }

    private func connectLink(address: String, timeout: Duration, backoff: Backoff) async throws(BlueZError) -> BlueZMeterLink {
        let deadline = ContinuousClock.now + timeout
        func remaining() -> Duration { deadline - ContinuousClock.now }
        var attempt = 0
        while true {
            attempt += 1
            do {
                return try await connectOnce(address: address, deadline: deadline)
            } catch where error.kind == .transient && attempt < backoff.attempts {
                let pause = backoff.delay(before: attempt)
                guard remaining() > pause + .milliseconds(100) else { throw error }
                logger.info("bluez: connecting \(address) failed (\(error)); retry \(attempt) in \(pause)")
                do { try await Task.sleep(for: pause) } catch { throw BlueZError(.timeout, "cancelled while connecting") }
            }
        }
    }

    private func connectOnce(address: String, deadline: ContinuousClock.Instant) async throws(BlueZError) -> BlueZMeterLink {
        guard let device = device(address: address) else {
            throw BlueZError(.notFound, "device \(address) is not known to BlueZ; scan first")
        }
        let path = device.path
        // Subscribe before connecting, so no notification or disconnection can slip between.
        let stream: AsyncStream<DBusMessage>
        do {
            stream = try await connection.subscribe(BlueZMeterLink.rules(devicePath: path))
        } catch {
            throw BlueZError(error)
        }
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { throw BlueZError(.timeout, "timed out connecting \(address)") }
        if !(device.connected && device.servicesResolved) {
            do {
                _ = try await callBlueZ(path: path, interface: BlueZNames.device, member: "Connect", timeout: remaining)
            } catch where error.name == BlueZErrorNames.alreadyConnected {
                // Fine: wait for services below.
            }
        }
        let resolved: Bool
        do {
            resolved = try await wait(timeout: deadline - ContinuousClock.now, for: "services of \(address)") {
                objects, _ throws(BlueZError) -> Bool? in
                guard let properties = objects[path]?[BlueZNames.device] else {
                    throw BlueZError(.disconnected, "device \(address) vanished while connecting")
                }
                if properties["Connected"]?.bool == false {
                    throw BlueZError(.transient, "device \(address) disconnected before its services were resolved")
                }
                guard properties["ServicesResolved"]?.bool == true else { return nil }
                // BlueZ can flag resolution before exporting the services (bluez #1489): need objects too.
                let prefix = path + "/"
                return objects.contains { $0.key.hasPrefix(prefix) && $0.value[BlueZNames.gattCharacteristic] != nil } ? true : nil
            }
        } catch {
            if error.kind == .timeout {
                _ = try? await callBlueZ(path: path, interface: BlueZNames.device, member: "Disconnect", timeout: .seconds(5))
            }
            throw error
        }
        guard resolved, let owner else { throw BlueZError(.disconnected, "bluetoothd went away") }
        return BlueZMeterLink(client: self, address: device.address, devicePath: path, owner: owner,
                              characteristics: characteristics(of: path), signals: stream)
    }
}

/// A connected meter with resolved services, over BlueZ.
///
/// `events` merges the values of every subscribed characteristic, in the order bluetoothd sent them (one
/// `PropertiesChanged` per notification), and ends with `.disconnected(reason:)` when the meter
/// disconnects, its object vanishes, bluetoothd stops, the bus is lost, or ``disconnect()`` is called.
public final class BlueZMeterLink: MeterLink {
    public let address: String
    public let devicePath: String
    public let events: AsyncStream<MeterLinkEvent>
    /// Characteristic paths by lower-case 128-bit UUID.
    public let characteristicPaths: [String: String]

    private let client: BlueZClient
    private let continuation: AsyncStream<MeterLinkEvent>.Continuation
    private struct State {
        var subscribed: Set<String> = []
        var ended = false
        var pump: Task<Void, Never>?
    }
    private let state = Mutex(State())
    /// Timeout of GATT reads, writes and notification changes.
    public let operationTimeout: Duration

    static func rules(devicePath: String) -> [MatchRule] {
        [
            MatchRule(sender: BlueZNames.service, interface: DBusNames.properties, member: "PropertiesChanged",
                      pathNamespace: devicePath),
            MatchRule(sender: BlueZNames.service, interface: DBusNames.objectManager, member: "InterfacesRemoved",
                      arguments: [:]),
            MatchRule(sender: DBusNames.bus, interface: DBusNames.bus, member: "NameOwnerChanged",
                      path: DBusNames.busPath, arguments: [0: BlueZNames.service]),
        ]
    }

    init(client: BlueZClient, address: String, devicePath: String, owner: String,
         characteristics: [String: String], signals: AsyncStream<DBusMessage>,
         operationTimeout: Duration = .seconds(15)) {
        self.client = client
        self.address = address
        self.devicePath = devicePath
        self.characteristicPaths = characteristics
        self.operationTimeout = operationTimeout
        let (events, continuation) = AsyncStream.makeStream(of: MeterLinkEvent.self, bufferingPolicy: .unbounded)
        self.events = events
        self.continuation = continuation
        var uuidByPath: [String: GATTUUID] = [:]
        for (uuid, path) in characteristics {
            if let short = GATTUUID(string: uuid) { uuidByPath[path] = short }
        }
        let pump = Task { [weak self, uuidByPath] in
            for await message in signals {
                guard let self else { return }
                if self.handle(message, owner: owner, uuidByPath: uuidByPath) { return }
            }
            self?.end("the connection to the bus was lost")
        }
        state.withLock { $0.pump = pump }
    }

    deinit {
        state.withLock { $0.pump?.cancel() }
        continuation.finish()
    }

    /// Handles one signal; returns true when the link has ended.
    private func handle(_ message: DBusMessage, owner: String, uuidByPath: [String: GATTUUID]) -> Bool {
        if message.interface == DBusNames.bus {
            guard message.body.count == 3, let new = message.body[2].string else { return false }
            if new != owner {
                end(new.isEmpty ? "bluetoothd stopped" : "bluetoothd restarted")
                return true
            }
            return false
        }
        guard message.sender == owner else { return false }
        if message.member == "InterfacesRemoved" {
            guard let path = message.body.first?.objectPath, path == devicePath,
                  message.body.count == 2, message.body[1].stringArray?.contains(BlueZNames.device) == true
            else { return false }
            end("the meter's device object was removed")
            return true
        }
        guard message.body.count >= 2, let interface = message.body[0].string, let path = message.path,
              let changes = message.body[1].vardict else { return false }
        if interface == BlueZNames.gattCharacteristic {
            guard let uuid = uuidByPath[path], let value = changes["Value"]?.bytes else { return false }
            let wanted = state.withLock { !$0.ended && $0.subscribed.contains(uuid.uuidString) }
            if wanted { continuation.yield(.value(uuid, value)) }
            return false
        }
        if interface == BlueZNames.device, path == devicePath, changes["Connected"]?.bool == false {
            end("the meter disconnected")
            return true
        }
        return false
    }

    private func end(_ reason: String) {
        let first = state.withLock { state -> Bool in
            guard !state.ended else { return false }
            state.ended = true
            return true
        }
        guard first else { return }
        continuation.yield(.disconnected(reason: reason))
        continuation.finish()
    }

    private var isEnded: Bool { state.withLock { $0.ended } }

    private func path(of uuid: GATTUUID) throws(MeterLinkError) -> String {
        guard let path = characteristicPaths[uuid.uuidString] else {
            throw MeterLinkError(.notSupported, "the meter has no characteristic \(uuid)")
        }
        return path
    }

    private func call(_ path: String, _ member: String, _ arguments: [DBusValue]) async throws(MeterLinkError) -> [DBusValue] {
        guard !isEnded else { throw MeterLinkError(.disconnected, "the link to \(address) is closed") }
        do {
            return try await client.connection.call(destination: BlueZNames.service, path: path,
                                                    interface: BlueZNames.gattCharacteristic, member: member,
                                                    arguments: arguments, timeout: operationTimeout)
        } catch {
            throw BlueZError(error).meterLinkError
        }
    }

    public func hasCharacteristic(_ uuid: GATTUUID) async -> Bool {
        characteristicPaths[uuid.uuidString] != nil
    }

    public func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8] {
        let reply = try await call(try path(of: uuid), "ReadValue", [.vardict([:])])
        guard let bytes = reply.first?.bytes else {
            throw MeterLinkError(.permanent, "ReadValue of \(uuid) returned no bytes")
        }
        return bytes
    }

    public func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError) {
        _ = try await call(try path(of: uuid), "WriteValue", [.bytes(value), .vardict(["type": .string("request")])])
    }

    public func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) {
        let path = try path(of: uuid)
        // Mark first: the first value can arrive right behind StartNotify's reply.
        state.withLock { _ = $0.subscribed.insert(uuid.uuidString) }
        do {
            _ = try await call(path, "StartNotify", [])
        } catch {
            state.withLock { _ = $0.subscribed.remove(uuid.uuidString) }
            throw error
        }
    }

    public func unsubscribe(_ uuid: GATTUUID) async {
        guard let path = characteristicPaths[uuid.uuidString] else { return }
        state.withLock { _ = $0.subscribed.remove(uuid.uuidString) }
        _ = try? await call(path, "StopNotify", [])
    }

    /// Stops every notification (BlueZ keeps notify sessions across reconnects otherwise), then
    /// disconnects. The events end with `.disconnected`.
    public func disconnect() async {
        let subscribed = state.withLock { state -> Set<String> in
            let all = state.subscribed
            state.subscribed.removeAll()
            return all
        }
        for uuid in subscribed.sorted() {
            guard let path = characteristicPaths[uuid] else { continue }
            _ = try? await call(path, "StopNotify", [])
        }
        let wasUp = !isEnded
        // End first, so that the Connected=false this causes is not reported as the meter leaving.
        end("disconnected by the gateway")
        state.withLock { $0.pump?.cancel() }
        if wasUp {
            _ = try? await client.connection.call(destination: BlueZNames.service, path: devicePath,
                                                  interface: BlueZNames.device, member: "Disconnect",
                                                  timeout: operationTimeout)
        }
    }
}
