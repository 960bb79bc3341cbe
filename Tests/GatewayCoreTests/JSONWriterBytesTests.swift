@testable import GatewayCore
@testable import Support
import Testing
import TestSupport

/// The writer's bytes are frozen in every outbox body: the writer against a plain reference (each byte
/// appended on its own, a stack of flags for the commas) over many generated documents.
@Suite("JSON writer bytes")
struct JSONWriterBytesTests {
    struct Reference {
        var bytes: [UInt8] = []
        var needsComma: [Bool] = [false]

        mutating func key(_ name: String?) {
            if needsComma[needsComma.count - 1] { bytes.append(UInt8(ascii: ",")) }
            needsComma[needsComma.count - 1] = true
            if let name {
                Self.append(name, to: &bytes)
                bytes.append(UInt8(ascii: ":"))
            }
        }

        mutating func begin(_ name: String?, _ bracket: Character) {
            key(name)
            bytes += Array(String(bracket).utf8)
            needsComma.append(false)
        }

        mutating func end(_ bracket: Character) {
            needsComma.removeLast()
            bytes += Array(String(bracket).utf8)
        }

        mutating func string(_ name: String?, _ value: String) {
            key(name)
            Self.append(value, to: &bytes)
        }

        mutating func integer(_ name: String?, _ value: Int64) {
            key(name)
            bytes += Array(String(value).utf8)
        }

        static func append(_ s: String, to out: inout [UInt8], escapingDelete: Bool = false) {
            out.append(UInt8(ascii: "\""))
            for b in s.utf8 {
                switch b {
                case 0x22: out += [0x5C, 0x22]
                case 0x5C: out += [0x5C, 0x5C]
                case 0x0A: out += [0x5C, UInt8(ascii: "n")]
                case 0x0D: out += [0x5C, UInt8(ascii: "r")]
                case 0x09: out += [0x5C, UInt8(ascii: "t")]
                case 0..<0x20: out += Array(("\\u00" + hexString([b])).utf8)
                case 0x7F where escapingDelete: out += Array("\\u007f".utf8)
                default: out.append(b)
                }
            }
            out.append(UInt8(ascii: "\""))
        }
    }

    static let pieces = ["", "a", "mbg", "glucose-gateway://CareSens-1234ABCD", "\"", "\\", "\n", "\r", "\t", "\u{00}", "\u{01}", "\u{1F}",
                         "\u{7F}", " ", "/", "\u{E9}", "e\u{301}", "\u{65E5}\u{672C}", "\u{1F600}", "x\"y\\z", String(repeating: "long ", count: 40)]

    static func text(_ rng: inout SplitMix) -> String {
        (0..<rng.below(6)).map { _ in pieces[rng.below(pieces.count)] }.joined()
    }

    @Test func generatedDocumentsMatchTheReference() {
        var rng = SplitMix(seed: 0x15_0A_0B)
        for i in 0..<2_000 {
            var w = JSONWriter()
            var r = Reference()
            var open: [Character] = []
            // Up to 80 levels deep: past the 64 the writer keeps in one word.
            for _ in 0..<(1 + rng.below(200)) {
                let name: String? = open.last == "]" || (open.isEmpty && rng.chance(50)) ? nil : Self.text(&rng)
                switch rng.below(6) {
                case 0 where open.count < 80:
                    let array = rng.chance(40)
                    if array { w.beginArray(name) } else { w.beginObject(name) }
                    r.begin(name, array ? "[" : "{")
                    open.append(array ? "]" : "}")
                case 1 where !open.isEmpty:
                    if open.removeLast() == "]" { w.endArray(); r.end("]") } else { w.endObject(); r.end("}") }
                case 2:
                    let value = Int64(truncatingIfNeeded: rng.next()) >> rng.below(64)
                    w.integer(name, value)
                    r.integer(name, value)
                case 3:
                    // The same string given as UTF-8 bytes.
                    var value = Self.text(&rng)
                    value.withUTF8 { w.string(name, utf8: $0) }
                    r.string(name, value)
                default:
                    let value = Self.text(&rng)
                    w.string(name, value)
                    r.string(name, value)
                }
            }
            while let last = open.popLast() {
                if last == "]" { w.endArray(); r.end("]") } else { w.endObject(); r.end("}") }
            }
            #expect(w.bytes == r.bytes, "document \(i)")
        }
    }

