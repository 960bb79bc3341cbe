import GatewayCore

/// SHA-1 (FIPS 180-4). Used for the Nightscout `api-secret` header and for name-based UUIDs
/// (RFC 9562 version 5); never for anything that needs collision resistance.
/// FoundationEssentials has no digest API and CryptoKit does not exist on Linux, hence this one.
public struct SHA1: Sendable {
    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
    /// Bytes of the block being filled (fewer than 64 between calls).
    private var block: [UInt8] = []
    private var length: UInt64 = 0

    public init() { block.reserveCapacity(64) }

    public mutating func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        let done: Void? = bytes.withContiguousStorageIfAvailable { update(buffer: $0) }
        if done == nil { Array(bytes).withUnsafeBufferPointer { update(buffer: $0) } }
    }

    public mutating func update(_ text: String) { update(text.utf8) }

    /// Whole blocks are compressed straight from `input`; only a partial block is copied.
    private mutating func update(buffer input: UnsafeBufferPointer<UInt8>) {
        length &+= UInt64(input.count)
        var offset = 0
        if !block.isEmpty {
            let take = min(64 - block.count, input.count)
            block.append(contentsOf: input[0..<take])
            offset = take
            guard block.count == 64 else { return }
            block.withUnsafeBufferPointer { compress($0.baseAddress!) }
            block.removeAll(keepingCapacity: true)
        }
        guard let base = input.baseAddress else { return }
        while input.count - offset >= 64 {
            compress(base + offset)
            offset += 64
        }
        if offset < input.count { block.append(contentsOf: input[offset...]) }
    }

    /// The 20-byte digest. The value can be finalized once; further updates start nothing new.
    public mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        block.append(0x80)
        if block.count > 56 {
            while block.count < 64 { block.append(0) }
            block.withUnsafeBufferPointer { compress($0.baseAddress!) }
            block.removeAll(keepingCapacity: true)
        }
        while block.count < 56 { block.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) {
            block.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        block.withUnsafeBufferPointer { compress($0.baseAddress!) }
        block.removeAll(keepingCapacity: true)
        let words = [h.0, h.1, h.2, h.3, h.4]
        return [UInt8](unsafeUninitializedCapacity: 20) { out, count in
            for (i, word) in words.enumerated() {
                out[4 * i] = UInt8(truncatingIfNeeded: word >> 24)
                out[4 * i + 1] = UInt8(truncatingIfNeeded: word >> 16)
                out[4 * i + 2] = UInt8(truncatingIfNeeded: word >> 8)
                out[4 * i + 3] = UInt8(truncatingIfNeeded: word)
            }
            count = 20
        }
    }

    public static func digest<S: Sequence>(_ bytes: S) -> [UInt8] where S.Element == UInt8 {
        var sha = SHA1()
        sha.update(bytes)
        return sha.finalize()
    }

    public static func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        hexString(digest(bytes))
    }

    /// One 64-byte block at `p` (the message schedule lives on the stack, not the heap).
    private mutating func compress(_ p: UnsafePointer<UInt8>) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { w in
            for i in 0..<16 {
                w[i] = UInt32(p[4 * i]) << 24 | UInt32(p[4 * i + 1]) << 16 | UInt32(p[4 * i + 2]) << 8 | UInt32(p[4 * i + 3])
            }
            for i in 16..<80 {
                w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1)
            }
            var (a, b, c, d, e) = h
            for i in 0..<80 {
                let f: UInt32
                let k: UInt32
                switch i {
                case 0..<20: f = (b & c) | (~b & d); k = 0x5A82_7999
                case 20..<40: f = b ^ c ^ d; k = 0x6ED9_EBA1
                case 40..<60: f = (b & c) | (b & d) | (c & d); k = 0x8F1B_BCDC
                default: f = b ^ c ^ d; k = 0xCA62_C1D6
                }
                let t = rotl(a, 5) &+ f &+ e &+ k &+ w[i]
                e = d
                d = c
                c = rotl(b, 30)
                b = a
                a = t
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
    }

    @inline(__always) private func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 { (x << n) | (x >> (32 - n)) }
}
