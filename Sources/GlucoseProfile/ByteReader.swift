/// A forward cursor over a value's bytes. Every read checks the remaining length and throws
/// `truncated` naming the field, so no decoder does index arithmetic of its own.
struct ByteReader {
    private let bytes: UnsafeRawBufferPointer
    private(set) var offset: Int = 0

    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    var remaining: Int { bytes.count - offset }

    @inline(__always)
    mutating func need(_ count: Int, _ field: StaticString) throws(GlucoseDecodingError) {
        if bytes.count - offset < count {
            throw .truncated(field, offset: offset, needed: count, available: bytes.count - offset)
        }
    }

    @inline(__always)
    mutating func uint8(_ field: StaticString) throws(GlucoseDecodingError) -> UInt8 {
        try need(1, field)
        let value = bytes[offset]
        offset += 1
        return value
    }

    @inline(__always)
    mutating func uint16(_ field: StaticString) throws(GlucoseDecodingError) -> UInt16 {
        try need(2, field)
        let value = UInt16(bytes[offset]) | UInt16(bytes[offset + 1]) << 8
        offset += 2
        return value
    }

    @inline(__always)
    mutating func int16(_ field: StaticString) throws(GlucoseDecodingError) -> Int16 {
        Int16(bitPattern: try uint16(field))
    }

    @inline(__always)
    mutating func sfloat(_ field: StaticString) throws(GlucoseDecodingError) -> SFloat {
        SFloat(bits: try uint16(field))
    }

    /// The rest of the value, consumed.
    mutating func rest() -> [UInt8] {
        let tail = Array(bytes[offset...])
        offset = bytes.count
        return tail
    }

    /// A 7-byte Date Time, validated; `field` names the whole date ("Base Time").
    mutating func dateTime(_ field: StaticString) throws(GlucoseDecodingError) -> GlucoseDateTime {
        try need(7, field)
        let start = offset
        let year = Int(bytes[start]) | Int(bytes[start + 1]) << 8
        let month = Int(bytes[start + 2])
        let day = Int(bytes[start + 3])
        let hour = Int(bytes[start + 4])
        let minute = Int(bytes[start + 5])
        let second = Int(bytes[start + 6])
        if let invalid = GlucoseDateTime.firstInvalidPart(year: year, month: month, day: day, hour: hour, minute: minute, second: second) {
            throw GlucoseDecodingError(
                kind: .invalidValue, field: "\(field) \(invalid.name)", offset: start + invalid.offset,
                detail: "\(invalid.value) is outside \(invalid.allowed)"
            )
        }
        offset += 7
        return GlucoseDateTime(unchecked: year, month, day, hour, minute, second)
    }
}

/// Decodes from any collection of bytes through one contiguous buffer: arrays and slices are read in
/// place, anything else is copied once.
@inline(__always)
func withContiguousBytes<C: Collection<UInt8>, T>(
    _ bytes: C, _ body: (UnsafeRawBufferPointer) throws(GlucoseDecodingError) -> T
) throws(GlucoseDecodingError) -> T {
    let result: Result<T, GlucoseDecodingError>? = bytes.withContiguousStorageIfAvailable { buffer in
        do throws(GlucoseDecodingError) {
            return .success(try body(UnsafeRawBufferPointer(buffer)))
        } catch {
            return .failure(error)
        }
    }
    if let result { return try result.get() }
    let copy = Array(bytes)
    let copied: Result<T, GlucoseDecodingError> = copy.withUnsafeBytes { raw in
        do throws(GlucoseDecodingError) {
            return .success(try body(raw))
        } catch {
            return .failure(error)
        }
    }
    return try copied.get()
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
