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
}