    /// `writesVerbatim` says true exactly when `appendQuoted` writes the bytes as they are between quotes,
    /// at every length around the eight-byte steps and with the byte that needs an escape anywhere.
    @Test func verbatimExactlyWhenNothingIsEscaped() {
        var rng = SplitMix(seed: 0x7E1B)
        let pool: [UInt8] = [0x00, 0x01, 0x09, 0x0A, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x2F, 0x5B, 0x5C, 0x5D, 0x61, 0x7F, 0x80, 0xC3, 0xA9, 0xFF]
        for length in 0...40 {
            for _ in 0..<200 {
                var bytes = (0..<length).map { _ in UInt8(ascii: "a") &+ UInt8(truncatingIfNeeded: rng.below(26)) }
                if length > 0, rng.chance(60) { bytes[rng.below(length)] = pool[rng.below(pool.count)] }
                if length > 0, rng.chance(20) { bytes[rng.below(length)] = pool[rng.below(pool.count)] }
                bytes.withUnsafeBufferPointer { text in
                    var out: [UInt8] = []
                    JSONWriter.appendQuoted(text, to: &out, escapingDelete: false)
                    #expect(JSONWriter.writesVerbatim(text) == (out == [0x22] + bytes + [0x22]), "\(bytes)")
                }
            }
        }
    }

    @Test func integersAtTheirEdges() {
        for value: Int64 in [0, -1, 1, 9, 10, -10, 99, 100, Int64.max, Int64.min, Int64.min + 1, 1_767_250_935_000] {
            var w = JSONWriter()
            w.integer(nil, value)
            #expect(String(decoding: w.bytes, as: UTF8.self) == String(value))
        }
    }

    /// Decimals of any finite size are written without trapping: beyond Int64 as the Double's own text.
    @Test func decimalsBeyondInt64() throws {
        #expect(JSONWriter.formatDecimal(1e300, fractionDigits: 1) == "1e+300")
        #expect(JSONWriter.formatDecimal(-9.3e18, fractionDigits: 0) == "-9.3e+18")
        #expect(JSONWriter.formatDecimal(1e16, fractionDigits: 1) == "10000000000000000")
        #expect(JSONWriter.formatDecimal(5.5, fractionDigits: 1) == "5.5")
        for value in [1e300, -1.7976931348623157e308, 9.2e18] {
            let text = JSONWriter.formatDecimal(value, fractionDigits: 3)
            #expect(try JSONParser.parse(Array(text.utf8)).doubleValue == value.rounded())
        }
    }

    @Test func escapesAsTheyWereWritten() {
        var out: [UInt8] = []
        JSONWriter.appendString("a\"b\\c\nd\re\tf\u{00}g\u{1F}h\u{7F}\u{E9}\u{1F600}", to: &out)
        #expect(String(decoding: out, as: UTF8.self) == #""a\"b\\c\nd\re\tf\u0000g\u001fh"# + "\u{7F}\u{E9}\u{1F600}\"")
        out = []
        JSONWriter.appendString("\u{7F}x\u{7F}", to: &out, escapingDelete: true)
        #expect(String(decoding: out, as: UTF8.self) == #""\u007fx\u007f""#)
        var rng = SplitMix(seed: 0xE5C)
        for i in 0..<5_000 {
            let s = Self.text(&rng)
            for delete in [false, true] {
                var out: [UInt8] = []
                JSONWriter.appendString(s, to: &out, escapingDelete: delete)
                var expected: [UInt8] = []
                Reference.append(s, to: &expected, escapingDelete: delete)
                #expect(out == expected, "case \(i)")
            }
        }
    }
}
