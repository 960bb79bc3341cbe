import DBusKit
import GatewayCore
import Synchronization

/// How often and how far apart a connection is tried again after a transient failure: `attempts` in all,
/// pausing `initial`, doubling up to `maximum`. (The upload side's jittered backoff is `Backoff` in SyncEngine.)
public struct ConnectRetry: Sendable, Equatable {
    public var initial: Duration
    public var maximum: Duration
    public var attempts: Int
    /// Where bluetoothd gives no disconnect reason (before 5.83), a link that came up and was dropped
    /// this soon, before its services were resolved, counts as refused at encryption (see
    /// `LinkCore.authenticationFailure`). The bond-loss real-stack scenario measured 10-80 ms between
    /// bluetoothd's Connected=true and Connected=false on an idle machine and up to some 730 ms with the
    /// machine loaded (TCG); resolving services from the cache or a first discovery takes longer.
    public var refusedWithin: Duration

    public init(initial: Duration = .milliseconds(250), maximum: Duration = .seconds(4), attempts: Int = 6,
                refusedWithin: Duration = .milliseconds(1500)) {
        self.initial = initial
        self.maximum = maximum
        self.attempts = attempts
        self.refusedWithin = refusedWithin
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
    /// are retried as `retry` says while time remains; permanent ones are thrown at once.
    public func connectMeter(address: String, timeout: Duration = .seconds(60),
                             retry: ConnectRetry = ConnectRetry()) async throws(MeterLinkError) -> BlueZMeterLink {
        do {
            return try await connectLink(address: address, timeout: timeout, retry: retry)
        } catch {
            throw error.meterLinkError
        }
    }

    /// How many attempts in a row must fail the way a lost bond makes them fail before the meter is
    /// reported as `bondLost` (see `connectMeter`).
    static let bondLostAttempts = 3

    private func connectLink(address: String, timeout: Duration, retry: ConnectRetry) async throws(BlueZError) -> BlueZMeterLink {
        let deadline = ContinuousClock.now + timeout
        func remaining() -> Duration { deadline - ContinuousClock.now }
        var attempt = 0
        // Consecutive attempts refused at encryption; any other outcome starts the count again.
        var refusals = 0
        while true {
            attempt += 1
            do {
                return try await connectOnce(address: address, deadline: deadline, refusedWithin: retry.refusedWithin)
            } catch {
                refusals = error.authenticationFailure == nil ? 0 : refusals + 1
                if let why = error.authenticationFailure, refusals >= Self.bondLostAttempts, bonded(address) {
                    throw BlueZError(.bondLost, "\(address) refused the encryption with this gateway's key \(refusals) times in a row (\(why)): the meter no longer has the bond (reset, or paired with another device)")
                }
                guard error.kind == .transient, attempt < retry.attempts else { throw error }
                let pause = retry.delay(before: attempt)
                guard remaining() > pause + .milliseconds(100) else { throw error }
                logger.info("bluez: connecting \(address) failed (\(error)); retry \(attempt) in \(pause)")
                do { try await Task.sleep(for: pause) } catch { throw BlueZError(.timeout, "cancelled while connecting") }
            }
        }
    }

    /// Whether BlueZ holds a bond with the device (`Paired`, and `Bonded` where bluetoothd has it).
    private func bonded(_ address: String) -> Bool {
        guard let device = device(address: address) else { return false }
        let properties = objects[device.path]?[BlueZNames.device]
        return device.paired && properties?["Bonded"]?.bool != false
    }

    private func connectOnce(address: String, deadline: ContinuousClock.Instant, refusedWithin: Duration) async throws(BlueZError) -> BlueZMeterLink {
        guard let device = device(address: address) else {
            throw BlueZError(.notFound, "device \(address) is not known to BlueZ; scan first")
        }
        let path = device.path
        guard let currentOwner = owner else { throw BlueZError(.disconnected, "bluetoothd is not running") }
        // Subscribe before connecting, so no notification or disconnection can slip between. Signals are
        // handled on the connection's queue and go straight into the link's event stream.
        let core = LinkCore(devicePath: path, owner: currentOwner)
        let subscription: DBusSubscription
        do {
            subscription = try await connection.subscribe(
                BlueZMeterLink.rules(devicePath: path),
                onMessage: { core.handle($0) },
                onPropertyBytes: { core.handle($0, $1) },
                onBatchEnd: { core.flush() },
                awaitsBurst: { core.isReporting },
                onEnd: { core.end("the connection to the bus was lost") })
        } catch {
            throw BlueZError(error)
        }
        var handedOver = false
        defer { if !handedOver { subscription.cancel() } }
        let remaining = deadline - ContinuousClock.now
        guard remaining > .zero else { throw BlueZError(.timeout, "timed out connecting \(address)") }
        if !(device.connected && device.servicesResolved) {
            do {
                _ = try await callBlueZ(path: path, interface: BlueZNames.device, member: "Connect", timeout: remaining)
            } catch where error.name == BlueZErrorNames.alreadyConnected {
                // Fine: wait for services below.
            } catch {
                var failed = error
                if failed.kind == .transient { failed.authenticationFailure = core.authenticationFailure(within: refusedWithin) }
                throw failed
            }
            // The mirror must have seen Connected=true (sent before the reply) before it is judged.
            await caughtUp()
            await confirmConnected(path: path)
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
            var failed = error
            if failed.kind == .transient { failed.authenticationFailure = core.authenticationFailure(within: refusedWithin) }
            throw failed
        }
        guard resolved, owner == currentOwner else { throw BlueZError(.disconnected, "bluetoothd went away") }
        // The predicate holds from the first characteristic on; bluetoothd sends the rest of the GATT
        // objects right after it (all of them before `ServicesResolved` normally, after it with bluez
        // #1489). The map is taken once the mirror has applied everything received so far, not midway.
        await caughtUp()
        guard owner == currentOwner else { throw BlueZError(.disconnected, "bluetoothd went away") }
        handedOver = true
        return BlueZMeterLink(client: self, address: device.address, devicePath: path, core: core,
                              characteristics: characteristics(of: path), subscription: subscription)
    }
}

extension BlueZClient {
    /// BlueZ 5.66 can bring a device up without ever signalling `Connected=true`: when its ATT channel is
    /// up before the kernel's "Device Connected" event is handled, `att_connect_cb` marks the device
    /// connected silently and the later event returns early (`src/device.c`, "is already connected"). So
    /// when the mirror still says false after `Connect` returned, bluetoothd is asked; a true answer goes
    /// into the mirror (a later `Connected=false` signal still ends the link as usual).
    func confirmConnected(path: String) async {
        guard let device = objects[path]?[BlueZNames.device], device["Connected"]?.bool != true else { return }
        let reply: [DBusValue]
        do {
            reply = try await callBlueZ(path: path, interface: DBusNames.properties, member: "Get",
                                        arguments: [.string(BlueZNames.device), .string("Connected")],
                                        timeout: .seconds(5))
        } catch {
            logger.info("bluez: asking whether \(path) is connected failed: \(error)")
            return
        }
        guard reply.first?.bool == true, var entry = objects[path], var properties = entry[BlueZNames.device],
              properties["Connected"]?.bool != true else { return }
        logger.info("bluez: \(path) is connected although bluetoothd did not signal it")
        properties["Connected"] = .bool(true)
        entry[BlueZNames.device] = properties
        objects[path] = entry
        markChanged()
    }
}

/// The part of a meter link that signal delivery touches: runs on the D-Bus connection's queue (and from
/// the link's methods), so its state sits behind a mutex.
///
/// Values are collected while the connection dispatches what one wake-up read and handed to `events`
/// together at the end of that pass (``flush()``), as one group, so the consumer wakes once per pass, not
/// once per notification. Everything is handed on under the mutex, so the order (values, then the end)
/// holds whichever thread ends the link.
final class LinkCore: Sendable {
    let devicePath: String
    let owner: String
    let channel = MeterLinkEventChannel()
    private struct State {
        var uuidByPath: [String: GATTUUID] = [:]
        /// The characteristic of the last notification: a burst comes from one or two, and comparing the
        /// path costs less than hashing it.
        var lastValue: (path: String, uuid: GATTUUID)?
        var subscribed: Set<GATTUUID> = []
        var ended = false
        /// A request to report records was written and no RACP indication has come since: the meter is
        /// sending a burst of records, so the connection may gather them (`isReporting`).
        var reporting = false
        /// Values of the current dispatch pass, not yet yielded.
        var batch: [MeterLinkEvent] = []
        /// When this link was signalled up and down, and the reason bluetoothd gave (5.83+).
        var upAt: ContinuousClock.Instant?
        var downAt: ContinuousClock.Instant?
        var disconnectReason: String?
    }
    private let state = Mutex(State())

