import DBusKit
import GatewayCore
import GlucoseProfile
import Support

/// GATT: application registration (auto-connect), the service, characteristic and descriptor objects,
/// reads, writes and notify sessions, and the meter's notifications delivered to them.
extension BlueZStandIn {
    // MARK: GATT profile (auto-connect)

    /// `GattManager1.RegisterApplication`: accepted when the application holds a `GattProfile1` whose
    /// UUIDs include the Glucose Service (as bluetoothd then adds bonded devices offering it to its
    /// auto-connect list); GATT server applications are still refused (the stand-in plays meters only).
    func registerApplication(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
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
            throw bluezError("NotSupported", "The stand-in plays meters only; use glucose-gateway-simulator --bluez on BlueZ")
        }
        profiles[sender, default: []].insert(root)
        await scanTick(run)
    }

    func unregisterApplication(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        let sender = call.sender
        guard let root = call.arguments.first?.objectPath, profiles[sender]?.remove(root) != nil else { throw bluezError("DoesNotExist", "Does Not Exist") }
        if profiles[sender]?.isEmpty == true { profiles.removeValue(forKey: sender) }
    }

    /// bluetoothd connecting a bonded meter by itself (passive scan and accept list): no `Connect` call.
    func autoConnect(_ address: String, _ run: BluetoothdRun) {
        autoConnecting.insert(address)
        Task { [weak self] in
            guard let self else { return }
            do {
                try await self.establishLink(address, run)
                await self.autoConnected(address, run)
            } catch {
                await self.autoConnectEnded(address)
            }
        }
    }

    private func autoConnected(_ address: String, _ run: BluetoothdRun) {
        autoConnecting.remove(address)
        devices[address]?.temporary = false
        scheduleServiceResolution(address, run)
    }

    private func autoConnectEnded(_ address: String) {
        autoConnecting.remove(address)
    }

    // MARK: GATT objects

    func exportGATT(_ address: String, _ run: BluetoothdRun) async {
        guard let c = connection, let m = meters[address], !run.isOver else { return }
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
                            return [.bytes(try await self.readValue(address, uuid, cp, call, run))]
                        },
                        DBusMethod("WriteValue", in: "aya{sv}") { [weak self] call in
                            guard let self else { return [] }
                            try await self.writeValue(address, uuid, call, run)
                            return []
                        },
                        DBusMethod("StartNotify") { [weak self] call in
                            guard let self else { return [] }
                            try await self.startNotify(address, uuid, cp, call, run)
                            return []
                        },
                        DBusMethod("AcquireNotify", in: "a{sv}", out: "hq") { [weak self] call in
                            guard let self else { return [] }
                            return try await self.acquireNotify(address, uuid, cp, call, run)
                        },
                        DBusMethod("StopNotify") { [weak self] call in
                            guard let self else { return [] }
                            try await self.stopNotify(address, uuid, cp, call, run)
                            return []
                        },
                    ], properties: props),
                ])
                if let dp = descPath(address, s, ch), let cccd = ch.cccdHandle {
                    try? await c.export(path: dp, interfaces: [
                        DBusInterface("org.bluez.GattDescriptor1", methods: [
                            DBusMethod("ReadValue", in: "a{sv}", out: "ay") { [weak self] call in
                                guard let self else { return [] }
                                return [.bytes(try await self.readCCCD(address, ch, cp, call, run))]
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

    private func checkAccess(_ address: String, _ uuid: GATTUUID, _ run: BluetoothdRun) throws {
        try run.check()
        guard devices[address]?.connected == true else { throw bluezError("Failed", "Not connected") }
        guard let m = meters[address] else { throw DBusError(.unknownObject, "Device is gone") }
        if m.layout.characteristic(uuid)?.needsBonding == true, !m.paired {
            throw bluezError("NotPermitted", "Not paired")
        }
    }

    private func readValue(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                           _ run: BluetoothdRun) async throws -> [UInt8] {
        log(call)
        try checkAccess(address, uuid, run)
        guard let m = meters[address], let value = await m.peripheral.read(uuid) else {
            throw bluezError("NotPermitted", "Read not permitted")
        }
        // A read updates the cached Value, which emits PropertiesChanged like a notification would.
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Value": .bytes(value)])
        return value
    }

    private func readCCCD(_ address: String, _ ch: GATTLayout.Characteristic, _ charPath: String,
                          _ call: DBusMethodCall, _ run: BluetoothdRun) async throws -> [UInt8] {
        log(call)
        try checkAccess(address, ch.uuid, run)
        let on = !(notifySessions[charPath] ?? []).isEmpty
        let bits: UInt8 = on ? (ch.flags.contains("notify") ? 0x01 : 0x02) : 0
        return [bits, 0]
    }

    private func writeValue(_ address: String, _ uuid: GATTUUID, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try checkAccess(address, uuid, run)
        guard let m = meters[address], m.layout.characteristic(uuid)?.flags.contains("write") == true else {
            throw bluezError("NotPermitted", "Write not permitted")
        }
        guard let bytes = call.arguments.first?.bytes else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        if uuid != .recordAccessControlPoint {
            // The meter's clock (Current Time, Date Time or the vendor clock).
            do {
                try await m.peripheral.writeClock(uuid, bytes)
            } catch {
                throw bluezError("Failed", "Operation failed with ATT error: 0x" + hexString([error.code]))
            }
            return
        }
        if let type = call.arguments.dropFirst().first?.vardict?["type"]?.string, type == "command" {
            // RACP has no write-without-response property.
            throw bluezError("NotSupported", "Operation is not supported")
        }
        do {
            try await m.peripheral.writeRACP(bytes)
        } catch {
            throw bluezError("Failed", "Operation failed with ATT error: 0x" + hexString([error.code]))
        }
        // The write response reaches the client before the first notification of the procedure.
        let peripheral = m.peripheral
        Task {
            try? await Task.sleep(for: .milliseconds(20))
            await peripheral.runProcedure()
        }
    }

    private func startNotify(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                             _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        try checkAccess(address, uuid, run)
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
                            _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard var sessions = notifySessions[path], sessions.remove(call.sender) != nil else {
            throw bluezError("Failed", "No notify session started")
        }
        notifySessions[path] = sessions
        if sessions.isEmpty { await endNotify(address, uuid, path) }
    }

    func endNotify(_ address: String, _ uuid: GATTUUID, _ path: String) async {
        notifySessions.removeValue(forKey: path)
        await meters[address]?.peripheral.setSubscribed(uuid, false)
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Notifying": .bool(false)])
    }

    private func acquireNotify(_ address: String, _ uuid: GATTUUID, _ path: String, _ call: DBusMethodCall,
                               _ run: BluetoothdRun) async throws -> [DBusValue] {
        log(call)
        try run.check()
        guard options.offerAcquireNotify, meters[address]?.layout.characteristic(uuid)?.flags.contains("notify") == true else {
            throw bluezError("NotSupported", "Operation is not supported")
        }
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        try checkAccess(address, uuid, run)
        guard acquired[path] == nil else { throw bluezError("NotPermitted", "Notify acquired") }
        guard (notifySessions[path] ?? []).isEmpty else { throw bluezError("InProgress", "In Progress") }
        let session = try AcquiredNotify.open(owner: call.sender) { [weak self] in
            Task { await self?.releaseAcquired(path) }
        }
        acquired[path] = session
        await meters[address]?.peripheral.setSubscribed(uuid, true)
        await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1",
                                        ["NotifyAcquired": .bool(true), "Notifying": .bool(true)])
        return [.unixFD(session.peerDescriptor), .uint16(23)]
    }

    /// The client closed its end, the link dropped, or bluetoothd went away.
    func releaseAcquired(_ path: String) async {
        guard let session = acquired.removeValue(forKey: path) else { return }
        session.close()
        if let (address, _, ch) = lookupCharacteristic(path) {
            await meters[address]?.peripheral.setSubscribed(ch.uuid, false)
            await connection?.setProperties(path: path, interface: "org.bluez.GattCharacteristic1",
                                            ["NotifyAcquired": .bool(false), "Notifying": .bool(false)])
        }
    }

    // MARK: Meter events

    func handle(_ event: PeripheralEvent, from address: String) async {
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
                let run = currentRun
                Task { [weak self] in
                    try? await Task.sleep(for: Self.lateRecordsDelay)
                    await self?.deliverLate(address, held, run)
                }
                return
            }
            await deliver(address, uuid, bytes)
        case .dropLink:
            logger.info("meter \(address) drops the link")
            await disconnectLink(address, reason: "org.bluez.Reason.Remote")
        case .advertising(let on):
            logger.debug("meter \(address) advertising \(on ? "on" : "off")")
            if on { await scanTick(currentRun) }
        case .recordAdded(let seq):
            logger.info("meter \(address) stored record \(seq)")
        }
    }

    private func deliverLate(_ address: String, _ values: [(GATTUUID, [UInt8])], _ run: BluetoothdRun) async {
        guard !run.isOver else { return }
        for (uuid, bytes) in values {
            guard devices[address]?.connected == true else { return }
            await deliver(address, uuid, bytes)
        }
    }

    /// One value into an acquired socket. bluetoothd drops a value that finds the socket full; on a real
    /// link the radio is slower than any reader, so that takes a reader stalled for hundreds of values.
    /// The stand-in sends as fast as it can, so it waits for room instead, as long as a radio might have
    /// taken (up to 2 s), then drops the value as bluetoothd does (the quirk `full-socket` drops two at once).
    private func send(_ bytes: [UInt8], through session: AcquiredNotify, of path: String) async {
        let patience = ContinuousClock.now + .seconds(2)
        while true {
            switch session.send(bytes) {
            case .sent:
                return
            case .gone:
                await releaseAcquired(path)
                return
            case .full:
                if ContinuousClock.now >= patience {
                    droppedValues += 1
                    logger.warning("notification socket of \(path) is full: value dropped")
                    return
                }
                try? await Task.sleep(for: .milliseconds(1))
            }
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
                    if uuid == .glucoseMeasurement, quirks[address]?.contains(.fullSocket) == true {
                        let count = fullSocketCount[address, default: 0] + 1
                        fullSocketCount[address] = count
                        if count == 6 {
                            quirks[address]?.remove(.fullSocket)
                            fullSocketCount[address] = nil
                        }
                        if count == 5 || count == 6 {
                            droppedValues += 1
                            logger.warning("notification socket of \(path) is full: value dropped (quirk full-socket)")
                            continue
                        }
                    }
                    await send(bytes, through: session, of: path)
                    continue
                }
                await c.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Value": .bytes(bytes)])
            }
        }
    }
}
