/// A Glucose Measurement (0x2A18) or Measurement Context (0x2A34) value the codec could not decode
/// (cut short, flags announcing fields that are not there, a reserved or impossible value): not a reading,
/// so never counted as one and never uploaded, but kept as sent, because a value the gateway cannot read
/// today may be read by a later version or by a person. Carries no decoded health value.
public struct UndecodableValue: Sendable, Equatable {
    /// Which characteristic the value came on.
    public struct Characteristic: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let glucoseMeasurement = Characteristic(rawValue: "0x2A18")
        public static let glucoseMeasurementContext = Characteristic(rawValue: "0x2A34")
        public var description: String { rawValue }
    }

    public var meterAddress: String
    public var characteristic: Characteristic
    /// The sequence number as sent, when the two bytes after the flags are there (nil otherwise); it may
    /// be as damaged as the rest, so it is shown, never used to match or resume.
    public var sequence: Int?
    /// The value's bytes exactly as received.
    public var raw: [UInt8]
    /// Why it could not be decoded: the codec's one-line error (field, byte offset, detail).
    public var reason: String
    public var receivedAt: UnixMillis

    public init(meterAddress: String, characteristic: Characteristic, raw: [UInt8], reason: String, receivedAt: UnixMillis) {
        self.meterAddress = meterAddress
        self.characteristic = characteristic
        self.raw = raw
        self.reason = reason
        self.receivedAt = receivedAt
        // Both characteristics start with a flags byte followed by the uint16 sequence number.
        sequence = raw.count >= 3 ? Int(raw[1]) | Int(raw[2]) << 8 : nil
    }
}

/// An undecodable value as stored, with its row id (its own numbering, not a reading's).
public struct StoredUndecodableValue: Sendable, Equatable {
    public var id: Int64
    public var value: UndecodableValue
    public init(id: Int64, value: UndecodableValue) {
        self.id = id
        self.value = value
    }
}
