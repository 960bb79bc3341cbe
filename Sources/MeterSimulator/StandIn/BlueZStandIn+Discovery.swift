import DBusKit
import GatewayCore
import GlucoseProfile

/// Discovery sessions and their filters, and the scan that turns advertisements into device objects.
extension BlueZStandIn {
    // MARK: Discovery

    func startDiscovery(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
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
        await scanTick(run)
    }

    func stopDiscovery(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard powered else { throw bluezError("NotReady", "Resource Not Ready") }
        guard discovery.removeValue(forKey: call.sender) != nil else {
            throw bluezError("Failed", "No discovery started")
        }
        if discovery.isEmpty { await discoveryEnded() }
    }

    /// The last discovery session ended. As bluetoothd's discovery cleanup: a device that is not connected
    /// is no longer heard, so its RSSI is invalidated (before the reply to a `StopDiscovery`).
    func discoveryEnded() async {
        for address in order where devices[address]?.exported == true && devices[address]?.connected == false {
            await connection?.setProperties(path: devicePath(address), interface: "org.bluez.Device1", [:], invalidated: ["RSSI"])
        }
        await setAdapter(["Discovering": .bool(false)])
    }

    func setDiscoveryFilter(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
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

    func scanTick(_ run: BluetoothdRun) async {
        guard !run.isOver, adapterPresent, powered, connection != nil else { return }
        let now = ContinuousClock.now
        for address in order {
            guard let m = meters[address] else { continue }
            let advertising = await m.peripheral.isAdvertising
            let d = devices[address]
            if advertising, d?.connected != true, discoveryMatches(m.description) {
                await seen(address, run)
            }
            if advertising, !profiles.isEmpty, m.paired, let d, d.exported, !d.connected, d.connectTask == nil, d.pairTask == nil,
               !autoConnecting.contains(address) {
                autoConnect(address, run)
            } else if let d, d.exported, d.temporary, !d.connected,
                      now - d.lastSeen > .milliseconds(Int64(options.clock.realSeconds(options.temporaryTimeout) * 1000)) {
                logger.info("device \(address) expired")
                await unexportDevice(address)
                devices.removeValue(forKey: address)
            }
        }
    }

    /// An advertisement from the meter: a new device object, or an RSSI update of a known one.
    func seen(_ address: String, _ run: BluetoothdRun) async {
        var d = devices[address] ?? Device()
        d.lastSeen = .now
        let base = meters[address]?.description.rssi ?? -60
        d.rssi = base + Int16.random(in: -3...3)
        let wasExported = d.exported
        devices[address] = d
        if wasExported {
            await connection?.setProperties(path: devicePath(address), interface: "org.bluez.Device1", ["RSSI": .int16(d.rssi)])
        } else {
            try? await exportDevice(address, run)
        }
    }
}
