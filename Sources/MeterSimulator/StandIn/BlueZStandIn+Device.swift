import DBusKit
import GatewayCore
import GlucoseProfile

/// `org.bluez.Device1` objects: properties, connecting, service resolution and disconnecting.
extension BlueZStandIn {
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

    func exportDevice(_ address: String, _ run: BluetoothdRun) async throws {
        guard let c = connection, !run.isOver, adapterPresent else { return }
        let path = devicePath(address)
        try await c.export(path: path, interfaces: [
            DBusInterface("org.bluez.Device1", methods: [
                DBusMethod("Connect") { [weak self] call in
                    guard let self else { return [] }
                    try await self.connect(address, call, run)
                    return []
                },
                DBusMethod("Disconnect") { [weak self] call in
                    guard let self else { return [] }
                    try await self.disconnect(address, call, run)
                    return []
                },
                DBusMethod("Pair") { [weak self] call in
                    guard let self else { return [] }
                    try await self.pair(address, call, run)
                    return []
                },
                DBusMethod("CancelPairing") { [weak self] call in
                    guard let self else { return [] }
                    try await self.cancelPairing(address, call, run)
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
            signals: options.disconnectedSignal ? ["Disconnected": "ss"] : [:],
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

    func unexportDevice(_ address: String) async {
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

    func setDevice(_ address: String, _ changes: [String: DBusValue]) async {
        guard let c = connection, devices[address]?.exported == true else { return }
        await c.setProperties(path: devicePath(address), interface: "org.bluez.Device1", changes)
    }

    // MARK: Connect and disconnect

    private func connect(_ address: String, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
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
        if let m = meters[address], m.paired, m.forgotBond {
            try await refuseEncryption(address, run)
            return
        }
        if options.adapterWithoutPublicAddress, !discovery.isEmpty, meters[address]?.paired == true {
            logger.info("\(address): connecting while discovering from the scan's random address; the meter does not know it")
            try await refuseEncryption(address, run)
            return
        }
        try await establishLink(address, run)
        // The reply goes out when this returns; services resolve just after it, as in bluetoothd.
        scheduleServiceResolution(address, run, resolvedBeforeExport: early)
        pairingStartedByMeter(address, run)
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
        let run = currentRun
        if devices[address]?.exported != true {
            var d = devices[address] ?? Device()
            d.temporary = false
            devices[address] = d
            try await exportDevice(address, run)
        }
        guard devices[address]?.connected != true else { return }
        try await establishLink(address, run)
        await resolveServices(address, run)
    }

    /// Waits for the meter to be connectable and brings the link up (Connected=true).
    func establishLink(_ address: String, _ run: BluetoothdRun) async throws {
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
        try run.check()
        guard adapterPresent, devices[address] != nil else { throw bluezError("Failed", "br-connection-canceled") }
        devices[address]?.connected = true
        devices[address]?.profilesLeftConnected = false
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

    func scheduleServiceResolution(_ address: String, _ run: BluetoothdRun, resolvedBeforeExport: Bool = false) {
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(40))
            await self?.resolveServices(address, run, resolvedBeforeExport: resolvedBeforeExport)
        }
    }

    func resolveServices(_ address: String, _ run: BluetoothdRun, resolvedBeforeExport: Bool = false) async {
        guard !run.isOver, devices[address]?.connected == true, devices[address]?.servicesResolved == false else { return }
        if resolvedBeforeExport {
            devices[address]?.servicesResolved = true
            await setDevice(address, ["ServicesResolved": .bool(true)])
            try? await Task.sleep(for: .milliseconds(200))
            guard !run.isOver, devices[address]?.connected == true else { return }
            if devices[address]?.gattExported != true { await exportGATT(address, run) }
            return
        }
        if devices[address]?.gattExported != true {
            await exportGATT(address, run)
            await setDevice(address, ["UUIDs": .strings([GATTUUID.glucoseService.uuidString,
                                                         GATTUUID.deviceInformationService.uuidString])])
        }
        devices[address]?.servicesResolved = true
        await setDevice(address, ["ServicesResolved": .bool(true)])
    }

    private func disconnect(_ address: String, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        if let t = devices[address]?.connectTask {
            t.cancel()
            return
        }
        guard devices[address]?.connected == true else { throw bluezError("NotConnected", "Not Connected") }
        await disconnectLink(address, reason: "org.bluez.Reason.Local")
    }

    /// Takes the link down with BlueZ's signal order: ServicesResolved=false, `Disconnected(reason,
    /// message)` (BlueZ 5.83+), then Connected=false (`device_remove_connection` in `src/device.c` emits
    /// the signal before the property).
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
        if let c = connection, d.exported, options.disconnectedSignal {
            let message = switch reason {
            case "org.bluez.Reason.Remote": "Connection terminated by remote user"
            case "org.bluez.Reason.Authentication": "Connection terminated due to authentication failure"
            default: "Connection terminated by local host"
            }
            try? await c.emitSignal(path: devicePath(address), interface: "org.bluez.Device1", member: "Disconnected",
                                    arguments: [.string(reason), .string(message)])
        }
        await setDevice(address, ["Connected": .bool(false)])
        if options.removalWaitsForNextLinkAfterAuthenticationFailure, reason == "org.bluez.Reason.Authentication" {
            devices[address]?.profilesLeftConnected = true
        }
        if devices[address]?.removalPending == true {
            logger.info("\(address): its link ended; carrying out the removal asked for before")
            await finishRemoval(address)
        }
    }
}