    init(devicePath: String, owner: String) {
        self.devicePath = devicePath
        self.owner = owner
    }

    func setCharacteristics(_ paths: [String: String]) {
        var byPath: [String: GATTUUID] = [:]
        for (uuid, path) in paths {
            if let known = GATTUUID(string: uuid) ?? GATTUUID(vendor: uuid) { byPath[path] = known }
        }
        state.withLock { state in
            state.uuidByPath = byPath
            state.lastValue = nil
        }
    }

    func setSubscribed(_ uuid: GATTUUID, _ on: Bool) {
        state.withLock { state in
            if on { state.subscribed.insert(uuid) } else { state.subscribed.remove(uuid) }
        }
    }

    func takeSubscriptions() -> Set<GATTUUID> {
        state.withLock { state in
            let all = state.subscribed
            state.subscribed.removeAll()
            return all
        }
    }

    var isEnded: Bool { state.withLock { $0.ended } }

    /// Whether the meter is sending the records of a report (see `State.reporting`): the connection may
    /// then pause a moment to take in more of them per wake-up. The report's RACP response ends it, so
    /// that response waits at most one such pause.
    var isReporting: Bool { state.withLock { $0.reporting && !$0.ended } }

    /// Notes an RACP request about to be written (`writing`) or that failed (`!writing`).
    func racpRequest(_ value: [UInt8], writing: Bool) {
        // Op code 0x01: Report Stored Records. Every other request is answered by one indication.
        guard value.first == 0x01 else { return }
        state.withLock { $0.reporting = writing }
    }

