import GatewayCore
import Support

/// SHA-1 (FIPS 180-4). Used for the Nightscout `api-secret` header and for name-based UUIDs
/// (RFC 9562 version 5); never for anything that needs collision resistance.
/// FoundationEssentials has no digest API and CryptoKit does not exist on Linux, hence this one.
///
/// Nothing of it is on the heap: the partial block is kept inline, the message schedule and the final
/// padding are written on the stack (a UUIDv5 key is computed for every reading stored).
public struct SHA1: Sendable {
    typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32)
    static let initial: State = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)

    private var h: State = SHA1.initial
    /// The block being filled, its first `filled` bytes (fewer than 64 between calls).
    private var block: (UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0, 0, 0, 0, 0)
    private var filled = 0
    private var length: UInt64 = 0

    public init() {}

    public mutating func update<S: Sequence>(_ bytes: S) where S.Element == UInt8 {
        let done: Void? = bytes.withContiguousStorageIfAvailable { update(buffer: $0) }
        if done == nil { Array(bytes).withUnsafeBufferPointer { update(buffer: $0) } }
    }

    public mutating func update(_ text: String) { update(text.utf8) }

    /// Whole blocks are compressed straight from `input`; only a partial block is copied.
    private mutating func update(buffer input: UnsafeBufferPointer<UInt8>) {
        length &+= UInt64(input.count)
        guard let base = input.baseAddress, !input.isEmpty else { return }
        var offset = 0
        if filled > 0 {
            let take = min(64 - filled, input.count)
            let at = filled
            withUnsafeMutableBytes(of: &block) { b in
                guard let p = b.baseAddress else { return }
                (p + at).copyMemory(from: base, byteCount: take)
            }
            filled += take
            offset = take
            guard filled == 64 else { return }
            withUnsafeBytes(of: block) { b in
                guard let p = b.baseAddress else { return }
                Self.compress(&h, p)
            }
            filled = 0
        }
        while input.count - offset >= 64 {
            Self.compress(&h, UnsafeRawPointer(base + offset))
            offset += 64
        }
        if offset < input.count {
            let rest = input.count - offset
            withUnsafeMutableBytes(of: &block) { b in
                guard let p = b.baseAddress else { return }
                p.copyMemory(from: base + offset, byteCount: rest)
            }
            filled = rest
        }
    }

    /// The 20-byte digest. The value can be finalized once; further updates start nothing new.
    public mutating func finalize() -> [UInt8] {
        let count = filled
        let words = withUnsafeBytes(of: block) { tail in
            Self.finish(h, tail: UnsafeRawBufferPointer(rebasing: tail[..<count]), totalLength: length)
        }
        filled = 0
        return Self.bytes(words)
    }

    public static func digest<S: Sequence>(_ bytes: S) -> [UInt8] where S.Element == UInt8 {
        let words: State? = bytes.withContiguousStorageIfAvailable { hash(UnsafeRawBufferPointer($0)) }
        if let words { return Self.bytes(words) }
        var sha = SHA1()
        sha.update(bytes)
        return sha.finalize()
    }

    public static func hex<S: Sequence>(_ bytes: S) -> String where S.Element == UInt8 {
        hexString(digest(bytes))
    }

    /// The digest of `input` in one pass, as its five words.
    static func hash(_ input: UnsafeRawBufferPointer) -> State {
        var h = initial
        var offset = 0
        if let base = input.baseAddress {
            while input.count - offset >= 64 {
                compress(&h, base + offset)
                offset += 64
            }
        }
        return finish(h, tail: UnsafeRawBufferPointer(rebasing: input[offset...]), totalLength: UInt64(input.count))
    }

    /// Pads the last bytes (fewer than 64) with 0x80, zeros and the message length in bits, and
    /// compresses the one or two blocks that makes.
    private static func finish(_ state: State, tail: UnsafeRawBufferPointer, totalLength: UInt64) -> State {
        var h = state
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { pad in
            guard let p = pad.baseAddress else { return }
            p.initializeMemory(as: UInt8.self, repeating: 0, count: 128)
            if let base = tail.baseAddress, !tail.isEmpty { p.copyMemory(from: base, byteCount: tail.count) }
            p.storeBytes(of: 0x80, toByteOffset: tail.count, as: UInt8.self)
            let blocks = tail.count < 56 ? 1 : 2
            p.storeBytes(of: (totalLength &* 8).bigEndian, toByteOffset: blocks * 64 - 8, as: UInt64.self)
            compress(&h, UnsafeRawPointer(p))
            if blocks == 2 { compress(&h, UnsafeRawPointer(p + 64)) }
        }
        return h
    }

    static func bytes(_ words: State) -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: 20) { out, count in
            guard let p = out.baseAddress else { return }
            let raw = UnsafeMutableRawPointer(p)
            raw.storeBytes(of: words.0.bigEndian, toByteOffset: 0, as: UInt32.self)
            raw.storeBytes(of: words.1.bigEndian, toByteOffset: 4, as: UInt32.self)
            raw.storeBytes(of: words.2.bigEndian, toByteOffset: 8, as: UInt32.self)
            raw.storeBytes(of: words.3.bigEndian, toByteOffset: 12, as: UInt32.self)
            raw.storeBytes(of: words.4.bigEndian, toByteOffset: 16, as: UInt32.self)
            count = 20
        }
    }

    /// One 64-byte block at `p` (the message schedule lives on the stack, not the heap). The rounds are
    /// written five at a time with the working variables in turn, so none is moved between rounds.
    private static func compress(_ h: inout State, _ p: UnsafeRawPointer) {
        withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 80) { buffer in
            guard let w = buffer.baseAddress else { return }
            for i in 0..<16 {
                w[i] = UInt32(bigEndian: p.loadUnaligned(fromByteOffset: 4 * i, as: UInt32.self))
            }
            for i in 16..<80 {
                w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1)
            }
            var (a, b, c, d, e) = h
            // Each round puts its new value in the variable `e` was and rotates `b` where it is; the next
            // round names the five in turn, so no value is moved between rounds.
            var i = 0
            while i < 20 {
                e = rotl(a, 5) &+ (d ^ (b & (c ^ d))) &+ e &+ 0x5A82_7999 &+ w[i]
                b = rotl(b, 30)
                d = rotl(e, 5) &+ (c ^ (a & (b ^ c))) &+ d &+ 0x5A82_7999 &+ w[i + 1]
                a = rotl(a, 30)
                c = rotl(d, 5) &+ (b ^ (e & (a ^ b))) &+ c &+ 0x5A82_7999 &+ w[i + 2]
                e = rotl(e, 30)
                b = rotl(c, 5) &+ (a ^ (d & (e ^ a))) &+ b &+ 0x5A82_7999 &+ w[i + 3]
                d = rotl(d, 30)
                a = rotl(b, 5) &+ (e ^ (c & (d ^ e))) &+ a &+ 0x5A82_7999 &+ w[i + 4]
                c = rotl(c, 30)
                i += 5
            }
            while i < 40 {
                e = rotl(a, 5) &+ (b ^ c ^ d) &+ e &+ 0x6ED9_EBA1 &+ w[i]
                b = rotl(b, 30)
                d = rotl(e, 5) &+ (a ^ b ^ c) &+ d &+ 0x6ED9_EBA1 &+ w[i + 1]
                a = rotl(a, 30)
                c = rotl(d, 5) &+ (e ^ a ^ b) &+ c &+ 0x6ED9_EBA1 &+ w[i + 2]
                e = rotl(e, 30)
                b = rotl(c, 5) &+ (d ^ e ^ a) &+ b &+ 0x6ED9_EBA1 &+ w[i + 3]
                d = rotl(d, 30)
                a = rotl(b, 5) &+ (c ^ d ^ e) &+ a &+ 0x6ED9_EBA1 &+ w[i + 4]
                c = rotl(c, 30)
                i += 5
            }
            while i < 60 {
                e = rotl(a, 5) &+ ((b & c) | (d & (b | c))) &+ e &+ 0x8F1B_BCDC &+ w[i]
                b = rotl(b, 30)
                d = rotl(e, 5) &+ ((a & b) | (c & (a | b))) &+ d &+ 0x8F1B_BCDC &+ w[i + 1]
                a = rotl(a, 30)
                c = rotl(d, 5) &+ ((e & a) | (b & (e | a))) &+ c &+ 0x8F1B_BCDC &+ w[i + 2]
                e = rotl(e, 30)
                b = rotl(c, 5) &+ ((d & e) | (a & (d | e))) &+ b &+ 0x8F1B_BCDC &+ w[i + 3]
                d = rotl(d, 30)
                a = rotl(b, 5) &+ ((c & d) | (e & (c | d))) &+ a &+ 0x8F1B_BCDC &+ w[i + 4]
                c = rotl(c, 30)
                i += 5
            }
            while i < 80 {
                e = rotl(a, 5) &+ (b ^ c ^ d) &+ e &+ 0xCA62_C1D6 &+ w[i]
                b = rotl(b, 30)
                d = rotl(e, 5) &+ (a ^ b ^ c) &+ d &+ 0xCA62_C1D6 &+ w[i + 1]
                a = rotl(a, 30)
                c = rotl(d, 5) &+ (e ^ a ^ b) &+ c &+ 0xCA62_C1D6 &+ w[i + 2]
                e = rotl(e, 30)
                b = rotl(c, 5) &+ (d ^ e ^ a) &+ b &+ 0xCA62_C1D6 &+ w[i + 3]
                d = rotl(d, 30)
                a = rotl(b, 5) &+ (c ^ d ^ e) &+ a &+ 0xCA62_C1D6 &+ w[i + 4]
                c = rotl(c, 30)
                i += 5
            }
            h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
        }
    }

    @inline(__always) private static func rotl(_ x: UInt32, _ n: UInt32) -> UInt32 { (x << n) | (x >> (32 - n)) }
}
