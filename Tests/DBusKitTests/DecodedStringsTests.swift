#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import DBusKit
import TestSupport

/// Strings kept from message to message must decode exactly as `String(cString:)` does, whatever the bytes.
@Suite struct DecodedStringsTests {
    static func withCString<T>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> T) -> T {
        let terminated = bytes + [0]
        return terminated.withUnsafeBufferPointer { buffer in
            buffer.baseAddress!.withMemoryRebound(to: CChar.self, capacity: terminated.count) { body($0) }
        }
    }

    @Test func sameResultAsDecodingEachTime() {
        var inputs: [[UInt8]] = [
            Array("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0011".utf8),
            Array("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_01/service0010/char0019".utf8),  // same length, other bytes
            Array("org.freedesktop.DBus.Properties".utf8), Array("PropertiesChanged".utf8), Array(":1.7".utf8),
            Array("sa{sv}as".utf8), [], Array("Value".utf8), Array("Välue".utf8), Array("Vxlue".utf8),
            [0xFF, 0xFE, 0x41], [0xC3], [0xE2, 0x82], Array("é".utf8), [0x41, 0xC3],  // not UTF-8: repaired each time
            Array(repeating: UInt8(ascii: "a"), count: 300), Array(repeating: UInt8(ascii: "a"), count: 256),
            Array(repeating: UInt8(ascii: "a"), count: 255),
        ]
        // More distinct strings than are kept, so old ones are pushed out and decoded again.
        for i in 0..<40 { inputs.append(Array("/org/bluez/hci0/dev_\(i)".utf8)) }
        var strings = DecodedStrings()
        var rng = SplitMix(seed: 7)
        for round in 0..<2000 {
            let input = round < inputs.count ? inputs[round] : inputs[Int(rng.next() % UInt64(inputs.count))]
            let (kept, fresh) = Self.withCString(input) { (strings.string($0), String(cString: $0)) }
            #expect(kept == fresh)
            #expect(Array(kept.utf8) == Array(fresh.utf8))
        }
    }

    @Test func aSignalDecodesTheSameWithKeptStrings() throws {
        let bodies: [[DBusValue]] = PropertiesChangedDecodingTests.bodies + [
            [.string("org.bluez.GattCharacteristic1"), .vardict(["Välue": .bytes([1])]), .strings(["Välue", ""])],
            [.string("org.bluez.GattCharacteristic2"), .vardict(["Value": .bytes([2])]), .strings([])],
            [.string("org.bluez.GattCharacteristic1"), .vardict(["Valu": .bytes([3])]), .strings(["Value"])],
        ]
        var kept: DecodedStrings? = DecodedStrings()
        var none: DecodedStrings? = nil
        for _ in 0..<3 {
            for body in bodies {
                let fast = try Marshalling.wireRoundTrip(body, strings: &kept)
                let plain = try Marshalling.wireRoundTrip(body, strings: &none)
                let generic = try Marshalling.wireRoundTrip(body, generically: true, strings: &none)
                #expect(fast == plain)
                #expect(fast.body == generic.body)
                #expect(fast.body == body)
                #expect(fast.path == "/org/example" && fast.interface == "org.example.Iface" && fast.member == "Echo")
            }
        }
    }
}