    /// One signal, on the connection's queue.
    func handle(_ message: DBusMessage) {
        if message.interface == DBusNames.bus {
            guard message.body.count == 3, let new = message.body[2].string, new != owner else { return }
            end(new.isEmpty ? "bluetoothd stopped" : "bluetoothd restarted")
            return
        }
        guard message.sender == owner else { return }
        if message.member == "InterfacesRemoved" {
            guard message.body.count == 2, message.body[0].objectPath == devicePath,
                  message.body[1].stringArray?.contains(BlueZNames.device) == true else { return }
            end("the meter's device object was removed")
            return
        }
        if message.interface == BlueZNames.device, message.member == "Disconnected" {
            // Device1.Disconnected(s reason, s message), BlueZ 5.83+: sent before Connected=false.
            guard message.path == devicePath, let reason = message.body.first?.string else { return }
            state.withLock { $0.disconnectReason = reason }
            return
        }
        guard message.body.count >= 2, let interface = message.body[0].string, let path = message.path else { return }
        if interface == BlueZNames.gattCharacteristic {
            guard let value = message.body[1].property("Value")?.bytes else { return }
            take(value, from: path)
            return
        }
        if interface == BlueZNames.device, path == devicePath, let connected = message.body[1].property("Connected")?.bool {
            let at = ContinuousClock.now
            state.withLock { state in
                if connected { state.upAt = at } else if state.downAt == nil { state.downAt = at }
            }
            if !connected { end("the meter disconnected") }
        }
    }

    /// One signal of the `PropertyBytes` shape, on the connection's queue: a notification or indication
    /// of a characteristic is taken straight from the bytes; anything else goes to `handle(_:)`.
    func handle(_ header: DBusMessage, _ property: PropertyBytes) -> PropertyBytesOutcome {
        guard BlueZClient.isNotification(property) else { return .asMessage }
        guard header.sender == owner, let path = header.path else { return .skipped }
        take(Array(property.value), from: path)
        return .took
    }

    /// A characteristic's new value: queued for the link when its characteristic is subscribed.
    private func take(_ value: [UInt8], from path: String) {
        state.withLock { state in
            guard !state.ended else { return }
            let uuid: GATTUUID
            if let last = state.lastValue, last.path == path {
                uuid = last.uuid
            } else {
                guard let known = state.uuidByPath[path] else { return }
                uuid = known
                state.lastValue = (path, known)
            }
            guard state.subscribed.contains(uuid) else { return }
            if uuid == .recordAccessControlPoint { state.reporting = false }
            state.batch.append(.value(uuid, value))
        }
    }

