/// A JSON value with ordered object members, and a writer with stable output: keys in insertion order,
/// numbers exactly as given (decimal text is never re-formatted through binary floating point), NaN and
/// infinities written as `null`, strings escaped per RFC 8259. No Foundation involved.
public indirect enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object([JSONMember])

    public static func int(_ value: some BinaryInteger) -> JSONValue { .number(JSONNumber(value)) }
    /// A double in its shortest round-trip form; NaN and infinities become `null`.
    public static func double(_ value: Double) -> JSONValue {
        JSONNumber(value).map(JSONValue.number) ?? .null
    }
    /// A number from trusted decimal text (e.g. `0.00111`, `111.0`); `null` when the text is not a JSON number.
    public static func decimal(_ text: String) -> JSONValue {
        JSONNumber(text: text).map(JSONValue.number) ?? .null
    }

    /// Compact text on one line: `{"a":1,"b":[true,null]}`.
    public var compactText: String {
        var out = ""
        JSONWriter.write(self, into: &out, indent: nil, level: 0)
        return out
    }

    /// Indented text (two spaces), members one per line, no trailing newline.
    public var prettyText: String {
        var out = ""
        JSONWriter.write(self, into: &out, indent: "  ", level: 0)
        return out
    }
}

public struct JSONMember: Sendable, Equatable {
    public var key: String
    public var value: JSONValue
    public init(_ key: String, _ value: JSONValue) {
        self.key = key
        self.value = value
    }
}

/// The text of a JSON number, validated against the RFC 8259 grammar.
public struct JSONNumber: Sendable, Equatable, CustomStringConvertible {
    public let text: String

    public init(_ value: some BinaryInteger) { text = String(value) }

    /// Nil for NaN and infinities.
    public init?(_ value: Double) {
        guard value.isFinite else { return nil }
        // Swift prints the shortest representation that reads back to the same Double (`111.0`, `1e-05`),
        // which is valid JSON number text.
        text = value == 0 ? "0" : "\(value)"
    }

    public init?(text: String) {
        guard JSONNumber.isValid(text) else { return nil }
        self.text = text
    }

    public var description: String { text }

    static func isValid(_ text: String) -> Bool {
        var it = Array(text.utf8)[...]
        func digits(_ s: inout ArraySlice<UInt8>) -> Int {
            var n = 0
            while let c = s.first, c >= 48, c <= 57 { s.removeFirst(); n += 1 }
            return n
        }
        if it.first == UInt8(ascii: "-") { it.removeFirst() }
        if it.first == UInt8(ascii: "0") {
            it.removeFirst()
        } else if digits(&it) == 0 {
            return false
        }
        if it.first == UInt8(ascii: ".") {
            it.removeFirst()
            if digits(&it) == 0 { return false }
        }
        if it.first == UInt8(ascii: "e") || it.first == UInt8(ascii: "E") {
            it.removeFirst()
            if it.first == UInt8(ascii: "+") || it.first == UInt8(ascii: "-") { it.removeFirst() }
            if digits(&it) == 0 { return false }
        }
        return it.isEmpty
    }
}

/// Builds an object in key order, leaving out absent values: `object.add("unit", unit)` with a nil
/// `unit` adds nothing.
public struct JSONObjectBuilder: Sendable {
    public private(set) var members: [JSONMember] = []
    public init() {}

    public mutating func add(_ key: String, _ value: JSONValue?) {
        if let value { members.append(JSONMember(key, value)) }
    }
    public mutating func add(_ key: String, _ value: String?) { add(key, value.map(JSONValue.string)) }
    public mutating func add(_ key: String, _ value: Bool?) { add(key, value.map(JSONValue.bool)) }
    public mutating func add<I: BinaryInteger>(_ key: String, _ value: I?) { add(key, value.map { JSONValue.int($0) }) }
    public mutating func add(_ key: String, _ value: [String]?) {
        add(key, value.map { JSONValue.array($0.map(JSONValue.string)) })
    }

    public var value: JSONValue { .object(members) }
}

public enum JSONWriter {
    public static func write(_ value: JSONValue, into out: inout String, indent: String?, level: Int) {
        switch value {
        case .null: out += "null"
        case let .bool(b): out += b ? "true" : "false"
        case let .number(n): out += n.text
        case let .string(s): writeString(s, into: &out)
        case let .array(items):
            if items.isEmpty { out += "[]"; return }
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                newline(&out, indent, level + 1)
                write(item, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out += "]"
        case let .object(members):
            if members.isEmpty { out += "{}"; return }
            out += "{"
            for (i, member) in members.enumerated() {
                if i > 0 { out += "," }
                newline(&out, indent, level + 1)
                writeString(member.key, into: &out)
                out += indent == nil ? ":" : ": "
                write(member.value, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out += "}"
        }
    }

    private static func newline(_ out: inout String, _ indent: String?, _ level: Int) {
        guard let indent else { return }
        out += "\n"
        for _ in 0..<level { out += indent }
    }

    private static let hex: [Character] = Array("0123456789abcdef")

    public static func writeString(_ s: String, into out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                if scalar.value < 0x20 || scalar.value == 0x7F {
                    let v = Int(scalar.value)
                    out += "\\u00"
                    out.append(hex[v >> 4])
                    out.append(hex[v & 0xF])
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}
