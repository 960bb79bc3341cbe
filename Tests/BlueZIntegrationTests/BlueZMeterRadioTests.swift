import DBusKit
import Testing
import TestSupport
@testable import BlueZ

@Suite("Meter radio over BlueZ", .timeLimit(.minutes(1)))
struct BlueZMeterRadioTests {
    /// BlueZ 5.66 can connect a bonded meter (GATT profile auto-connect) without ever signalling
    /// Connected=true; ServicesResolved=true is then the only sign, and it must wake the daemon.
    @Test func servicesResolvedAloneMeansTheMeterIsConnected() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.close() }
        let client = try await BlueZClient.connect(bus: bus.address)
        let path = "/org/bluez/hci0/dev_C0_26_DA_01_02_03"
        let resolved = DBusMessage(kind: .signal, path: path, interface: DBusNames.properties, member: "PropertiesChanged",
                                   body: [.string("org.bluez.Device1"), .vardict(["ServicesResolved": .bool(true)]), .strings([])])
        #expect(await BlueZMeterRadio.event(from: resolved, client: client) == .meterSeen(address: "C0:26:DA:01:02:03", connected: true))
        let unresolved = DBusMessage(kind: .signal, path: path, interface: DBusNames.properties, member: "PropertiesChanged",
                                     body: [.string("org.bluez.Device1"), .vardict(["ServicesResolved": .bool(false)]), .strings([])])
        #expect(await BlueZMeterRadio.event(from: unresolved, client: client) == nil)
        await client.close()
    }
}