    /// Why this failed attempt looks like the meter refusing the encryption with the stored key, or nil.
    ///
    /// What the stack says when the meter forgot the bond (seen on BlueZ 5.66 with Linux 6.1: the
    /// bond-loss real-stack scenario): the kernel starts encryption with the stored key, the meter answers
    /// with a negative LTK reply, the controller reports Encryption Change with status 0x06 (PIN or Key
    /// Missing), and the kernel disconnects with 0x05 (Authentication Failure); mgmt reports Device
    /// Disconnected with reason 4 (authentication failure). bluetoothd keeps the key: `Paired` and
    /// `Bonded` stay true, and nothing is retried at ATT level (no 0x05/0x0F ATT errors: no request
    /// got that far). On D-Bus, 5.66 shows only `Connected` going true and false again within some
    /// 20-80 ms, with `ServicesResolved` never true; `Connect` itself either succeeds (bluetoothd
    /// attached ATT before raising security: "Elevating security level since LTK is available") or
    /// fails with `org.bluez.Error.Failed` "le-connection-abort-by-local" (the same text as any other
    /// local abort). BlueZ 5.83 added `Device1.Disconnected(reason, message)`; the reason is then
    /// `org.bluez.Reason.Authentication`, which the kernel reports only for that failure. bluetoothd's
    /// own reconnection (a GATT profile's auto-connect) is not re-armed by 5.66 when the ATT channel ends
    /// with EACCES, as it did on the emulated controller (`att_disconnected_cb` re-arms on ETIMEDOUT,
    /// ECONNRESET, ECONNABORTED); a controller that reports the local disconnect as 0x16 gives
    /// ECONNABORTED, which would re-arm it; 5.86+ retries after 1, 2 and 4 s, then stops. So: where
    /// bluetoothd gave a reason, only `Authentication` counts; where it gave none, a link that came up
    /// and was dropped within `within` (`ConnectRetry.refusedWithin`), before its services were
    /// resolved, does: encryption is the first thing a central does on a link to a bonded device. One
    /// such attempt proves nothing (a link can fail to establish, 0x3E); `connectMeter` wants three in a row.
    func authenticationFailure(within: Duration, now: ContinuousClock.Instant = .now) -> String? {
        let s = state.withLock { $0 }
        if let reason = s.disconnectReason {
            return reason == "org.bluez.Reason.Authentication" ? "bluetoothd: disconnected, reason \(reason)" : nil
        }
        guard let up = s.upAt else { return nil }
        let lasted = up.duration(to: s.downAt ?? now)
        guard lasted <= within else { return nil }
        return "the link was dropped \(lasted.wholeMilliseconds) ms after it came up, before its services were resolved"
    }

    /// Hands on the values of the dispatch pass that just ended.
    func flush() {
        state.withLock { state in
            guard !state.batch.isEmpty else { return }
            let group = state.batch
            state.batch = []
            channel.yield(group)
        }
    }

    func end(_ reason: String) {
        state.withLock { state in
            guard !state.ended else { return }
            state.ended = true
            // Values that arrived before the end go first.
            var group = state.batch
            state.batch = []
            group.append(.disconnected(reason: reason))
            channel.finish(after: group)
        }
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
    public var events: AsyncStream<MeterLinkEvent> { core.channel.events }
    /// The values of each dispatch pass as one group (see `LinkCore`).
    public var eventGroups: AsyncStream<[MeterLinkEvent]> { core.channel.eventGroups }
    /// Characteristic paths by lower-case 128-bit UUID.
    public let characteristicPaths: [String: String]
    /// Timeout of GATT reads, writes and notification changes.
    public let operationTimeout: Duration

    private let client: BlueZClient
    private let core: LinkCore
    private let subscription: DBusSubscription

    static func rules(devicePath: String) -> [MatchRule] {
        [
            MatchRule(sender: BlueZNames.service, interface: DBusNames.properties, member: "PropertiesChanged",
                      pathNamespace: devicePath),
            MatchRule(sender: BlueZNames.service, interface: BlueZNames.device, member: "Disconnected", path: devicePath),
            MatchRule(sender: BlueZNames.service, interface: DBusNames.objectManager, member: "InterfacesRemoved"),
            MatchRule(sender: DBusNames.bus, interface: DBusNames.bus, member: "NameOwnerChanged",
                      path: DBusNames.busPath, arguments: [0: BlueZNames.service]),
        ]
    }

    init(client: BlueZClient, address: String, devicePath: String, core: LinkCore,
         characteristics: [String: String], subscription: DBusSubscription,
         operationTimeout: Duration = .seconds(15)) {
        self.client = client
        self.address = address
        self.devicePath = devicePath
        self.core = core
        self.characteristicPaths = characteristics
        self.subscription = subscription
        self.operationTimeout = operationTimeout
        core.setCharacteristics(characteristics)
    }

    deinit {
        subscription.cancel()
    }

    private func path(of uuid: GATTUUID) throws(MeterLinkError) -> String {
        guard let path = characteristicPaths[uuid.uuidString] else {
            throw MeterLinkError(.notSupported, "the meter has no characteristic \(uuid)")
        }
        return path
    }

    private func call(_ path: String, _ member: String, _ arguments: [DBusValue]) async throws(MeterLinkError) -> [DBusValue] {
        guard !core.isEnded else { throw MeterLinkError(.disconnected, "the link to \(address) is closed") }
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
        let path = try path(of: uuid)
        // Marked before: the first records can arrive ahead of WriteValue's reply.
        if uuid == .recordAccessControlPoint { core.racpRequest(value, writing: true) }
        do {
            _ = try await call(path, "WriteValue", [.bytes(value), .vardict(["type": .string("request")])])
        } catch {
            if uuid == .recordAccessControlPoint { core.racpRequest(value, writing: false) }
            throw error
        }
    }

    public func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) {
        let path = try path(of: uuid)
        // Mark first: the first value can arrive right behind StartNotify's reply.
        core.setSubscribed(uuid, true)
        do {
            _ = try await call(path, "StartNotify", [])
        } catch {
            core.setSubscribed(uuid, false)
            throw error
        }
    }

