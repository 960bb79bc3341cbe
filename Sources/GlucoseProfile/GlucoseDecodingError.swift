/// Why a Glucose Service value could not be decoded: a typed error naming the field, the byte offset where
/// the field starts, and a short detail. Its `description` is one line and never contains a glucose value.
///
/// Throwing is cheap: the field name and detail are kept as static text and numbers and only turned into
/// strings when read, so a flood of malformed input costs no string building.
public struct GlucoseDecodingError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Kind: Sendable, Equatable, Hashable {
        /// The value ends before a field its flags (or op code) announce.
        case truncated
        /// A field holds a value the specification forbids (an impossible date, for instance).
        case invalidValue
        /// A field has a fixed size and the value carries a different one (an RACP count that is not a uint16).
        case wrongLength
        /// The op code is not one the direction being decoded allows.
        case unknownOpCode
    }

    enum Field: Sendable {
        case name(StaticString)
        case part(StaticString, StaticString)
        case text(String)
    }

    enum Detail: Sendable {
        case text(String)
        case needs(Int, available: Int)
        case outside(Int, StaticString)
        case length(expected: StaticString, got: Int)
        case opCode(UInt8, StaticString)
    }

    public var kind: Kind
    /// Byte offset of the field within the value.
    public var offset: Int
    var fieldStorage: Field
    var detailStorage: Detail

    public init(kind: Kind, field: String, offset: Int, detail: String) {
        self.kind = kind
        self.offset = offset
        fieldStorage = .text(field)
        detailStorage = .text(detail)
    }

    init(_ kind: Kind, _ field: Field, offset: Int, _ detail: Detail) {
        self.kind = kind
        self.offset = offset
        fieldStorage = field
        detailStorage = detail
    }

    /// The field, as the specification names it, e.g. "Base Time month".
    public var field: String {
        get {
            switch fieldStorage {
            case let .name(name): return name.description
            case let .part(name, part): return name.description + " " + part.description
            case let .text(text): return text
            }
        }
        set { fieldStorage = .text(newValue) }
    }

    public var detail: String {
        get {
            switch detailStorage {
            case let .text(text): return text
            case let .needs(needed, available):
                return "needs \(needed) byte\(needed == 1 ? "" : "s"), \(max(available, 0)) left"
            case let .outside(value, allowed): return "\(value) is outside \(allowed)"
            case let .length(expected, got): return "must be \(expected), got \(got) byte\(got == 1 ? "" : "s")"
            case let .opCode(code, why): return "\(code) \(why)"
            }
        }
        set { detailStorage = .text(newValue) }
    }

    static func truncated(_ field: StaticString, offset: Int, needed: Int, available: Int) -> GlucoseDecodingError {
        GlucoseDecodingError(.truncated, .name(field), offset: offset, .needs(needed, available: available))
    }

    public static func == (lhs: GlucoseDecodingError, rhs: GlucoseDecodingError) -> Bool {
        lhs.kind == rhs.kind && lhs.offset == rhs.offset && lhs.field == rhs.field && lhs.detail == rhs.detail
    }

    public var description: String {
        let what: String
        switch kind {
        case .truncated: what = "value too short"
        case .invalidValue: what = "invalid value"
        case .wrongLength: what = "wrong length"
        case .unknownOpCode: what = "unknown op code"
        }
        let detail = self.detail
        var line = "\(field): \(what) at byte \(offset)"
        if !detail.isEmpty { line += " (\(detail))" }
        if line.utf8.contains(where: { $0 == 10 || $0 == 13 }) {
            return String(line.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
        }
        return line
    }
}
