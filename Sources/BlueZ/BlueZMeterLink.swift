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
        // Connect from the adapter's identity address: an adapter with no public address (a static
        // random one, as some USB dongles have) that connects while it scans connects from the
        // non-resolvable address of its last active scan (Linux 6.1 defers the switch back while the
        // connection is pending), and a bonded meter, which knows only the identity address, refuses
        // the key. So this client's discovery pauses while it connects.
        await pauseDiscoveryForConnect()
        do {
            let link = try await connectAttempts(address: address, timeout: timeout, retry: retry)
            await resumeDiscoveryAfterConnect()
            return link
        } catch {
            await resumeDiscoveryAfterConnect()
            throw error
        }
    }

    private func connectAttempts(address: String, timeout: Duration, retry: ConnectRetry) async throws(BlueZError) -> BlueZMeterLink {
        let deadline = ContinuousClock.now + timeout
        func remaining() -> Duration { deadline - ContinuousClock.now }
        var attempt = 0
        // Attempts refused at encryption. An attempt that failed otherwise (in the meter's pause between
        // bursts of advertising: an abort, a Connect with no reply) is no working connection and leaves
        // the count as it is.
        var refusals = 0
        while true {
            attempt += 1
            do {
                return try await connectOnce(address: address, deadline: deadline, refusedWithin: retry.refusedWithin)
            } catch {
                var error = error
                if error.authenticationFailure != nil, await connectsFromScanAddress(address: address) {
                    // Someone else's discovery runs on an adapter with no public address: the link may
                    // have come from a scan address the meter does not know. No evidence of a lost
                    // bond; tried again like any drop.
                    logger.info("bluez: \(address) refused the key while the adapter (no public address) was scanning for another client; not counted as a lost bond")
                    error.authenticationFailure = nil
                }
                if error.authenticationFailure != nil, bonded(address) { refusals += 1 }
                if let why = error.authenticationFailure, refusals >= Self.bondLostAttempts {
                    throw BlueZError(.bondLost, "\(address) refused the encryption with this gateway's key \(refusals) times with no working connection between (\(why)): the meter no longer has the bond (reset, or paired with another device)")
                }
                error.keyRefusals = refusals
                guard error.kind == .transient, attempt < retry.attempts else { throw error }
                let pause = retry.delay(before: attempt)
                guard remaining() > pause + .milliseconds(100) else { throw error }
                logger.info("bluez: connecting \(address) failed (\(error)); retry \(attempt) in \(pause)")
                do { try await Task.sleep(for: pause) } catch { throw BlueZError(.timeout, "cancelled while connecting") }
            }
        }
    }

    /// Whether the device's adapter has no public address (`AddressType` "random") and is discovering now
    /// (asked of bluetoothd, not the mirror): Linux then connects from the scan's address.
    private func connectsFromScanAddress(address: String) async -> Bool {
        guard let device = device(address: address),
              let adapterPath = objects[device.path]?[BlueZNames.device]?["Adapter"]?.objectPath,
              objects[adapterPath]?[BlueZNames.adapter]?["AddressType"]?.string == "random" else { return false }
        let reply = try? await callBlueZ(path: adapterPath, interface: DBusNames.properties, member: "Get",
                                         arguments: [.string(BlueZNames.adapter), .string("Discovering")], timeout: .seconds(5))
        return reply?.first?.bool ?? false
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
        let core = LinkCore(devicePath: path, owner: currentOwner, logger: logger, clock: linkClock)
        let subscription: DBusSubscription
        do {
            subscription = try await connection.subscribe(
                BlueZMeterLink.rules(devicePath: path),
                onMessage: { core.handle($0) },
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
                // Also for a Connect that got no reply in time: the link may have come up and been
                // refused at encryption meanwhile (seen with a meter advertising in bursts).
                var failed = error
                failed.authenticationFailure = core.authenticationFailure(within: refusedWithin)
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
                              characteristics: characteristics(of: path),
                              acquirable: acquiresNotifications ? acquirableCharacteristics(of: path) : [],
                              subscription: subscription)
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

/// A connected meter with resolved services, over BlueZ.
///
/// `events` merges the values of every subscribed characteristic, in the order bluetoothd sent them (one
/// `PropertiesChanged` per notification, or one packet on the socket of an `AcquireNotify`: see
/// `LinkCore`), and ends with `.disconnected(reason:)` when the meter disconnects, its object vanishes,
/// bluetoothd stops, the bus is lost, or ``disconnect()`` is called.
///
/// The two characteristics that carry a report's records, Glucose Measurement and its context, are
/// subscribed with `AcquireNotify` where bluetoothd offers it: their values then come through a socket of
/// their own, one packet each, and never cross the bus. Where the acquisition fails (another client of
/// bluetoothd subscribed the characteristic first: `InProgress`; `NotSupported`; `NotPermitted`), and
/// for every other characteristic (the RACP, which indicates; a vendor clock's one answer),
/// `StartNotify` is used.
public final class BlueZMeterLink: MeterLink {
    public let address: String
    public let devicePath: String
    public var events: AsyncStream<MeterLinkEvent> { core.channel.events }
    /// The values of each dispatch pass as one group (see `LinkCore`).
    public var eventGroups: AsyncStream<[MeterLinkEvent]> { core.channel.eventGroups }
    /// Characteristic paths by lower-case 128-bit UUID.
    public let characteristicPaths: [String: String]
    /// Paths of the characteristics whose notifications can be acquired (see `BlueZClient.acquirableCharacteristics`).
    let acquirable: Set<String>
    /// The characteristics subscribed through `AcquireNotify` where it is offered.
    static let acquired: Set<GATTUUID> = [.glucoseMeasurement, .glucoseMeasurementContext]
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
         characteristics: [String: String], acquirable: Set<String> = [], subscription: DBusSubscription,
         operationTimeout: Duration = .seconds(15)) {
        self.client = client
        self.address = address
        self.devicePath = devicePath
        self.core = core
        self.characteristicPaths = characteristics
        self.acquirable = acquirable
        self.subscription = subscription
        self.operationTimeout = operationTimeout
        core.setCharacteristics(characteristics)
    }

    deinit {
        subscription.cancel()
        core.closeSockets()
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
        // An unknown characteristic is named as such, also on a link that has ended.
        _ = try path(of: uuid)
        if case .failure(let error) = await subscribe([uuid]).first { throw error }
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

    /// Subscribes to each of `uuids` in two rounds at most: every `AcquireNotify` at once, then every
    /// `StartNotify` (for the rest, and for those whose acquisition failed), the replies of each round
    /// awaited together. Each characteristic is marked subscribed before (its first value can arrive right
    /// behind the reply) and unmarked when it could not be subscribed.
    public func subscribe(_ uuids: [GATTUUID]) async -> [Result<Void, MeterLinkError>] {
        for uuid in uuids where characteristicPaths[uuid.uuidString] != nil { core.setSubscribed(uuid, true) }
        var results = [Result<Void, MeterLinkError>?](repeating: nil, count: uuids.count)
        let acquiring = uuids.indices.filter { index in
            Self.acquired.contains(uuids[index])
                && characteristicPaths[uuids[index].uuidString].map(acquirable.contains) == true
        }
        if !acquiring.isEmpty {
            let replies = await callTogether(acquiring.map { uuids[$0] }, "AcquireNotify", [.vardict([:])])
            for (index, reply) in zip(acquiring, replies) {
                switch reply {
                case .success(let values):
                    guard case .unixFD(let descriptor)? = values.first, descriptor >= 0 else {
                        client.logger.info("bluez: AcquireNotify of \(uuids[index]) on \(address) returned no socket; using StartNotify")
                        continue
                    }
                    guard core.attach(uuids[index], descriptor: descriptor) else {
                        results[index] = .failure(MeterLinkError(.disconnected, "the link to \(address) is closed"))
                        continue
                    }
                    results[index] = .success(())
                    client.logger.debug("bluez: \(uuids[index]) of \(address) notifies through an acquired socket")
                case .failure(let error) where error.kind == .disconnected:
                    results[index] = .failure(error)
                case .failure(let error):
                    client.logger.info("bluez: AcquireNotify of \(uuids[index]) on \(address) failed (\(error.message)); using StartNotify")
                }
            }
        }
        let starting = uuids.indices.filter { results[$0] == nil }
        if !starting.isEmpty {
            let replies = await callTogether(starting.map { uuids[$0] }, "StartNotify", [])
            for (index, reply) in zip(starting, replies) { results[index] = reply.map { _ in () } }
        }
        return zip(uuids, results).map { uuid, result in
            let result = result ?? .failure(MeterLinkError(.disconnected, "the link to \(address) is closed"))
            if case .failure = result, characteristicPaths[uuid.uuidString] != nil {
                core.setSubscribed(uuid, false)
                core.detach(uuid)
            }
            return result
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
        await unsubscribe([uuid])
    }

    /// Closes the socket of each acquired one (bluetoothd then stops its notifications); every other
    /// `StopNotify` sent at once and the replies awaited together.
    public func unsubscribe(_ uuids: [GATTUUID]) async {
        let known = uuids.filter { characteristicPaths[$0.uuidString] != nil }
        for uuid in known { core.setSubscribed(uuid, false) }
        let started = known.filter { !core.detach($0) }
        if !started.isEmpty { _ = await callTogether(started, "StopNotify", []) }
    }

    /// Stops every notification (BlueZ keeps notify sessions across reconnects otherwise), in one round
    /// whose answers are in before `Disconnect`, then disconnects. The events end with `.disconnected`;
    /// ending them closes the acquired sockets.
    public func disconnect() async {
        let subscribed = core.takeSubscriptions()
        let known = subscribed.sorted(by: { $0.rawValue < $1.rawValue })
            .filter { characteristicPaths[$0.uuidString] != nil && !core.isAcquired($0) }
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
