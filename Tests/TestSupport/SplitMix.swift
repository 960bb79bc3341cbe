/// SplitMix64: a fast, seeded, deterministic generator, so tests that draw random values feed the same
/// inputs on every run and a failure can be reproduced from its seed and iteration number.
public struct SplitMix: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    public mutating func byte() -> UInt8 { UInt8(truncatingIfNeeded: next()) }
    public mutating func uint16() -> UInt16 { UInt16(truncatingIfNeeded: next()) }
    /// 0..<bound without modulo bias worth caring about in tests.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    public mutating func chance(_ percent: Int) -> Bool { below(100) < percent }
}
