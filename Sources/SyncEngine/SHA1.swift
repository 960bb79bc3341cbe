import GatewayCore

/// SHA-1 (FIPS 180-4). Used for the Nightscout `api-secret` header and for name-based UUIDs
/// (RFC 9562 version 5); never for anything that needs collision resistance.
/// FoundationEssentials has no digest API and CryptoKit does not exist on Linux, hence this one.
public struct SHA1: Sendable {
    private var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
    private var block: [UInt8] = []
    private var length: UInt64 = 0

    public init() { block.reserveCapacity(64) }

    public mutating func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        for byte in bytes {
            block.append(byte)
            length &+= 1
            if block.count == 64 {
                compress()
                block.removeAll(keepingCapacity: true)
            }
        }
    }

    public mutating func update(_ text: String) { update(text.utf8) }

    /// The 20-byte digest. The value can be finalized once; further updates start nothing new.
    public mutating func finalize() -> [UInt8] {
        let bitLength = length &* 8
        block.append(0x80)
        if block.count > 56 {
            while block.count < 64 { block.append(0) }
            compress()
            block.removeAll(keepingCapacity: true)
        }
        while block.count < 56 { block.append(0) }
        for shift in stride(from: 56, through: 0, by: -8) {
            block.append(UInt8(truncatingIfNeeded: bitLength >> UInt64(shift)))
        }
        compress()
        block.removeAll(keepingCapacity: true)
        var out: [UInt8] = []
        out.reserveCapacity(20)
        for word in [h.0, h.1, h.2, h.3, h.4] {
            out.append(UInt8(truncatingIfNeeded: word >> 24))
            out.append(UInt8(truncatingIfNeeded: word >> 16))
            out.append(UInt8(truncatingIfNeeded: word >> 8))
            out.append(UInt8(truncatingIfNeeded: word))
        }
        return out
    }

    public static func digest<S: Sequence>(_ bytes: S) -> [UInt8] where S.Element == UInt8 {
        var sha = SHA1()
        sha.update(bytes)
        return sha.finalize()
    }

    public static func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        hexString(digest(bytes))
    }

    private mutating func compress() {
        var w = [UInt32](repeating: 0, count: 80)
        for i in 0..<16 {
            w[i] = UInt32(block[4 * i]) << 24 | UInt32(block[4 * i + 1]) << 16 | UInt32(block[4 * i + 2]) << 8 | UInt32(block[4 * i + 3])
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

    @inline(__always) private func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 { (x << n) | (x >> (32 - n)) }
}
