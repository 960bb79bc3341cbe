import DBusKit
import Synchronization
import TestSupport

/// A small BlueZ double for the client tests: owns `org.bluez` on a private bus and exports an adapter,
/// devices with a Glucose Service, and the agent manager, with scripted failures and a call log.
final class FakeBlueZ: Sendable {
    static let adapterPath = "/org/bluez/hci0"

    struct Script: Sendable {
        var connectFailures: [DBusError] = []
        /// Drop the link (Connected=false) this many times after Connect replied, before resolution.
        var dropsBeforeResolve = 0
        var records = 5
        var passkey: UInt32 = 123_456
        /// Never resolve services after Connect.
        var hangAfterConnect = false
        /// How long after Connect's reply a scripted drop comes, on `clock`.
        var dropAfter: Duration = .milliseconds(30)
        /// The `Disconnected(reason, message)` signal sent before a scripted drop's Connected=false
        /// (BlueZ 5.83+); nil: none, as in 5.66.
        var dropReason: String?
    }

    let connection: DBusConnection
    /// The clock the client under test measures its links on: a scripted drop moves it by `dropAfter`.
    let clock: ManualClock
    let log = Mutex<[String]>([])
    let script: Mutex<Script>
    let notifying = Mutex<Set<String>>([])
    let agents = Mutex<[String: String]>([:])  // sender -> agent path

    private init(connection: DBusConnection, script: Script, clock: ManualClock) {
        self.connection = connection
        self.script = Mutex(script)
        self.clock = clock
    }

    var calls: [String] { log.withLock { $0 } }
    func record(_ entry: String) { log.withLock { $0.append(entry) } }

    static func start(on bus: PrivateBus, script: Script = Script(), clock: ManualClock = ManualClock()) async throws -> FakeBlueZ {
        let connection = try await DBusConnection.connect(address: bus.address)
        let fake = FakeBlueZ(connection: connection, script: script, clock: clock)
        try await connection.exportObjectManager(at: "/")
        try await fake.exportBase()
        let result = try await connection.requestName("org.bluez")
        guard result == .primaryOwner else { throw DBusError(.failed, "org.bluez is taken") }
        return fake
    }

    func stop() async { await connection.close() }

    private func exportBase() async throws {
        try await connection.export(path: "/org/bluez", interfaces: [
            DBusInterface("org.bluez.AgentManager1", methods: [
                DBusMethod("RegisterAgent", in: "os") { [self] call in
                    record("RegisterAgent \(call.arguments[1].string ?? "")")
                    agents.withLock { $0[call.sender] = call.arguments[0].objectPath }
                    return []
                },
                DBusMethod("RequestDefaultAgent", in: "o") { [self] _ in
                    record("RequestDefaultAgent")
                    return []
                },
                DBusMethod("UnregisterAgent", in: "o") { [self] call in
                    record("UnregisterAgent")
                    agents.withLock { $0[call.sender] = nil }
                    return []
                },
            ]),
        ])
        let adapter = Self.adapterPath
        try await connection.export(path: adapter, interfaces: [
            DBusInterface("org.bluez.Adapter1", methods: [
                DBusMethod("SetDiscoveryFilter", in: "a{sv}") { [self] call in
                    let filter = call.arguments.first?.vardict ?? [:]
                    let uuids = filter["UUIDs"]?.stringArray ?? []
                    record("SetDiscoveryFilter \(filter["Transport"]?.string ?? "-") \(uuids.joined(separator: ","))")
                    return []
                },
                DBusMethod("StartDiscovery") { [self] _ in
                    record("StartDiscovery")
                    await connection.setProperties(path: adapter, interface: "org.bluez.Adapter1", ["Discovering": .bool(true)])
                    return []
                },
                DBusMethod("StopDiscovery") { [self] _ in
                    record("StopDiscovery")
                    await connection.setProperties(path: adapter, interface: "org.bluez.Adapter1", ["Discovering": .bool(false)])
                    return []
                },
                DBusMethod("RemoveDevice", in: "o") { [self] call in
                    let path = call.arguments.first?.objectPath ?? ""
                    record("RemoveDevice \(path)")
                    await removeDevice(path: path)
                    return []
                },
            ], properties: [
                "Address": .string("00:11:22:33:44:55"), "Powered": .bool(true), "Discovering": .bool(false),
                "PowerState": .string("on"),
            ], writableProperties: ["Powered"]) { _, _, _ in },
        ])
    }

