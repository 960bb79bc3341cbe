/// Why a Glucose Service value could not be decoded: a typed error naming the field, the byte offset where
/// the field starts, and a short detail. Its `description` is one line and never contains a glucose value.
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

    public var kind: Kind
    /// The field, as the specification names it, e.g. "Base Time month".
    public var field: String
    /// Byte offset of the field within the value.
    public var offset: Int
    public var detail: String

    public init(kind: Kind, field: String, offset: Int, detail: String) {
        self.kind = kind
        self.field = field
        self.offset = offset
        self.detail = detail
    }

    static func truncated(_ field: StaticString, offset: Int, needed: Int, available: Int) -> GlucoseDecodingError {
        GlucoseDecodingError(
            kind: .truncated, field: field.description, offset: offset,
            detail: "needs \(needed) byte\(needed == 1 ? "" : "s"), \(max(available, 0)) left"
        )
    }

    public var description: String {
        let what: String
        switch kind {
        case .truncated: what = "value too short"
        case .invalidValue: what = "invalid value"
        case .wrongLength: what = "wrong length"
        case .unknownOpCode: what = "unknown op code"
        }
        var line = "\(field): \(what) at byte \(offset)"
        if !detail.isEmpty { line += " (\(detail))" }
        return String(line.map { $0 == "\n" || $0 == "\r" ? " " : $0 })
    }
}
