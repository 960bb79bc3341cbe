import Foundation
import GatewayCore
import Testing

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
