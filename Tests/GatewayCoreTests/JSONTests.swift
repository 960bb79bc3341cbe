import Foundation
import GatewayCore
import Support
import Testing
import TestSupport

@Suite("JSON writer")
struct JSONTests {
    @Test func keysKeepTheirOrderAndAbsentValuesAreLeftOut() {
        var o = JSONObjectBuilder()
        o.add("z", 1)
        o.add("a", "text")
        o.add("missing", nil as Int?)
        o.add("flag", false)
        o.add("list", ["x", "y"])
        o.add("none", JSONValue.null)
        #expect(o.value.compactText == #"{"z":1,"a":"text","flag":false,"list":["x","y"],"none":null}"#)
    }

    @Test func numbersArePrintedAsGivenAndNeverAsNaN() {
        #expect(JSONValue.decimal("0.00111").compactText == "0.00111")
        #expect(JSONValue.decimal("111.0").compactText == "111.0")
        #expect(JSONValue.decimal("NaN").compactText == "null")
        #expect(JSONValue.decimal("1.").compactText == "null")
        #expect(JSONValue.decimal("01").compactText == "null")
        #expect(JSONValue.decimal("-0.5e-3").compactText == "-0.5e-3")
        #expect(JSONValue.double(.nan).compactText == "null")
        #expect(JSONValue.double(.infinity).compactText == "null")
        #expect(JSONValue.double(0.1).compactText == "0.1")
        #expect(JSONValue.double(-0.0).compactText == "0")
        #expect(JSONValue.int(Int64.min).compactText == "-9223372036854775808")
        #expect(JSONValue.int(UInt16.max).compactText == "65535")
    }

    @Test func stringsAreEscaped() {
        let text = "quote \" backslash \\ newline \n tab \t bell \u{07} del \u{7F} é 😀"
        let json = JSONValue.string(text).compactText
        #expect(json == #""quote \" backslash \\ newline \n tab \t bell \u0007 del \u007f é 😀""#)
        // A JSON parser reads back exactly the original string.
        let parsed = try? JSONSerialization.jsonObject(with: Data(("[" + json + "]").utf8)) as? [String]
        #expect(parsed == [text])
    }

    @Test func prettyAndCompactParseToTheSameValue() throws {
        var inner = JSONObjectBuilder()
        inner.add("k", 1)
        var o = JSONObjectBuilder()
        o.add("object", inner.value)
        o.add("empty_list", JSONValue.array([]))
        o.add("empty_object", JSONValue.object([]))
        o.add("list", JSONValue.array([.int(1), .bool(true), .null, .string("s")]))
        let compact = o.value.compactText
        let pretty = o.value.prettyText
        #expect(!compact.contains("\n"))
        #expect(pretty.contains("\n  \"object\": {\n    \"k\": 1\n  },"))
        let a = try JSONSerialization.jsonObject(with: Data(compact.utf8)) as? NSDictionary
        let b = try JSONSerialization.jsonObject(with: Data(pretty.utf8)) as? NSDictionary
        #expect(a != nil && a == b)
    }
}

@Suite("JSON parser and streaming writer")
struct JSONParserTests {
    @Test func parsesAnswerShapes() throws {
        let text = #"[{"_id":"abc","mbg":112,"ok":true,"none":null,"x":-1.5e3,"s":"a\"\u00e9\ud83d\ude00"}]"#
        let value = try JSONParser.parse(Array(text.utf8))
        let first = value.arrayValue?.first
        #expect(first?["_id"]?.stringValue == "abc")
        #expect(first?["mbg"]?.int64Value == 112)
        #expect(first?["ok"]?.boolValue == true)
        #expect(first?["none"] == .null)
        #expect(first?["x"]?.doubleValue == -1500)
        #expect(first?["s"]?.stringValue == "a\"é😀")
    }

