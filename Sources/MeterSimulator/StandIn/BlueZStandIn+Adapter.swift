import DBusKit
import GatewayCore
import GlucoseProfile

/// `org.bluez.Adapter1` with `GattManager1` and `LEAdvertisingManager1` on the adapter, hot-plug, rfkill.
extension BlueZStandIn {
    // MARK: Adapter objects

    private func adapterProperties() -> [String: DBusValue] {
        var discovering = false
        if powered { discovering = !discovery.isEmpty }
        return [
            "Address": .string(options.adapterAddress),
            // BlueZ says "random" for an adapter that has only a static random address.
            "AddressType": .string(options.adapterWithoutPublicAddress ? "random" : "public"),
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

    func exportAdapter(_ run: BluetoothdRun) async throws {
        guard let c = connection else { return }
        try await c.export(path: adapterPath, interfaces: [
            adapterInterface(run),
            DBusInterface("org.bluez.GattManager1", methods: [
                DBusMethod("RegisterApplication", in: "oa{sv}") { [weak self] call in
                    guard let self else { return [] }
                    try await self.registerApplication(call, run)
                    return []
                },
                DBusMethod("UnregisterApplication", in: "o") { [weak self] call in
                    guard let self else { return [] }
                    try await self.unregisterApplication(call, run)
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
            try await exportDevice(address, run)
        }
    }

    private func adapterInterface(_ run: BluetoothdRun) -> DBusInterface {
        DBusInterface("org.bluez.Adapter1", methods: [
            DBusMethod("StartDiscovery") { [weak self] call in
                guard let self else { return [] }
                try await self.startDiscovery(call, run)
                return []
            },
            DBusMethod("StopDiscovery") { [weak self] call in
                guard let self else { return [] }
                try await self.stopDiscovery(call, run)
                return []
            },
            DBusMethod("SetDiscoveryFilter", in: "a{sv}") { [weak self] call in
                guard let self else { return [] }
                try await self.setDiscoveryFilter(call, run)
                return []
            },
            DBusMethod("GetDiscoveryFilters", out: "as") { _ in
                [.strings(["UUIDs", "RSSI", "Pathloss", "Transport", "DuplicateData", "Discoverable", "Pattern"])]
            },
            DBusMethod("RemoveDevice", in: "o") { [weak self] call in
                guard let self else { return [] }
                try await self.removeDevice(call, run)
                return []
            },
        ], properties: adapterProperties(), writableProperties: ["Powered", "Alias", "Discoverable", "Pairable"],
        setter: { [weak self] name, value, call in
            guard let self else { return }
            try await self.setAdapterProperty(name, value, call, run)
        })
    }

    private func setAdapterProperty(_ name: String, _ value: DBusValue, _ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
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

    func setAdapter(_ changes: [String: DBusValue]) async {
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
        let run = currentRun
        powerChanges += 1
        let token = powerChanges
        try await exportAdapter(run)
        guard wasPowered, !rfkillBlocked else { return }
        Task { [weak self] in
            try? await Task.sleep(for: .milliseconds(50))
            await self?.autoEnable(run, token)
        }
    }

    private func autoEnable(_ run: BluetoothdRun, _ token: Int) async {
        guard !run.isOver, token == powerChanges, adapterPresent, !powered, !rfkillBlocked else { return }
        await setAdapter(["PowerState": .string("off-enabling")])
        powered = true
        await setAdapter(["Powered": .bool(true), "PowerState": .string("on")])
    }

    // MARK: rfkill

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

    // MARK: RemoveDevice

    private func removeDevice(_ call: DBusMethodCall, _ run: BluetoothdRun) async throws {
        log(call)
        try run.check()
        guard let path = call.arguments.first?.objectPath else { throw bluezError("InvalidArguments", "Invalid arguments in method call") }
        guard let address = address(ofDevicePath: path), devices[address]?.exported == true else {
            throw bluezError("DoesNotExist", "Does Not Exist")
        }
        devices[address]?.pairTask?.cancel()
        devices[address]?.connectTask?.cancel()
        if devices[address]?.profilesLeftConnected == true, devices[address]?.connected != true {
            // BlueZ 5.82 after an authentication failure: the reply goes out, and the object, its bond
            // and its key go only when the device's next link ends (`disconnectLink`).
            logger.info("\(address): removal deferred until its next link ends (its profiles still count as connected)")
            devices[address]?.removalPending = true
            return
        }
        if let delay = options.removalAfterDisconnect, devices[address]?.connected == true {
            // BlueZ 5.82: the reply goes out now; the link, then the object and its bond, go later.
            let clock = options.clock
            Task { [weak self] in
                try? await clock.sleep(seconds: delay)
                guard let self, !run.isOver else { return }
                await self.finishRemoval(address)
            }
            return
        }
        await finishRemoval(address)
    }

    /// Takes the link down, then removes the device object and forgets its bond.
    func finishRemoval(_ address: String) async {
        guard devices[address]?.exported == true else { return }
        await disconnectLink(address, reason: "org.bluez.Reason.Local")
        await unexportDevice(address)
        devices.removeValue(forKey: address)
        meters[address]?.paired = false
        meters[address]?.trusted = false
        saveState()
    }
}
