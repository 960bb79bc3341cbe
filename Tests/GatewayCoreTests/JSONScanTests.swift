@testable import Support
import Testing
@testable import GatewayCore
import TestSupport

/// `JSONParser.scanArray` against `JSONParser.parse`: the same verdict on every input (the same error,
/// at the same place), and for arrays the same elements, with the named members in full.
@Suite struct JSONScanTests {
    static let keys = ["identifier", "_id"]

    static let documents: [String] = [
        #"[{"_id":"65f1c2","identifier":"0b6c3a6e-1b7c-5d2e-9f3a-2c1d4e5f6a7b","sgv":120,"date":1709623800000,"dateString":"2024-03-05T07:30:00.000Z","type":"sgv","device":"glucose-gateway AA:BB"},{"identifier":"x","sgv":95.5,"utcOffset":-60}]"#,
        #"[{"type":"mbg","mbg":142,"date":1709627400000,"nested":{"a":[1,2,{"b":null}],"c":true,"d":false}},17,"text",null,[{"identifier":"inner"}]]"#,
        #"[{"ident\u0069fier":"escaped key","_id":"a\"b\\c\/d\n\u00e9\ud83d\ude00","n":-0.5e-3,"m":1E+2,"z":0}]"#,
        #"[ { "identifier" : "spaced" , "_id" : { "$oid" : "1" } } , { } , [ ] ]"#,
        #"[{"skip":{"k":1,"k":2}}]"#,
        #"[{"identifier":"a","identifier":"b"}]"#,
        #"[{"a":1,"\u0061":2}]"#,
        #"[{"\u0061":1,"a":2}]"#,
        "[{\"\u{E9}\":1,\"e\u{301}\":2}]",
        "[{\"\u{E9}\":1,\"identifier\":\"k\",\"_id\":3}]",
        #"[{"x":1,"y":{"x":2},"x":3}]"#,
        #"[{"identifiex":"near","_ie":2,"IDENTIFIER":"no","identifier":"k","_id":"1","identifie":0,"identifier_":1}]"#,
        #"[{"_id":1,"_id":2}]"#,
        #"[{"long":"abcdefghijklmnopqrstuvwxyz0123456789","esc":"abcdefgh\"ijklmnop","ctl":"abcdefghijklmnopq\r","u":"\u00e9\u00e9\u00e9\u00e9 \#u{E9}\#u{E9}\#u{E9}\#u{E9}\#u{1F600}"},"abcdefghijklmnopqrstuvwxyz"]"#,
        #"[{"a":1,"b":{"identifier":"inner","_id":[{"_id":3}]},"_id":"outer"}]"#,
        #"[{"_id":null,"identifier":7}]"#,
        #"[{"big":1"# + String(repeating: "0", count: 320) + #"}]"#,
        #"[{"bad":01}]"#,
        #"[{"bad":1.}]"#,
        #"[{"bad":-}]"#,
        #"[{"huge":1e400}]"#,
        #"[{"ctl":"a"# + "\u{01}" + #""}]"#,
        #"[{"lone":"\ud800x"}]"#,
        "[]",
        "  [ ]  ",
        #"{"identifier":"not an array"}"#,
        #""just a string""#,
        "[1,]",
        "[1] x",
        "",
        String(repeating: "[", count: 70) + String(repeating: "]", count: 70),
        "[" + String(repeating: "{\"a\":", count: 64) + "1" + String(repeating: "}", count: 64) + "]",
    ]

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

    /// Every document, every prefix of it and every one-byte change from a set of troublemakers.
    static var corpus: [[UInt8]] {
        var all: [[UInt8]] = []
        let swaps: [UInt8] = Array("\"\\{}[],:0-e. ".utf8) + [0x01, 0xFF, 0xC3]
        for text in documents {
            let bytes = Array(text.utf8)
            all.append(bytes)
            for cut in 0..<bytes.count { all.append(Array(bytes[..<cut])) }
            for i in 0..<bytes.count {
                for b in swaps where b != bytes[i] {
                    var changed = bytes
                    changed[i] = b
                    all.append(changed)
                }
            }
        }
        return all
    }

    @Test func theSameVerdictAndTheSameElementsAsAFullParse() throws {
        var arrays = 0, refused = 0
        for bytes in Self.corpus {
            let full: Result<JSONValue, JSONParseError> = Result { () throws(JSONParseError) in try JSONParser.parse(bytes) }
            let scan: Result<[JSONParser.ScannedElement]?, JSONParseError> = Result { () throws(JSONParseError) in
                try JSONParser.scanArray(bytes, keys: Self.keys)
            }
            switch (full, scan) {
            case let (.failure(a), .failure(b)):
                #expect(a == b, "\(String(decoding: bytes, as: UTF8.self))")
                refused += 1
            case let (.success(value), .success(elements)):
                guard let items = value.arrayValue else {
                    #expect(elements == nil)
                    continue
                }
                arrays += 1
                let scanned = try #require(elements)
                try #require(scanned.count == items.count)
                for (item, element) in zip(items, scanned) {
                    #expect(try JSONParser.parse(Array(bytes[element.range])) == item)
                    if case .object(let members) = item {
                        #expect(element.isObject)
                        #expect(element.members == members.filter { Self.keys.contains($0.key) })
                        for key in Self.keys { #expect(element.member(key) == item[key]) }
                    } else {
                        #expect(!element.isObject && element.members.isEmpty)
                    }
                }
            default:
                Issue.record("different verdicts for \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        // The corpus holds both kinds in numbers.
        #expect(arrays > 100 && refused > 1000)
    }

    /// Names only looked for: the same verdict as a full parse, their presence exactly where the element
    /// has them, and the built names as when all are built.
    @Test func namesLookedForAreFoundWhereAFullParseHasThem() throws {
        var flagged = 0, unflagged = 0
        for bytes in Self.corpus {
            let full: Result<JSONValue, JSONParseError> = Result { () throws(JSONParseError) in try JSONParser.parse(bytes) }
            let scan: Result<[JSONParser.ScannedElement]?, JSONParseError> = Result { () throws(JSONParseError) in
                try JSONParser.scanArray(bytes, keys: ["identifier"], present: ["_id", "sgv"])
            }
            switch (full, scan) {
            case let (.failure(a), .failure(b)):
                #expect(a == b, "\(String(decoding: bytes, as: UTF8.self))")
            case let (.success(value), .success(elements)):
                guard let items = value.arrayValue else {
                    #expect(elements == nil)
                    continue
                }
                let scanned = try #require(elements)
                try #require(scanned.count == items.count)
                for (item, element) in zip(items, scanned) {
                    #expect(try JSONParser.parse(Array(bytes[element.range])) == item)
                    if case .object(let members) = item {
                        #expect(element.members == members.filter { $0.key == "identifier" })
                        #expect(element.has(0) == (item["_id"] != nil), "\(String(decoding: bytes, as: UTF8.self))")
                        #expect(element.has(1) == (item["sgv"] != nil), "\(String(decoding: bytes, as: UTF8.self))")
                        if element.has(0) { flagged += 1 } else { unflagged += 1 }
                    } else {
                        #expect(element.members.isEmpty && !element.has(0) && !element.has(1))
                    }
                    #expect(!element.has(2) && !element.has(-1) && !element.has(64))
                }
            default:
                Issue.record("different verdicts for \(String(decoding: bytes, as: UTF8.self))")
            }
        }
        #expect(flagged > 100 && unflagged > 100)
    }
}
