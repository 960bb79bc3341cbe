/// A forward cursor over a value's bytes. Every read checks the remaining length; the first read that
/// runs past the end (or the first invalid Date Time) records a `GlucoseDecodingError` naming the field,
/// and every later read returns 0 without moving, so decoders need no index arithmetic and no early exits.
/// The error is thrown once, at the public boundary: malformed input costs no unwinding inside the codec.
struct ByteReader {
    /// The first failure, in a form with no references (static text and numbers), so that a reader is a
    /// plain value: no reference counting on the decoding path.
    struct Failure {
        var kind: GlucoseDecodingError.Kind
        var field: StaticString
        var part: StaticString?
        var offset: Int
        var detail: Detail

        enum Detail {
            case needs(Int, available: Int)
            case outside(Int, StaticString)
            case length(expected: StaticString, got: Int)
        }

        var error: GlucoseDecodingError {
            let f: GlucoseDecodingError.Field = part.map { .part(field, $0) } ?? .name(field)
            switch detail {
            case let .needs(n, available): return GlucoseDecodingError(kind, f, offset: offset, .needs(n, available: available))
            case let .outside(v, allowed): return GlucoseDecodingError(kind, f, offset: offset, .outside(v, allowed))
            case let .length(expected, got): return GlucoseDecodingError(kind, f, offset: offset, .length(expected: expected, got: got))
            }
        }
    }

    private let bytes: UnsafeRawBufferPointer
    private(set) var offset: Int = 0
    private(set) var failure: Failure?

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }
    var failed: Bool { failure != nil }
    var error: GlucoseDecodingError? { failure?.error }

    /// The decoded value, or the first error.
    @inline(__always)
    func result<T>(_ value: T) -> Result<T, GlucoseDecodingError> {
        if let failure { return .failure(failure.error) }
        return .success(value)
    }

    mutating func fail(_ f: Failure) {
        if failure == nil { failure = f }
    }

    @inline(__always)
    mutating func need(_ count: Int, _ field: StaticString) -> Bool {
        if failure != nil { return false }
        if bytes.count - offset < count {
            failure = Failure(kind: .truncated, field: field, offset: offset, detail: .needs(count, available: bytes.count - offset))
            return false
        }
        return true
    }

    @inline(__always)
    mutating func uint8(_ field: StaticString) -> UInt8 {
        guard need(1, field) else { return 0 }
        let value = bytes[offset]
        offset += 1
        return value
    }

    @inline(__always)
    mutating func uint16(_ field: StaticString) -> UInt16 {
        guard need(2, field) else { return 0 }
        let value = UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
        offset += 2
        return value
    }

    @inline(__always)
    mutating func int16(_ field: StaticString) -> Int16 {
        Int16(bitPattern: uint16(field))
    }

    @inline(__always)
    mutating func sfloat(_ field: StaticString) -> SFloat {
        SFloat(bits: uint16(field))
    }

    /// The rest of the value, consumed.
    mutating func rest() -> [UInt8] {
        guard failure == nil, offset < bytes.count else { return [] }
        let tail = Array(bytes[offset...])
        offset = bytes.count
        return tail
    }

    /// A 7-byte Date Time, validated; `field` names the whole date ("Base Time"). On failure the
    /// returned date is a placeholder and `error` is set. With `keepingInvalid`, a date that is not valid
    /// is returned with its fields as sent (`isValid` false) and only a short value fails.
    mutating func dateTime(_ field: StaticString, keepingInvalid: Bool = false) -> GlucoseDateTime {
        guard need(7, field) else { return .placeholder }
        let start = offset
        let year = Int(bytes[start]) | Int(bytes[start + 1]) << 8
        let month = Int(bytes[start + 2])
        let day = Int(bytes[start + 3])
        let hour = Int(bytes[start + 4])
        let minute = Int(bytes[start + 5])
        let second = Int(bytes[start + 6])
        if !keepingInvalid, let invalid = GlucoseDateTime.firstInvalidPart(year: year, month: month, day: day, hour: hour, minute: minute, second: second) {
            fail(Failure(kind: .invalidValue, field: field, part: invalid.name, offset: start + invalid.offset,
                         detail: .outside(invalid.value, invalid.allowed)))
            return .placeholder
        }
        offset += 7
        return GlucoseDateTime(unchecked: year, month, day, hour, minute, second)
    }
}

/// Runs a decoder over any collection of bytes through one contiguous buffer: arrays and slices are read
/// in place, anything else is copied once. Inlinable so that callers get it specialised for their type.
@inlinable @inline(__always)
func withContiguousBytes<C: Collection<UInt8>, T>(
    _ bytes: C, _ body: (UnsafeRawBufferPointer) -> Result<T, GlucoseDecodingError>
) -> Result<T, GlucoseDecodingError> {
    if let result = bytes.withContiguousStorageIfAvailable({ body(UnsafeRawBufferPointer($0)) }) {
        return result
    }
    return Array(bytes).withUnsafeBytes { body($0) }
}

/// Little-endian writer used by the encoders.
struct ByteWriter {
    var bytes: [UInt8] = []
    init(capacity: Int) { bytes.reserveCapacity(capacity) }
    mutating func uint8(_ v: UInt8) { bytes.append(v) }
    mutating func uint16(_ v: UInt16) {
        bytes.append(UInt8(truncatingIfNeeded: v))
        bytes.append(UInt8(truncatingIfNeeded: v >> 8))
    }
    mutating func int16(_ v: Int16) { uint16(UInt16(bitPattern: v)) }
    mutating func sfloat(_ v: SFloat) { uint16(v.bits) }
    mutating func dateTime(_ d: GlucoseDateTime) { bytes.append(contentsOf: d.encoded()) }
}