    @Test(arguments: ["", "[", "{\"a\"}", "[1,]", "01", "\"\\x\"", "[1] x", "{\"a\":tru}", "\"\u{01}\"", "-", "1.", "1e"])
    func rejectsMalformed(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONParser.parse(Array(text.utf8)) }
    }

    @Test func neverTrapsOnRandomOrDeepInput() {
        var rng = SplitMix(seed: 7)
        let alphabet = Array("[]{}\",:0123456789-+.eEtrufalsn \\u".utf8)
        for _ in 0..<3000 {
            let length = Int(rng.next() % 40)
            let bytes = (0..<length).map { _ in alphabet[Int(rng.next() % UInt64(alphabet.count))] }
            _ = try? JSONParser.parse(bytes)
        }
        let deep = Array(repeating: UInt8(ascii: "["), count: 100_000)
        #expect(throws: JSONParseError.self) { try JSONParser.parse(deep) }
    }

    @Test func writerEscapesAndRoundTrips() throws {
        var w = JSONWriter()
        w.beginObject()
        w.string("s", "quote\" backslash\\ newline\n tab\t ctl\u{01}")
        w.integer("n", -42)
        w.decimal("d", 6.25, fractionDigits: 3)
        w.decimal("whole", 112.0, fractionDigits: 1)
        w.bool("b", false)
        w.endObject()
        let parsed = try JSONParser.parse(w.bytes)
        #expect(parsed["s"]?.stringValue == "quote\" backslash\\ newline\n tab\t ctl\u{01}")
        #expect(parsed["n"]?.int64Value == -42)
        #expect(parsed["d"] == .decimal("6.25"))
        #expect(parsed["whole"] == .decimal("112"))
        #expect(parsed["b"]?.boolValue == false)
    }
}

@Suite struct JSONValueParseTests {
    @Test func parsesValues() throws {
        let v = try JSONValue.parse(#" {"a": [1, -2.5e1, true, false, null, "x\u00e9\n\ud83d\ude00"]} "#)
        #expect(v == .object([JSONMember("a", .array([.int(1), .decimal("-2.5e1"), .bool(true), .bool(false), .null, .string("xé\n😀")]))]))
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\" 1}", "01x", "\"abc", "{\"a\":1,\"a\":2}", "[1] 2", "\"\\ud800\"", "nul"])
    func refusesMalformed(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    @Test func refusesDeepNesting() {
        let text = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    @Test func nestingLimitIsSixtyFourLevels() throws {
        let ok = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        #expect(try JSONValue.parse(ok).arrayValue != nil)
        let deep = String(repeating: "[", count: 65) + String(repeating: "]", count: 65)
        #expect(throws: JSONParseError.self) { try JSONValue.parse(deep) }
    }

    @Test(arguments: ["1e400", "-1e400", "[\"\\udc00\"]", "[\"\\ud800\\u0041\"]"])
    func refusesNumbersBeyondDoubleAndBadSurrogates(_ text: String) {
        #expect(throws: JSONParseError.self) { try JSONValue.parse(text) }
    }

    /// Strings are taken as they are up to their first escape, then decoded byte by byte: both halves
    /// must give the same text, and a control character after a plain start is still refused.
    @Test func stringsWithAPlainStartAndEscapesAfterIt() throws {
        let v = try JSONValue.parse(#"["plain Zürich", "abc\n\u00e9\"x\\", "\u0041bc", "tail\ud83d\ude00"]"#)
        #expect(v == .array([.string("plain Zürich"), .string("abc\né\"x\\"), .string("Abc"), .string("tail😀")]))
        #expect(throws: JSONParseError.self) { try JSONValue.parse("[\"abc\u{01}def\"]") }
        #expect(throws: JSONParseError.self) { try JSONValue.parse("[\"abc\\q\"]") }
        #expect(throws: JSONParseError.self) { try JSONValue.parse("[\"abc") }
    }

    /// Only an exponent or more than 308 whole digits can leave Double's range: the number text is kept
    /// as written either way, and a number beyond the range is refused.
    @Test func numbersAtTheEdgeOfDoublesRangeKeepTheirText() throws {
        let nines = String(repeating: "9", count: 308)
        let widest = "1" + String(repeating: "0", count: 308)
        for text in [nines, widest, "-" + widest, widest + ".5", "0." + String(repeating: "0", count: 400) + "1", "1e308", "1.7e-400"] {
            #expect(try JSONValue.parse("[\(text)]") == .array([.decimal(text)]), "\(text.prefix(12))")
        }
        for text in ["1" + String(repeating: "0", count: 309), "-2" + String(repeating: "0", count: 309) + ".0", "2e308"] {
            #expect(throws: JSONParseError.self) { try JSONValue.parse("[\(text)]") }
        }
    }

    @Test func errorsNameLineAndColumn() {
        let error = #expect(throws: JSONParseError.self) { try JSONValue.parse("{\n  \"a\" 1}") }
        #expect(error?.offset == 8)
        #expect(error?.description == "JSON line 2 column 7: expected ':'")
    }
}
