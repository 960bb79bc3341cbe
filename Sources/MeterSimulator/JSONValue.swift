/// A parsed JSON document. The meter file format is read through this small parser rather than
/// `JSONSerialization`, so that numbers and booleans stay distinct, key order is kept for messages,
/// duplicate keys are refused, and every error names the place it happened.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([(key: String, value: JSONValue)])

    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case let (.bool(a), .bool(b)): a == b
        case let (.number(a), .number(b)): a == b
        case let (.string(a), .string(b)): a == b
        case let (.array(a), .array(b)): a == b
        case let (.object(a), .object(b)):
            a.count == b.count && zip(a, b).allSatisfy { $0.key == $1.key && $0.value == $1.value }
        default: false
        }
    }

    /// A short name of the JSON type, for error messages.
    public var typeName: String {
        switch self {
        case .null: "null"
        case .bool: "a boolean"
        case .number: "a number"
        case .string: "a string"
        case .array: "an array"
        case .object: "an object"
        }
    }

    /// Parses a complete JSON text (UTF-8). Nesting deeper than 64 levels is refused.
    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.atEnd else { throw parser.error("unexpected data after the document") }
        return value
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8))
    }
}

public struct JSONParseError: Error, Sendable, CustomStringConvertible, Equatable {
    public var line: Int
    public var column: Int
    public var message: String
    public var description: String { "JSON line \(line) column \(column): \(message)" }
}

private struct JSONParser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { index >= bytes.count }

    func error(_ message: String) -> JSONParseError {
        var line = 1
        var column = 1
        for b in bytes[0..<min(index, bytes.count)] {
            if b == 0x0A { line += 1; column = 1 } else { column += 1 }
        }
        return JSONParseError(line: line, column: column, message: message)
    }

    mutating func skipWhitespace() {
        while index < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[index]) { index += 1 }
    }

    func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    mutating func expect(_ literal: String) throws(JSONParseError) {
        let lit = Array(literal.utf8)
        guard index + lit.count <= bytes.count, Array(bytes[index..<(index + lit.count)]) == lit else {
            throw error("expected '\(literal)'")
        }
        index += lit.count
    }

    mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
        guard depth < 64 else { throw error("nesting too deep") }
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
        var members: [(key: String, value: JSONValue)] = []
        skipWhitespace()
        if peek() == UInt8(ascii: "}") { index += 1; return .object(members) }
        while true {
            skipWhitespace()
            guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
            let key = try string()
            if members.contains(where: { $0.key == key }) { throw error("duplicate key '\(key)'") }
            skipWhitespace()
            guard peek() == UInt8(ascii: ":") else { throw error("expected ':'") }
            index += 1
            skipWhitespace()
            members.append((key, try value(depth: depth + 1)))
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
            let c = bytes[index]
            let d: UInt32
            switch c {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
            default: throw error("invalid \\u escape")
            }
            v = v << 4 | d
            index += 1
        }
        return v
    }

    mutating func string() throws(JSONParseError) -> String {
        index += 1
        var out: [UInt8] = []
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

    mutating func number() throws(JSONParseError) -> Double {
        let start = index
        if peek() == UInt8(ascii: "-") { index += 1 }
        func digits(_ p: inout JSONParser) -> Int {
            var n = 0
            while let c = p.peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { p.index += 1; n += 1 }
            return n
        }
        guard digits(&self) > 0 else { throw error("invalid number") }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard digits(&self) > 0 else { throw error("invalid number") }
        }
        if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            index += 1
            if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
            guard digits(&self) > 0 else { throw error("invalid number") }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw error("invalid number") }
        return value
    }
}
