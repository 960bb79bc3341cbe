import GatewayCore

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
        let name = "\(meterAddress.uppercased())|\(sequence)|\(meterTime)"
        return NameBasedUUID(namespace: namespace, name: name).description
    }
}
