import GatewayCore
import Support
import SyncEngine
import Testing
import TestSupport

@Suite("SHA-1 and UUIDv5")
struct DigestTests {
    struct Vector: CustomStringConvertible, Sendable {
        var input: [UInt8]
        var hex: String
        var description: String { "\(input.count) bytes" }
    }

    // FIPS 180 examples and the empty string.
    @Test(arguments: [
        Vector(input: [], hex: "da39a3ee5e6b4b0d3255bfef95601890afd80709"),
        Vector(input: Array("abc".utf8), hex: "a9993e364706816aba3e25717850c26c9cd0d89d"),
        Vector(input: Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8), hex: "84983e441c3bd26ebaae4aa1f95129e5e54670f1"),
        Vector(input: Array("The quick brown fox jumps over the lazy dog".utf8), hex: "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12"),
        Vector(input: [UInt8](repeating: 0x61, count: 1_000_000), hex: "34aa973cd4c4daa4f61eeb2bdbad27316534016f"),
    ])
    func sha1(_ v: Vector) {
        #expect(SHA1.hex(v.input) == v.hex)
    }

    @Test func sha1AcrossBlockBoundaries() {
        // Every length around the 55/56/64-byte padding edges, fed at once and byte by byte.
        for length in 50...130 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7) }
            var incremental = SHA1()
            for b in bytes { incremental.update([b]) }
            #expect(hexString(incremental.finalize()) == SHA1.hex(bytes))
        }
    }

    @Test func sha1FedInUnevenChunks() {
        // Partial blocks, whole blocks and their mix, in every split of 150 bytes into three pieces.
        let bytes = (0..<150).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ 5) }
        let whole = SHA1.hex(bytes)
        for first in stride(from: 0, through: 150, by: 7) {
            for second in stride(from: first, through: 150, by: 11) {
                var sha = SHA1()
                sha.update(bytes[0..<first])
                sha.update(Array(bytes[first..<second]))
                sha.update(bytes[second...].lazy.map { $0 })
                #expect(hexString(sha.finalize()) == whole, "split at \(first), \(second)")
            }
        }
    }

    @Test func nightscoutSecretHeader() {
        #expect(SHA1.hex("correct-horse-battery".utf8) == "f97979ff44a9a1a4105f4bae6fe809715e0a0a84")
    }

    @Test func rfc9562Version5Example() {
        // RFC 9562 appendix A.4: UUIDv5 of "www.example.com" in the DNS namespace.
        let uuid = NameBasedUUID(namespace: NameBasedUUID.dnsNamespace, name: "www.example.com".utf8)
        #expect(uuid.description == "2ed6657d-e927-568b-95e1-2665a8aea6a2")
    }

    @Test func nightscoutV3Identifier() {
        // Nightscout API v3 computes identifiers as UUIDv5(device + "_" + date) in the namespace of the
        // 16 bytes "NightscoutRocks!".
        let uuid = NameBasedUUID(namespace: Array("NightscoutRocks!".utf8), name: "glucose-gateway://CareSens-1234ABCD_1767250930000".utf8)
        #expect(uuid.description == "a9fd2d19-9b4c-5247-8c31-474e432d8da5")
    }

    @Test func uuid5OfANameLongerThanABlock() {
        // Checked with Python's uuid.uuid5(uuid.NAMESPACE_DNS, "x" * 200).
        let uuid = NameBasedUUID(namespace: NameBasedUUID.dnsNamespace, name: String(repeating: "x", count: 200).utf8)
        #expect(uuid.description == "ddcc691a-b8e2-53e5-b059-6a232874b2eb")
    }

    @Test func idempotencyKeysStayAsSent() {
        // Keys already sent must never change. Checked with Python's uuid module:
        // uuid5(uuid5(NAMESPACE_DNS, "glucose-gateway.invalid"), "<ADDRESS>|<sequence>|<meter time>").
        #expect(IdempotencyKey.namespace.description == "32376afa-9d05-5337-bf42-1551575e5697")
        #expect(IdempotencyKey.key(meterAddress: "00:60:19:01:0e:92", sequence: 42, meterTime: "2026-01-01T08:02:10")
                == "eb7dc9b9-956d-5a4e-96ec-ab6423d7dc52")
        #expect(IdempotencyKey.key(meterAddress: "C0:26:DA:0B:E4:02", sequence: 65535, meterTime: "2031-12-31T23:59:59")
                == "c6679e8f-713b-53b2-98bc-2bc1c950b12d")
    }

    @Test func idempotencyKeyIsDeterministicAndDistinct() {
        let a = IdempotencyKey.key(meterAddress: "00:60:19:01:0e:92", sequence: 42, meterTime: "2026-01-01T08:02:10")
        let b = IdempotencyKey.key(meterAddress: "00:60:19:01:0E:92", sequence: 42, meterTime: "2026-01-01T08:02:10")
        let c = IdempotencyKey.key(meterAddress: "00:60:19:01:0E:92", sequence: 43, meterTime: "2026-01-01T08:02:10")
        let d = IdempotencyKey.key(meterAddress: "00:60:19:01:0E:92", sequence: 42, meterTime: "2026-01-01T08:02:11")
        #expect(a == b)
        #expect(Set([a, c, d]).count == 3)
        let parsed = NameBasedUUID(parsing: a)
        #expect(parsed?.description == a)
        #expect(Array(a)[14] == "5")
        #expect("89ab".contains(Array(a)[19]))
    }
}

@Suite("Backoff")
struct TimeTests {
    @Test func fullJitterStaysInBounds() {
        var rng = SplitMix(seed: 1)
        for attempt in 0..<20 {
            let ceiling = Duration.milliseconds(min(30_000, 1000 << min(attempt, 20)))
            var seen = Set<Duration>()
            for _ in 0..<200 {
                let d = Backoff.fullJitter(attempt: attempt, base: .seconds(1), cap: .seconds(30), using: &rng)
                #expect(d >= .zero && d <= ceiling)
                seen.insert(d)
            }
            #expect(seen.count > 50)
        }
        for level in 0..<40 {
            let d = Backoff.longTerm(level: level, base: .seconds(30), cap: .seconds(900), using: &rng)
            #expect(d >= .seconds(30) && d <= .seconds(900))
        }
        #expect(Backoff.longTerm(level: 100, base: .seconds(30), cap: .seconds(900), using: &rng) <= .seconds(900))
    }
}
