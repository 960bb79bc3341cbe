import DBusKit
import GatewayCore
import GlucoseProfile
import Support

/// Plays one meter on a real BlueZ adapter: a GATT application through
/// `org.bluez.GattManager1.RegisterApplication` and an advertisement through
/// `org.bluez.LEAdvertisingManager1.RegisterAdvertisement`, so a second adapter or a second Pi can sit next
/// to a gateway as a meter.
///
/// bluetoothd owns the link here: it writes the client configuration (calling `StartNotify`/`StopNotify`
/// on our characteristics), turns our `Value` changes into notifications and indications, and maps the
/// error `org.bluez.Error.Failed` with message `0x80`/`0x81` to those ATT errors (BlueZ 5.65+; older
/// versions send 0x80 for any `Failed`). Pairing needs an agent on this side, registered as the default
/// agent of the meter's bluetoothd (whose capability becomes the adapter's IO capability):
/// - `.fixed(PIN)`: a KeyboardOnly agent answering `RequestPasskey` with the meter's PIN. Both sides then
///   type the passkey (SMP passkey entry), which a central cannot tell from a meter showing its PIN; a
///   gateway given another PIN fails with `AuthenticationFailed`.
/// - `.display`: a DisplayOnly agent; the kernel chooses the passkey and `DisplayPasskey` passes it to
///   `Options.display`, as on a meter whose display shows a new PIN each time.
public actor BlueZPeripheralFrontEnd {
    /// Where the passkey of a pairing comes from.
    public enum PasskeySource: Sendable, Equatable {
        /// The meter's own PIN, typed by a KeyboardOnly agent.
        case fixed(UInt32)
        /// Chosen by the kernel and shown through `Options.display`.
        case display
    }

    public struct Options: Sendable {
        public var busAddress: String
        public var adapterName: String
        public var clock: SimulationClock
        /// Registers the pairing agent as default (see `passkey`).
        public var registerAgent: Bool
        public var passkey: PasskeySource
        /// The meter's display: receives the passkey text to show (never logged).
        public var display: @Sendable (String) -> Void
        public init(busAddress: String, adapterName: String = "hci0", clock: SimulationClock = SimulationClock(),
                    registerAgent: Bool = true, passkey: PasskeySource = .display,
                    display: @escaping @Sendable (String) -> Void = { _ in }) {
            self.busAddress = busAddress
            self.adapterName = adapterName
            self.clock = clock
            self.registerAgent = registerAgent
            self.passkey = passkey
            self.display = display
        }
    }

    /// The address of `adapterName` as bluetoothd reports it: on real BlueZ the meter has its adapter's address.
    public static func adapterAddress(busAddress: String, adapterName: String) async throws -> String {
        let c = try await DBusConnection.connect(address: busAddress)
        let reply: [DBusValue]
        do {
            reply = try await c.call(destination: "org.bluez", path: "/org/bluez/" + adapterName,
                                     interface: DBusNames.properties, member: "Get",
                                     arguments: [.string("org.bluez.Adapter1"), .string("Address")], timeout: .seconds(10))
        } catch {
            await c.close()
            throw error
        }
        await c.close()
        guard let address = reply.first?.string, let normalized = MeterDescription.normalizedAddress(address) else {
            throw DBusError(.failed, "adapter \(adapterName) reports no address")
        }
        return normalized
    }

    let options: Options
    let logger: Logger
    let meter: MeterDescription
    let peripheral: MeterPeripheral
    let layout: GATTLayout
    private var connection: DBusConnection?
    private var advertisementRegistered = false
    /// The central's device object on our adapter, from the `device` option of the last access.
    private var centralDevice: String?
    private var eventTask: Task<Void, Never>?
    private var watchTask: Task<Void, Never>?
    /// When the last notification of the running procedure went to bluetoothd.
    private var lastNotificationAt: ContinuousClock.Instant?
    /// The adapter's alias before the meter took it, restored at `stop()`.
    private var originalAlias: String?

    /// How long the RACP response waits after the procedure's last notification. bluetoothd's GATT
    /// server batches notifications for 10 ms into one ATT Multiple Handle Value Notification
    /// (`NFY_MULT_TIMEOUT`, `src/shared/gatt-server.c`) but sends an indication at once, and with EATT on
    /// another bearer: without a pause the response overtakes the records it ends, which a real meter
    /// never does.
    static let responsePause: Duration = .milliseconds(50)

    /// The wait before indicating an RACP value now, after a notification at `lastNotificationAt`.
    static func responseDelay(lastNotificationAt: ContinuousClock.Instant?, now: ContinuousClock.Instant) -> Duration {
        guard let last = lastNotificationAt else { return .zero }
        let since = now - last
        return since >= responsePause ? .zero : responsePause - since
    }

    static let root = "/org/glucosegateway/meter"

    public init(meter: MeterDescription, options: Options, logger: Logger) {
        self.meter = meter
        self.options = options
        self.logger = logger
        self.layout = GATTLayout(meter: meter)
        self.peripheral = MeterPeripheral(meter: meter, clock: options.clock)
    }

    var adapterPath: String { "/org/bluez/" + options.adapterName }
    var advertisementPath: String { "/org/glucosegateway/advertisement0" }
    func servicePath(_ i: Int) -> String { Self.root + "/service\(i)" }
    func charPath(_ i: Int, _ j: Int) -> String { servicePath(i) + "/char\(j)" }

    /// Connects, exports the application, registers it and starts advertising per the meter's plan.
    public func start() async throws {
        let c = try await DBusConnection.connect(address: options.busAddress)
        connection = c
        try await c.exportObjectManager(at: Self.root)
        try await exportApplication(c)
        try await c.export(path: advertisementPath, interfaces: [advertisementInterface()])
        if options.registerAgent { await registerAgent(c) }
        await takeAlias(c)
        _ = try await c.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.GattManager1",
                             member: "RegisterApplication", arguments: [.objectPath(Self.root), .vardict([:])],
                             timeout: .seconds(30))
        logger.notice("GATT application registered on \(options.adapterName)")
        let peripheral = self.peripheral
        eventTask = Task { [weak self] in
            for await event in peripheral.events { await self?.handle(event) }
        }
        await watchCentralLinks(c)
        await peripheral.start()
    }

    public func stop() async {
        eventTask?.cancel()
        watchTask?.cancel()
        await peripheral.stop()
        if let c = connection {
            if advertisementRegistered {
                _ = try? await c.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.LEAdvertisingManager1",
                                      member: "UnregisterAdvertisement", arguments: [.objectPath(advertisementPath)],
                                      timeout: .seconds(5))
            }
            _ = try? await c.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.GattManager1",
                                  member: "UnregisterApplication", arguments: [.objectPath(Self.root)], timeout: .seconds(5))
            if let originalAlias {
                _ = try? await c.call(destination: "org.bluez", path: adapterPath, interface: DBusNames.properties, member: "Set",
                                      arguments: [.string("org.bluez.Adapter1"), .string("Alias"), .variant(.string(originalAlias))],
                                      timeout: .seconds(5))
                self.originalAlias = nil
            }
            await c.close()
        }
        connection = nil
    }

    public func waitUntilBusLost() async {
        await connection?.waitForDisconnect()
    }

    // MARK: Objects

    private func exportApplication(_ c: DBusConnection) async throws {
        for (i, s) in layout.services.enumerated() {
            try await c.export(path: servicePath(i), interfaces: [
                DBusInterface("org.bluez.GattService1", properties: [
                    "UUID": .string(s.uuid.uuidString), "Primary": .bool(true), "Includes": .objectPaths([]),
                ]),
            ])
            for (j, ch) in s.characteristics.enumerated() {
                let path = charPath(i, j)
                var flags = ch.flags
                if ch.needsBonding {
                    flags = flags.map { f in
                        switch f {
                        case "read": "encrypt-authenticated-read"
                        case "write": "encrypt-authenticated-write"
                        default: f
                        }
                    }
                    if !flags.contains("encrypt-authenticated-read") && !flags.contains("encrypt-authenticated-write") {
                        // Notify-only characteristics: their client configuration needs the bond.
                        flags.append("encrypt-authenticated-read")
                    }
                }
                let uuid = ch.uuid
                try await c.export(path: path, interfaces: [
                    DBusInterface("org.bluez.GattCharacteristic1", methods: [
                        DBusMethod("ReadValue", in: "a{sv}", out: "ay") { [weak self] call in
                            guard let self else { return [] }
                            return [.bytes(try await self.readValue(uuid, call))]
                        },
                        DBusMethod("WriteValue", in: "aya{sv}") { [weak self] call in
                            guard let self else { return [] }
                            try await self.writeValue(uuid, call)
                            return []
                        },
                        DBusMethod("StartNotify") { [weak self] _ in
                            await self?.subscribe(uuid, true)
                            return []
                        },
                        DBusMethod("StopNotify") { [weak self] _ in
                            await self?.subscribe(uuid, false)
                            return []
                        },
                        DBusMethod("Confirm") { _ in [] },
                    ], properties: [
                        "UUID": .string(ch.uuid.uuidString), "Service": .objectPath(servicePath(i)),
                        "Flags": .strings(flags), "Value": .bytes([]),
                    ] .merging(ch.notifies ? ["Notifying": .bool(false)] : [:]) { a, _ in a }),
                ])
            }
        }
    }

    private func advertisementInterface() -> DBusInterface {
        DBusInterface("org.bluez.LEAdvertisement1", methods: [
            DBusMethod("Release") { [weak self] _ in
                await self?.released()
                return []
            },
        ], properties: [
            "Type": .string("peripheral"),
            "ServiceUUIDs": .strings([GATTUUID.glucoseService.uuidString]),
            "LocalName": .string(meter.name),
            "Discoverable": .bool(true),
            "Includes": .strings(["tx-power"]),
        ])
    }

    private func released() {
        advertisementRegistered = false
    }

    static let agentPath = "/org/glucosegateway/agent"

    /// A meter's GAP Device Name is its advertised name; bluetoothd serves the adapter's alias there, and a
    /// central's `Device1.Name` follows it once connected (seen on the real stack as "BlueZ 5.66"). So the
    /// adapter takes the meter's name while it plays the meter.
    private func takeAlias(_ c: DBusConnection) async {
        do {
            let reply = try await c.call(destination: "org.bluez", path: adapterPath, interface: DBusNames.properties, member: "Get",
                                         arguments: [.string("org.bluez.Adapter1"), .string("Alias")], timeout: .seconds(10))
            let old = reply.first?.string
            guard old != meter.name else { return }
            _ = try await c.call(destination: "org.bluez", path: adapterPath, interface: DBusNames.properties, member: "Set",
                                 arguments: [.string("org.bluez.Adapter1"), .string("Alias"), .variant(.string(meter.name))],
                                 timeout: .seconds(10))
            originalAlias = old
        } catch {
            logger.warning("the adapter keeps its own name (setting its alias failed: \(error))")
        }
    }

    /// The unique bus name of this front end's connection (where its agent lives), once started.
    public var uniqueName: String? { connection?.uniqueName }

    private func registerAgent(_ c: DBusConnection) async {
        let path = Self.agentPath
        let display = options.display
        let capability: String
        var typed: UInt32?
        switch options.passkey {
        case .display: capability = "DisplayOnly"
        case .fixed(let pin):
            capability = "KeyboardOnly"
            typed = pin
        }
        let answer = typed
        let logger = self.logger
        do {
            try await c.export(path: path, interfaces: [
                DBusInterface("org.bluez.Agent1", methods: [
                    DBusMethod("Release") { _ in [] },
                    DBusMethod("Cancel") { _ in [] },
                    DBusMethod("DisplayPasskey", in: "ouq") { call in
                        if call.arguments.count >= 2, let key = call.arguments[1].uint32 {
                            let digits = String(key)
                            display("passkey " + String(repeating: "0", count: max(0, 6 - digits.count)) + digits
                                    + " for " + (call.arguments[0].string ?? "?"))
                        }
                        return []
                    },
                    DBusMethod("RequestConfirmation", in: "ou") { _ in [] },
                    DBusMethod("RequestAuthorization", in: "o") { _ in [] },
                    DBusMethod("AuthorizeService", in: "os") { _ in [] },
                    DBusMethod("RequestPasskey", in: "o", out: "u") { call in
                        guard let answer, answer <= 999_999 else {
                            throw DBusError(name: "org.bluez.Error.Rejected", message: "the meter displays, it does not type")
                        }
                        logger.info("passkey requested for \(call.arguments.first?.objectPath ?? "?"): typing the meter's PIN")
                        return [.uint32(answer)]
                    },
                    DBusMethod("RequestPinCode", in: "o", out: "s") { _ in
                        throw DBusError(name: "org.bluez.Error.Rejected", message: "no PIN code")
                    },
                ]),
            ])
            _ = try await c.call(destination: "org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1",
                                 member: "RegisterAgent", arguments: [.objectPath(path), .string(capability)],
                                 timeout: .seconds(10))
            _ = try await c.call(destination: "org.bluez", path: "/org/bluez", interface: "org.bluez.AgentManager1",
                                 member: "RequestDefaultAgent", arguments: [.objectPath(path)], timeout: .seconds(10))
        } catch {
            logger.warning("no pairing agent: \(error)")
        }
    }

    // MARK: Link tracking

    /// Watches devices on our adapter: a central's `Connected` going false ends the link for the meter.
    private func watchCentralLinks(_ c: DBusConnection) async {
        guard let stream = try? await c.subscribe(MatchRule(type: .signal, interface: DBusNames.properties,
                                                            member: "PropertiesChanged", pathNamespace: adapterPath))
        else { return }
        watchTask = Task { [weak self] in
            for await m in stream {
                guard let path = m.path, m.body.count >= 2, m.body[0].string == "org.bluez.Device1",
                      let changes = m.body[1].vardict, let connected = changes["Connected"]?.bool else { continue }
                await self?.centralLink(path, connected)
            }
        }
    }

    private func centralLink(_ path: String, _ connected: Bool) async {
        if connected {
            centralDevice = path
            await peripheral.linkUp()
        } else if centralDevice == path || centralDevice == nil {
            logger.info("central \(path) disconnected")
            centralDevice = nil
            await peripheral.linkDown()
            for (i, s) in layout.services.enumerated() {
                for (j, ch) in s.characteristics.enumerated() where ch.notifies {
                    await connection?.setProperties(path: charPath(i, j), interface: "org.bluez.GattCharacteristic1",
                                                    ["Notifying": .bool(false)])
                }
            }
        }
    }

    private func noteDevice(_ call: DBusMethodCall) async {
        guard let options = call.arguments.last?.vardict, let device = options["device"]?.objectPath else { return }
        if centralDevice != device {
            centralDevice = device
            await peripheral.linkUp()
        }
    }

    // MARK: GATT

    private func readValue(_ uuid: GATTUUID, _ call: DBusMethodCall) async throws -> [UInt8] {
        await noteDevice(call)
        guard var value = await peripheral.read(uuid) else {
            throw DBusError(name: "org.bluez.Error.NotPermitted", message: "Read not permitted")
        }
        if let offset = call.arguments.first?.vardict?["offset"]?.int64, offset > 0 {
            guard offset <= value.count else { throw DBusError(name: "org.bluez.Error.InvalidOffset", message: "Invalid offset") }
            value = Array(value.dropFirst(Int(offset)))
        }
        return value
    }

    private func writeValue(_ uuid: GATTUUID, _ call: DBusMethodCall) async throws {
        await noteDevice(call)
        guard layout.characteristic(uuid)?.flags.contains("write") == true else {
            throw DBusError(name: "org.bluez.Error.NotPermitted", message: "Write not permitted")
        }
        guard let bytes = call.arguments.first?.bytes else {
            throw DBusError(name: "org.bluez.Error.InvalidArguments", message: "Invalid arguments")
        }
        if uuid != .recordAccessControlPoint {
            // The meter's clock (Current Time, Date Time or the vendor clock).
            do {
                if let time = try await peripheral.writeClock(uuid, bytes) {
                    // The meter's own record of the write, for whoever watches the meter side.
                    let skew = await peripheral.clockReading.skewSeconds
                    logger.notice("clock set to \(time) through \(uuid); the clock is now off by \(Int(skew.rounded())) s")
                }
            } catch {
                // Only 0x80...0x9f pass through bluetoothd as ATT errors; an invalid value is refused as such.
                guard (0x80...0x9F).contains(error.code) else {
                    throw DBusError(name: "org.bluez.Error.InvalidArguments", message: "Invalid value")
                }
                throw DBusError(name: "org.bluez.Error.Failed", message: "0x" + hexString([error.code]))
            }
            return
        }
        do {
            try await peripheral.writeRACP(bytes)
        } catch {
            // bluetoothd turns "Failed" with a numeric message in 0x80...0x9f into that ATT error.
            throw DBusError(name: "org.bluez.Error.Failed", message: "0x" + hexString([error.code]))
        }
        let peripheral = self.peripheral
        Task {
            try? await Task.sleep(for: .milliseconds(10))
            await peripheral.runProcedure()
        }
    }

    private func subscribe(_ uuid: GATTUUID, _ on: Bool) async {
        await peripheral.setSubscribed(uuid, on)
        for (i, s) in layout.services.enumerated() {
            for (j, ch) in s.characteristics.enumerated() where ch.uuid == uuid {
                await connection?.setProperties(path: charPath(i, j), interface: "org.bluez.GattCharacteristic1",
                                                ["Notifying": .bool(on)])
            }
        }
    }

    // MARK: Meter events

    private func handle(_ event: PeripheralEvent) async {
        guard let c = connection else { return }
        switch event {
        case .value(let uuid, let bytes):
            if uuid == .recordAccessControlPoint {
                let delay = Self.responseDelay(lastNotificationAt: lastNotificationAt, now: .now)
                lastNotificationAt = nil
                if delay > .zero { try? await Task.sleep(for: delay) }
            } else {
                lastNotificationAt = .now
            }
            logger.debug("send \(uuid) \(bytes.count) bytes")
            for (i, s) in layout.services.enumerated() {
                for (j, ch) in s.characteristics.enumerated() where ch.uuid == uuid {
                    await c.setProperties(path: charPath(i, j), interface: "org.bluez.GattCharacteristic1",
                                          ["Value": .bytes(bytes)])
                }
            }
        case .dropLink:
            guard let device = centralDevice else { return }
            logger.info("meter drops the link to \(device)")
            _ = try? await c.call(destination: "org.bluez", path: device, interface: "org.bluez.Device1",
                                  member: "Disconnect", timeout: .seconds(10))
        case .advertising(let on):
            await setAdvertising(on, c)
        case .recordAdded(let seq):
            logger.info("stored record \(seq)")
        }
    }

    private func setAdvertising(_ on: Bool, _ c: DBusConnection) async {
        guard on != advertisementRegistered else { return }
        do {
            if on {
                _ = try await c.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.LEAdvertisingManager1",
                                     member: "RegisterAdvertisement", arguments: [.objectPath(advertisementPath), .vardict([:])],
                                     timeout: .seconds(10))
            } else {
                _ = try await c.call(destination: "org.bluez", path: adapterPath, interface: "org.bluez.LEAdvertisingManager1",
                                     member: "UnregisterAdvertisement", arguments: [.objectPath(advertisementPath)],
                                     timeout: .seconds(10))
            }
            advertisementRegistered = on
            logger.info(on ? "advertising" : "advertising stopped")
        } catch {
            logger.warning("advertisement \(on ? "registration" : "removal") failed: \(error)")
        }
    }
}
