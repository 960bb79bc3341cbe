/// Where and why a JSON text was refused.
public struct JSONParseError: Error, Sendable, CustomStringConvertible, Equatable {
    /// Byte offset of the failure; `line` and `column` (both from 1) locate the same place.
    public var offset: Int
    public var line: Int
    public var column: Int
    public var message: String
    public var description: String { "JSON line \(line) column \(column): \(message)" }
}

/// A strict RFC 8259 parser for server answers, meter files and control calls. It never traps on any
/// input and refuses: nesting deeper than `maxDepth` (64) levels, duplicate member names, numbers outside
/// the grammar (`01`, `1.`, `-`) or beyond Double's range, lone or mismatched surrogates in `\u` escapes,
/// raw control characters in strings, and anything after the document. Numbers keep their text.
public enum JSONParser {
    public static let maxDepth = 64

    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        // The error comes out as a Result: before Swift 6.1, withUnsafeBufferPointer rethrows `any Error`.
        try bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONParseError) -> JSONValue in
                var parser = Parser(bytes: buffer)
                parser.skipWhitespace()
                let value = try parser.value(depth: 0)
                parser.skipWhitespace()
                guard parser.atEnd else { throw parser.error("unexpected data after the document") }
                return value
            }
        }.get()
    }

    /// Whether any of the eight bytes in `word` ends a run of plain string bytes: a quote, a backslash
    /// or a control character (below 0x20). Eight bytes are passed over at a time while none does.
    @inline(__always)
    static func stopsString(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // A byte of `x` is zero where `(x - ones) & ~x` has its high bit; below 0x20 likewise with 0x20s.
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let control = (word &- ones &* 0x20) & ~word
        return ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | control) & highs != 0
    }

    /// Reads the bytes through a pointer that is valid for the whole of `parse` (no reference counting
    /// per byte read).
    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        var atEnd: Bool { index >= bytes.count }

        func error(_ message: String) -> JSONParseError {
            var line = 1
            var column = 1
            for b in bytes[0..<min(index, bytes.count)] {
                if b == 0x0A { line += 1; column = 1 } else { column += 1 }
            }
            return JSONParseError(offset: index, line: line, column: column, message: message)
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func expect(_ literal: String) throws(JSONParseError) {
            let lit = Array(literal.utf8)
            guard index + lit.count <= bytes.count, bytes[index..<(index + lit.count)].elementsEqual(lit) else {
                throw error("expected '\(literal)'")
            }
            index += lit.count
        }

        mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth < JSONParser.maxDepth else { throw error("nesting too deep") }
            guard let b = peek() else { throw error("unexpected end of input") }
            switch b {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try expect("true"); return .bool(true)
            case UInt8(ascii: "f"): try expect("false"); return .bool(false)
            case UInt8(ascii: "n"): try expect("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw error("unexpected character")
            }
        }

        mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var members: [JSONMember] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "}") { index += 1; return .object(members) }
            // Room for a typical document's members at once instead of growing 1, 2, 4, 8.
            members.reserveCapacity(8)
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
                let key = try string()
                if members.contains(where: { $0.key == key }) { throw error("duplicate key '\(key)'") }
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                members.append(JSONMember(key, try value(depth: depth + 1)))
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an object") }
                index += 1
                if c == UInt8(ascii: "}") { return .object(members) }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or '}'") }
            }
        }

        mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var items: [JSONValue] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { index += 1; return .array(items) }
            while true {
                skipWhitespace()
                items.append(try value(depth: depth + 1))
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an array") }
                index += 1
                if c == UInt8(ascii: "]") { return .array(items) }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or ']'") }
            }
        }

        mutating func hex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                guard let d = hexDigitValue(UInt32(bytes[index])) else { throw error("invalid \\u escape") }
                v = v << 4 | UInt32(d)
                index += 1
            }
            return v
        }

        mutating func string() throws(JSONParseError) -> String {
            index += 1
            // Most strings have no escape: their bytes are taken as they are, without a copy that grows.
            let start = index
            if let base = bytes.baseAddress {
                let end = bytes.count
                var i = index
                while i + 8 <= end, !JSONParser.stopsString(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { i += 8 }
                while i < end {
                    let c = base[i]
                    if c == UInt8(ascii: "\"") {
                        index = i + 1
                        return String(decoding: UnsafeBufferPointer(start: base + start, count: i - start), as: UTF8.self)
                    }
                    if c == UInt8(ascii: "\\") || c < 0x20 { break }
                    i += 1
                }
                index = i
            }
            var out = Array(bytes[start..<index])
            while true {
                guard let c = peek() else { throw error("unterminated string") }
                index += 1
                switch c {
                case UInt8(ascii: "\""):
                    return String(decoding: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let e = peek() else { throw error("unterminated escape") }
                    index += 1
                    switch e {
                    case UInt8(ascii: "\""): out.append(0x22)
                    case UInt8(ascii: "\\"): out.append(0x5C)
                    case UInt8(ascii: "/"): out.append(0x2F)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard peek() == UInt8(ascii: "\\") else { throw error("lone surrogate in \\u escape") }
                            index += 1
                            guard peek() == UInt8(ascii: "u") else { throw error("lone surrogate in \\u escape") }
                            index += 1
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid surrogate pair") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                        out.append(contentsOf: Array(String(Character(u)).utf8))
                    default: throw error("invalid escape")
                    }
                case 0x00..<0x20:
                    throw error("control character in string")
                default:
                    out.append(c)
                }
            }
        }

        /// RFC 8259 number grammar: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?
        mutating func number() throws(JSONParseError) -> JSONNumber {
            let start = index
            func digits(_ p: inout Parser) -> Int {
                var n = 0
                while let c = p.peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { p.index += 1; n += 1 }
                return n
            }
            if peek() == UInt8(ascii: "-") { index += 1 }
            var wholeDigits = 1
            if peek() == UInt8(ascii: "0") {
                index += 1
            } else {
                wholeDigits = digits(&self)
                guard wholeDigits > 0 else { throw error("invalid number") }
            }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw error("invalid number") }
            }
            var exponent = false
            if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
                index += 1
                if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw error("invalid number") }
                exponent = true
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            // Only an exponent or more than 308 whole digits can take a number beyond Double's range.
            if exponent || wholeDigits > 308 {
                guard let value = Double(text), value.isFinite else { throw error("invalid number") }
            }
            return JSONNumber(parsed: text)
        }
    }
}
