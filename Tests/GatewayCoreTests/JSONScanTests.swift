import Testing
@testable import GatewayCore

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
}