    /// Every `ReadValue` sent at once and the replies awaited together (bluetoothd queues the ATT reads
    /// in the order they came).
    public func read(_ uuids: [GATTUUID]) async -> [Result<[UInt8], MeterLinkError>] {
        await callTogether(uuids, "ReadValue", [.vardict([:])]).enumerated().map { index, result in
            result.flatMap { reply in
                guard let bytes = reply.first?.bytes else {
                    return .failure(MeterLinkError(.permanent, "ReadValue of \(uuids[index]) returned no bytes"))
                }
                return .success(bytes)
            }
        }
    }

    /// Every `StartNotify` sent at once and the replies awaited together; each characteristic is marked
    /// subscribed before, as by `subscribe`, and unmarked when its call fails.
    public func subscribe(_ uuids: [GATTUUID]) async -> [Result<Void, MeterLinkError>] {
        for uuid in uuids where characteristicPaths[uuid.uuidString] != nil { core.setSubscribed(uuid, true) }
        let results = await callTogether(uuids, "StartNotify", [])
        return zip(uuids, results).map { uuid, result in
            result.map { _ in () }.mapError { error in
                if characteristicPaths[uuid.uuidString] != nil { core.setSubscribed(uuid, false) }
                return error
            }
        }
    }

    /// `member` on each characteristic in one round; a characteristic the meter lacks fails alone.
    private func callTogether(_ uuids: [GATTUUID], _ member: String, _ arguments: [DBusValue]) async -> [Result<[DBusValue], MeterLinkError>] {
        var results = [Result<[DBusValue], MeterLinkError>](repeating: .failure(MeterLinkError(.disconnected, "the link to \(address) is closed")),
                                                            count: uuids.count)
        guard !core.isEnded else { return results }
        var calls: [DBusCall] = []
        var positions: [Int] = []
        for (index, uuid) in uuids.enumerated() {
            do {
                calls.append(DBusCall(destination: BlueZNames.service, path: try path(of: uuid),
                                      interface: BlueZNames.gattCharacteristic, member: member, arguments: arguments))
                positions.append(index)
            } catch {
                results[index] = .failure(error)
            }
        }
        guard !calls.isEmpty else { return results }
        let replies = await client.connection.callTogether(calls, timeout: operationTimeout)
        for (position, reply) in zip(positions, replies) {
            results[position] = reply.mapError { BlueZError($0).meterLinkError }
        }
        return results
    }

    public func unsubscribe(_ uuid: GATTUUID) async {
        guard let path = characteristicPaths[uuid.uuidString] else { return }
        core.setSubscribed(uuid, false)
        _ = try? await call(path, "StopNotify", [])
    }

    /// Every `StopNotify` sent at once and the replies awaited together.
    public func unsubscribe(_ uuids: [GATTUUID]) async {
        let known = uuids.filter { characteristicPaths[$0.uuidString] != nil }
        for uuid in known { core.setSubscribed(uuid, false) }
        _ = await callTogether(known, "StopNotify", [])
    }

    /// Stops every notification (BlueZ keeps notify sessions across reconnects otherwise), in one round
    /// whose answers are in before `Disconnect`, then disconnects. The events end with `.disconnected`.
    public func disconnect() async {
        let subscribed = core.takeSubscriptions()
        let known = subscribed.sorted(by: { $0.rawValue < $1.rawValue }).filter { characteristicPaths[$0.uuidString] != nil }
        if !known.isEmpty { _ = await callTogether(known, "StopNotify", []) }
        let wasUp = !core.isEnded
        // End first, so that the Connected=false this causes is not reported as the meter leaving.
        core.end("disconnected by the gateway")
        subscription.cancel()
        if wasUp {
            _ = try? await client.connection.call(destination: BlueZNames.service, path: devicePath,
                                                  interface: BlueZNames.device, member: "Disconnect",
                                                  timeout: operationTimeout)
        }
    }
}
