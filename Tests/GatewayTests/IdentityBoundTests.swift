import GatewayCore
import GlucoseProfile
import Testing
import TestSupport
@testable import Meters

/// Device Information strings are cut to 64 characters (and 256 bytes) on a character boundary where they
/// are stored, control characters removed; the bytes as sent are kept up to the 512 an attribute holds.
@Suite("Identity strings are bounded")
struct IdentityBoundTests {
    @Test func aTenKilobyteModelIsCutTo64Characters() {
        let bytes = Array(String(repeating: "GL-1 ", count: 2_048).utf8)
        let (text, changed) = IdentityText.clean(bytes)
        #expect(changed)
        #expect(text?.count == 64)
        #expect(text?.hasPrefix("GL-1 GL-1") == true)
        #expect(IdentityText.raw(bytes).count == 512)
    }

    @Test func theCutFallsOnACharacterBoundary() {
        // 63 letters, then an e with a combining acute accent (one character, two scalars), then more.
        let text = String(repeating: "a", count: 63) + "e\u{301}" + "zzz"
        let (cleaned, _) = IdentityText.clean(Array(text.utf8))
        #expect(cleaned == String(repeating: "a", count: 63) + "e\u{301}")
        // Four-byte characters: 64 of them are 256 bytes, all kept; the 65th is not.
        let emoji = String(repeating: "\u{1F600}", count: 70)
        #expect(IdentityText.clean(Array(emoji.utf8)).text == String(repeating: "\u{1F600}", count: 64))
        // One "character" of thousands of combining marks cannot carry the length back in.
        let bomb = "x" + String(repeating: "\u{301}", count: 5_000)
        #expect(IdentityString.bounded(bomb).utf8.count <= IdentityString.maxUTF8Bytes)
        #expect(IdentityString.bounded("ok" + bomb) == "ok")
    }

    @Test func controlCharactersAreRemovedAndShortStringsKeptAsTheyAre() {
        #expect(IdentityText.clean(Array("ASCENSIA\0\0\0".utf8)).text == "ASCENSIA")
        let plain = IdentityText.clean(Array("Accu-Chek Guide".utf8))
        #expect(plain.text == "Accu-Chek Guide")
        #expect(!plain.changed)
        #expect(IdentityString.bounded("a\u{7}b\u{85}c") == "abc")
        #expect(IdentityString.capped("a\nb") == "a\nb")
    }

    @Test func aDownloadStoresTheBoundedStrings() async throws {
        var script = FakeMeterScript(records: [FakeRecord.glucose(1)])
        script.model = String(repeating: "M", count: 10_240)
        script.serial = String(repeating: "7", count: 300) + "\u{1}"
        let meter = FakeMeter(script: script)
        let store = MeterDownloadTests.makeStore(meter)
        let report = try await MeterDownloadTests.download(meter, store)
        #expect(report.identity.model == String(repeating: "M", count: 64))
        #expect(report.identity.serial == String(repeating: "7", count: 64))
        let row = try #require(try await store.meter(meter.address))
        #expect(row.model?.count == 64)
        #expect(row.serial?.count == 64)
        #expect(row.manufacturer == "Acme Diagnostics")
        #expect(row.rawIdentity["model"]?.count == 512)
        #expect(row.rawIdentity["serial"]?.count == 301)
    }
}