    static func devicePath(_ address: String) -> String {
        adapterPath + "/dev_" + address.replacingColons()
    }

    /// Adds a device as discovery would (InterfacesAdded).
    @discardableResult
    func addDevice(address: String, name: String, uuids: [String] = ["00001808-0000-1000-8000-00805f9b34fb"],
                   rssi: Int16 = -60, paired: Bool = false) async throws -> String {
        let path = Self.devicePath(address)
        let device = "org.bluez.Device1"
        try await connection.export(path: path, interfaces: [
            DBusInterface(device, methods: [
                DBusMethod("Connect") { [self] call in
                    record("Connect")
                    if let failure = script.withLock({ $0.connectFailures.isEmpty ? nil : $0.connectFailures.removeFirst() }) {
                        throw failure
                    }
                    await connection.setProperties(path: path, interface: device, ["Connected": .bool(true)])
                    let (drop, hang, dropAfter, reason) = script.withLock { script -> (Bool, Bool, Duration, String?) in
                        let drop = script.dropsBeforeResolve > 0
                        if drop { script.dropsBeforeResolve -= 1 }
                        return (drop, script.hangAfterConnect, script.dropAfter, script.dropReason)
                    }
                    // Resolve (or drop) beside the reply: the client sees the two in either order, as from
                    // bluetoothd. A scripted drop comes `dropAfter` later on the clock the client measures
                    // its links on (it judges a lost bond by how long a link lived). The clock moves only
                    // once the client has taken Connected=true in: its answer to a ping comes after it,
                    // since one sender's messages arrive in order and the client handles a signal where it
                    // arrives.
                    let client = call.sender
                    Task {
                        if drop {
                            _ = try? await connection.call(destination: client, path: "/", interface: "org.freedesktop.DBus.Peer",
                                                           member: "Ping", timeout: .seconds(5))
                            clock.advance(by: dropAfter)
                            if let reason {
                                try? await connection.emitSignal(path: path, interface: device, member: "Disconnected",
                                                                 arguments: [.string(reason), .string("scripted")])
                            }
                            await connection.setProperties(path: path, interface: device, ["Connected": .bool(false)])
                        } else if !hang {
                            try? await exportGATT(devicePath: path)
                            await connection.setProperties(path: path, interface: device, ["ServicesResolved": .bool(true)])
                        }
                    }
                    return []
                },
                DBusMethod("Disconnect") { [self] _ in
                    record("Disconnect")
                    await connection.setProperties(path: path, interface: device, ["ServicesResolved": .bool(false)])
                    await connection.setProperties(path: path, interface: device, ["Connected": .bool(false)])
                    return []
                },
                DBusMethod("Pair") { [self] call in
                    record("Pair")
                    guard let agent = agents.withLock({ $0[call.sender] }) else {
                        throw DBusError(name: "org.bluez.Error.AuthenticationFailed", message: "no agent")
                    }
                    let answer: [DBusValue]
                    do {
                        answer = try await connection.call(destination: call.sender, path: agent, interface: "org.bluez.Agent1",
                                                           member: "RequestPasskey", arguments: [.objectPath(path)], timeout: .seconds(5))
                    } catch {
                        throw DBusError(name: "org.bluez.Error.AuthenticationCanceled", message: "\(error)")
                    }
                    guard answer.first?.uint32 == script.withLock({ $0.passkey }) else {
                        throw DBusError(name: "org.bluez.Error.AuthenticationFailed", message: "Authentication Failed")
                    }
                    await connection.setProperties(path: path, interface: device, ["Paired": .bool(true), "Bonded": .bool(true)])
                    return []
                },
            ], properties: [
                "Address": .string(address), "AddressType": .string("public"), "Name": .string(name), "Alias": .string(name),
                "RSSI": .int16(rssi), "UUIDs": .strings(uuids), "Paired": .bool(paired), "Bonded": .bool(paired),
                "Trusted": .bool(false), "Connected": .bool(false), "ServicesResolved": .bool(false),
                "Adapter": .objectPath(Self.adapterPath),
            ], writableProperties: ["Trusted"]) { [self] name, value, _ in
                record("Set \(name)=\(value.unwrapped)")
            },
        ])
        return path
    }

