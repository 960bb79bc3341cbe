import Testing
@testable import BlueZ

/// What a controller reports as RSSI, and what the gateway shows of it.
struct RSSITests {
    struct Case: CustomStringConvertible, Sendable {
        var raw: Int64?
        var shown: Int?
        var description: String { raw.map { "RSSI \($0)" } ?? "no RSSI" }
    }

    @Test(arguments: [
        Case(raw: -55, shown: -55),
        Case(raw: -127, shown: -127),
        Case(raw: 20, shown: 20),
        Case(raw: 127, shown: nil),   // HCI "RSSI not available", as virtual controllers always report
        Case(raw: 21, shown: nil),
        Case(raw: -128, shown: nil),
        Case(raw: nil, shown: nil),
    ])
    func notAvailableIsNoReading(_ c: Case) {
        #expect(DiscoveredDevice.dBm(c.raw) == c.shown)
    }

    /// A device is heard while bluetoothd shows an RSSI, whatever its value: the daemon downloads a paired
    /// meter it hears, and a controller that cannot measure RSSI (127) must not hide the meter.
    @Test(arguments: [Int16(-60), Int16(127)])
    func anRSSIMeansHeard(_ raw: Int16) throws {
        let device = try #require(DiscoveredDevice(path: "/org/bluez/hci0/dev_C0_26_DA_01_02_03", interfaces: [
            BlueZNames.device: ["Address": .string("C0:26:DA:01:02:03"), "RSSI": .int16(raw)],
        ]))
        #expect(device.heard)
        let stored = try #require(DiscoveredDevice(path: "/org/bluez/hci0/dev_C0_26_DA_01_02_03", interfaces: [
            BlueZNames.device: ["Address": .string("C0:26:DA:01:02:03")],
        ]))
        #expect(!stored.heard)
    }
}
