import GatewayCore
import Support
import Testing

@Suite("Hex")
struct HexTests {
    @Test func encodesBothCases() {
        #expect(hexString([0x00, 0x1B, 0xE8, 0xFF]) == "001be8ff")
        #expect(hexString([0x00, 0x1B, 0xE8, 0xFF], uppercase: true) == "001BE8FF")
        #expect(hexString([]) == "")
    }

    @Test func decodesWithSeparatorsAndRoundTrips() {
        #expect(hexBytes("1b 04 00 e8 07") == [0x1B, 0x04, 0x00, 0xE8, 0x07])
        #expect(hexBytes("1B:04:0A") == [0x1B, 0x04, 0x0A])
        #expect(hexBytes("") == [])
        let all = (0...255).map { UInt8($0) }
        #expect(hexBytes(hexString(all)) == all)
        #expect(hexDigitValue(UInt32(UInt8(ascii: "F"))) == 15)
        #expect(hexDigitValue(UInt32(UInt8(ascii: "g"))) == nil)
    }

    /// Signs were taken as part of a byte (`+f` read as 0x0f) when each pair went through `UInt8(_:radix:)`.
    @Test(arguments: ["1", "1b 0", "+f", "-0", "0x1b", "1g", "1b,04", "é1"])
    func refusesAnythingButDigitPairs(_ text: String) {
        #expect(hexBytes(text) == nil)
    }
}