    func removeDevice(path: String) async {
        for other in await connection.exportedPaths().sorted(by: >) where other == path || other.hasPrefix(path + "/") {
            await connection.unexport(path: other)
        }
    }

    static let glucoseMeasurement = "00002a18-0000-1000-8000-00805f9b34fb"
    static let glucoseFeature = "00002a51-0000-1000-8000-00805f9b34fb"
    static let racp = "00002a52-0000-1000-8000-00805f9b34fb"

    private func exportGATT(devicePath: String) async throws {
        let service = devicePath + "/service0010"
        try await connection.export(path: service, interfaces: [
            DBusInterface("org.bluez.GattService1", properties: [
                "UUID": .string("00001808-0000-1000-8000-00805f9b34fb"), "Primary": .bool(true), "Device": .objectPath(devicePath),
            ]),
        ])
        let measurement = service + "/char0011"
        let racp = service + "/char0019"
        try await exportCharacteristic(path: measurement, uuid: Self.glucoseMeasurement, flags: ["notify"], service: service)
        try await exportCharacteristic(path: service + "/char0017", uuid: Self.glucoseFeature, flags: ["read"], service: service,
                                       read: [0x02, 0x04])
        try await exportCharacteristic(path: racp, uuid: Self.racp, flags: ["write", "indicate"], service: service) { [self] value in
            guard notifying.withLock({ $0.contains(racp) }) else {
                throw DBusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x81")
            }
            guard value == [0x01, 0x01] else {
                throw DBusError(name: "org.bluez.Error.Failed", message: "Operation failed with ATT error: 0x80")
            }
            let count = script.withLock { $0.records }
            Task {
                for i in 0..<count {
                    await connection.setProperties(path: measurement, interface: "org.bluez.GattCharacteristic1",
                                                   ["Value": .bytes([0x00, UInt8(i & 0xFF), UInt8(i >> 8)])])
                }
                await connection.setProperties(path: racp, interface: "org.bluez.GattCharacteristic1",
                                               ["Value": .bytes([0x06, 0x00, 0x01, 0x01])])
            }
        }
    }

    private func exportCharacteristic(path: String, uuid: String, flags: [String], service: String, read: [UInt8] = [],
                                      onWrite: (@Sendable ([UInt8]) async throws -> Void)? = nil) async throws {
        let short = String(uuid.dropFirst(4).prefix(4))
        try await connection.export(path: path, interfaces: [
            DBusInterface("org.bluez.GattCharacteristic1", methods: [
                DBusMethod("ReadValue", in: "a{sv}", out: "ay") { [self] _ in
                    record("ReadValue \(short)")
                    return [.bytes(read)]
                },
                DBusMethod("WriteValue", in: "aya{sv}") { [self] call in
                    let options = call.arguments.count == 2 ? call.arguments[1].vardict ?? [:] : [:]
                    record("WriteValue \(short) \(options["type"]?.string ?? "-")")
                    guard let onWrite else { throw DBusError(name: "org.bluez.Error.NotPermitted", message: "Write not permitted") }
                    try await onWrite(call.arguments.first?.bytes ?? [])
                    return []
                },
                DBusMethod("StartNotify") { [self] _ in
                    record("StartNotify \(short)")
                    notifying.withLock { _ = $0.insert(path) }
                    await connection.setProperties(path: path, interface: "org.bluez.GattCharacteristic1", ["Notifying": .bool(true)])
                    return []
                },
                DBusMethod("StopNotify") { [self] _ in
                    record("StopNotify \(short)")
                    notifying.withLock { _ = $0.remove(path) }
                    return []
                },
            ], properties: [
                "UUID": .string(uuid), "Service": .objectPath(service), "Value": .bytes([]), "Notifying": .bool(false),
                "Flags": .strings(flags),
            ]),
        ])
    }
}

extension String {
    func replacingColons() -> String { String(map { $0 == ":" ? "_" : $0 }) }
}
