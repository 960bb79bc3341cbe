@testable import Support
import Testing
import TestSupport

/// The string reader's fast path: eight bytes at a time while none of them ends the string.
@Suite struct JSONStringWordTests {
    /// Eight bytes at a time: a word stops a string exactly when one of its bytes is a quote, a backslash
    /// or below 0x20, whichever byte it is, next to any others.
    @Test func aWordStopsAStringWhenOneOfItsBytesDoes() {
        func stops(_ b: UInt8) -> Bool { b == 0x22 || b == 0x5C || b < 0x20 }
        var rng = SplitMix(seed: 0x5C22)
        for position in 0..<8 {
            for value in 0...255 {
                for fill: UInt8 in [0x61, 0x21, 0x23, 0x5B, 0x5D, 0x20, 0x7F, 0x80, 0xFF, 0x00, 0x22] {
                    var bytes = [UInt8](repeating: fill, count: 8)
                    bytes[position] = UInt8(value)
                    let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
                    #expect(JSONParser.stopsString(word) == bytes.contains(where: stops), "\(bytes)")
                }
            }
        }
        for _ in 0..<20_000 {
            let bytes = (0..<8).map { _ in UInt8(truncatingIfNeeded: rng.below(256)) }
            let word = bytes.withUnsafeBytes { $0.loadUnaligned(as: UInt64.self) }
            #expect(JSONParser.stopsString(word) == bytes.contains(where: stops), "\(bytes)")
        }
    }
}
