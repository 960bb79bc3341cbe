/// A JSON value with ordered object members, one strict parser and one writer with stable output: keys in
/// insertion order, numbers exactly as given (decimal text is never re-formatted through binary floating
/// point), NaN and infinities written as `null`, strings escaped per RFC 8259. No Foundation involved.
/// Used for the commands' `--json`, upload bodies, server answers and the simulator's meter files.
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
        var out: [UInt8] = []
        JSONWriter.write(self, into: &out, indent: nil, level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    /// Indented text (two spaces), members one per line, no trailing newline.
    public var prettyText: String {
        var out: [UInt8] = []
        JSONWriter.write(self, into: &out, indent: "  ", level: 0)
        return String(decoding: out, as: UTF8.self)
    }

    /// Parses a complete JSON text (UTF-8) with `JSONParser`.
    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        try JSONParser.parse(bytes)
    }

    public static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        try JSONParser.parse(Array(text.utf8))
    }

    /// The member named `key` of an object; nil for a missing member or a value that is not an object.
    public subscript(key: String) -> JSONValue? {
        if case let .object(members) = self { return members.first { $0.key == key }?.value }
        return nil
    }

    public var stringValue: String? {
        if case let .string(s) = self { return s }
        return nil
    }

    public var arrayValue: [JSONValue]? {
        if case let .array(a) = self { return a }
        return nil
    }

    public var boolValue: Bool? {
        if case let .bool(b) = self { return b }
        return nil
    }

    /// An integer written as such, or as a whole decimal below 9e15 in magnitude (`112.0`, `1.12e2`).
    public var int64Value: Int64? {
        if case let .number(n) = self {
            return Int64(n.text) ?? Double(n.text).flatMap { $0.isFinite && $0 == $0.rounded() && abs($0) < 9.0e15 ? Int64($0) : nil }
        }
        return nil
    }

    public var doubleValue: Double? {
        if case let .number(n) = self { return Double(n.text) }
        return nil
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

    /// Text the parser has already checked against the grammar.
    init(parsed text: String) { self.text = text }

    public var description: String { text }

    /// The nearest Double (parsed numbers are always within Double's range).
    public var value: Double { Double(text) ?? .nan }

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
