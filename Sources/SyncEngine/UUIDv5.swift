import GatewayCore
import GlucoseProfile

/// A UUID as 16 bytes, formatted lower-case with dashes (RFC 9562 section 4).
public struct NameBasedUUID: Sendable, Equatable, CustomStringConvertible {
    public let bytes: [UInt8]

    /// RFC 9562 section 5.5: version 5 (SHA-1) of `name` in `namespace`, which is any 16 bytes.
    public init(namespace: [UInt8], name: some Sequence<UInt8>) {
        var sha = SHA1()
        sha.update(namespace)
        sha.update(name)
        var digest = Array(sha.finalize().prefix(16))
        digest[6] = (digest[6] & 0x0F) | 0x50
        digest[8] = (digest[8] & 0x3F) | 0x80
        bytes = digest
    }

    /// The text of the version-5 UUID whose SHA-1 input (namespace, then name) is `input`, without a value
    /// or an array built for it: the digest's first 16 bytes with the version and variant bits set.
    static func text(hashing input: UnsafeRawBufferPointer) -> String {
        let h = SHA1.hash(input)
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { out in
            digits.withUTF8Buffer { hex in
                var at = 0
                func put(_ byte: UInt8) {
                    out[at] = hex[Int(byte >> 4)]
                    out[at + 1] = hex[Int(byte & 0x0F)]
                    at += 2
                }
                func dash() {
                    out[at] = UInt8(ascii: "-")
                    at += 1
                }
                func put(_ word: UInt32) {
                    put(UInt8(truncatingIfNeeded: word >> 24))
                    put(UInt8(truncatingIfNeeded: word >> 16))
                    put(UInt8(truncatingIfNeeded: word >> 8))
                    put(UInt8(truncatingIfNeeded: word))
                }
                put(h.0)
                dash()
                put(UInt8(truncatingIfNeeded: h.1 >> 24))
                put(UInt8(truncatingIfNeeded: h.1 >> 16))
                dash()
                put(UInt8(truncatingIfNeeded: h.1 >> 8) & 0x0F | 0x50)
                put(UInt8(truncatingIfNeeded: h.1))
                dash()
                put(UInt8(truncatingIfNeeded: h.2 >> 24) & 0x3F | 0x80)
                put(UInt8(truncatingIfNeeded: h.2 >> 16))
                dash()
                put(UInt8(truncatingIfNeeded: h.2 >> 8))
                put(UInt8(truncatingIfNeeded: h.2))
                put(h.3)
                return at
            }
        }
    }

    public init(namespace: NameBasedUUID, name: String) {
        self.init(namespace: namespace.bytes, name: name.utf8)
    }

    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`; nil for anything else.
    public init?(parsing text: String) {
        var out: [UInt8] = []
        var high: UInt8?
        for (i, ch) in text.utf8.enumerated() {
            if [8, 13, 18, 23].contains(i) {
                guard ch == UInt8(ascii: "-") else { return nil }
                continue
            }
            guard let nibble = Self.nibble(ch) else { return nil }
            if let h = high {
                out.append(h << 4 | nibble)
                high = nil
            } else {
                high = nibble
            }
        }
        guard out.count == 16, high == nil, text.utf8.count == 36 else { return nil }
        bytes = out
    }

    private static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    public var description: String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { out in
            digits.withUTF8Buffer { hex in
                var at = 0
                for (i, byte) in bytes.prefix(16).enumerated() {
                    if i == 4 || i == 6 || i == 8 || i == 10 {
                        out[at] = UInt8(ascii: "-")
                        at += 1
                    }
                    out[at] = hex[Int(byte >> 4)]
                    out[at + 1] = hex[Int(byte & 0x0F)]
                    at += 2
                }
                return at
            }
        }
    }

    /// The DNS namespace of RFC 9562 (6ba7b810-9dad-11d1-80b4-00c04fd430c8).
    public static let dnsNamespace: [UInt8] = [0x6B, 0xA7, 0xB8, 0x10, 0x9D, 0xAD, 0x11, 0xD1, 0x80, 0xB4, 0x00, 0xC0, 0x4F, 0xD4, 0x30, 0xC8]
}

/// The idempotency key of one reading: the same reading read twice, by any gateway, from the same meter
/// gets the same key, so a server can recognise a re-send.
public enum IdempotencyKey {
    /// This product's namespace: UUIDv5 of the DNS name `glucose-gateway.invalid`, fixed for ever because
    /// every key already sent depends on it.
    public static let namespace = NameBasedUUID(namespace: NameBasedUUID.dnsNamespace, name: "glucose-gateway.invalid".utf8)

    /// UUIDv5 over `<meter identity>|<sequence>|<user-facing meter time>`. The meter identity is its
    /// Bluetooth address in upper case; the meter time is what the meter reported (base time plus time
    /// offset, before any clock correction), so a later correction never changes the key.
    public static func key(meterAddress: String, sequence: Int, meterTime: String) -> String {
        var time = meterTime
        return time.withUTF8 { key(meterAddress: meterAddress, sequence: sequence, meterTime: $0) }
    }

    /// The same key for the meter time as `GlucoseDateTime.isoString` writes it, without that text built
    /// as a `String`.
    public static func key(meterAddress: String, sequence: Int, meterTime: GlucoseDateTime) -> String {
        meterTime.withISOBytes { key(meterAddress: meterAddress, sequence: sequence, meterTime: $0) }
    }

    /// The name's bytes written once on the stack after the namespace, and hashed in one pass.
    private static func key(meterAddress: String, sequence: Int, meterTime: UnsafeBufferPointer<UInt8>) -> String {
        var address = meterAddress
        // `uppercased()` of an ASCII address is its letters a-z raised; any other text goes through it.
        let ascii: String? = address.withUTF8 { bytes in
            for c in bytes where c >= 0x80 { return nil }
            return hash(address: bytes, raising: true, sequence: sequence, meterTime: meterTime)
        }
        return ascii ?? key(upperAddress: meterAddress.uppercased(), sequence: sequence, meterTime: meterTime)
    }

    private static func key(upperAddress: String, sequence: Int, meterTime: UnsafeBufferPointer<UInt8>) -> String {
        var address = upperAddress
        return address.withUTF8 { hash(address: $0, raising: false, sequence: sequence, meterTime: meterTime) }
    }

    private static func hash(address: UnsafeBufferPointer<UInt8>, raising: Bool, sequence: Int, meterTime: UnsafeBufferPointer<UInt8>) -> String {
        // namespace, address, `|`, the sequence (at most 20 characters), `|`, the time.
        let capacity = 16 + address.count + 1 + 20 + 1 + meterTime.count
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: capacity) { buffer in
            var at = 0
            for byte in namespace.bytes.prefix(16) {
                buffer[at] = byte
                at += 1
            }
            for var byte in address {
                if raising, byte >= UInt8(ascii: "a"), byte <= UInt8(ascii: "z") { byte -= 0x20 }
                buffer[at] = byte
                at += 1
            }
            buffer[at] = UInt8(ascii: "|")
            at += 1
            // The sequence as `"\(sequence)"` writes it: `-` first when negative.
            if let base = buffer.baseAddress { PaddedDecimal.write(sequence, width: 0, base, &at) }
            buffer[at] = UInt8(ascii: "|")
            at += 1
            for byte in meterTime {
                buffer[at] = byte
                at += 1
            }
            return NameBasedUUID.text(hashing: UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: buffer[..<at])))
        }
    }
}
