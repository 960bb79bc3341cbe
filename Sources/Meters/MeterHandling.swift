import GatewayCore
import GlucoseProfile

extension ExclusionReason {
    /// A record a meter adds by itself, not a measurement: the HI dated 2037 that a ForaCare TN'G adds when
    /// its memory is full. Its own reason, not `time-in-future`, so that no clock-skew correction can ever
    /// release it for upload.
    public static let memoryFullMarker = ExclusionReason(rawValue: "memory-full-marker")
}

/// Device Information strings as stored and shown: NUL bytes and other control characters removed
/// (Ascensia Contour meters pad theirs with NULs, which ended up in Nightscout's `device`), surrounding
/// white space trimmed, at most 64 characters (`IdentityString`); bytes that are not UTF-8 become U+FFFD.
public enum IdentityText {
    /// The text to store, nil when nothing printable is left; `changed` when it differs from the bytes.
    public static func clean(_ bytes: [UInt8]) -> (text: String?, changed: Bool) {
        let decoded = String(decoding: bytes, as: UTF8.self)
        let text = IdentityString.bounded(decoded.trimmingWhitespace()).trimmingWhitespace()
        let changed = Array(text.utf8) != bytes
        return (text.isEmpty ? nil : text, changed)
    }

    /// The bytes as sent, kept beside a string cleaning changed: at most the 512 an attribute value holds.
    public static func raw(_ bytes: [UInt8]) -> [UInt8] { Array(bytes.prefix(IdentityString.maxRawBytes)) }
}

extension String {
    fileprivate func trimmingWhitespace() -> String {
        let scalars = unicodeScalars
        guard let first = scalars.firstIndex(where: { !$0.properties.isWhitespace }),
              let last = scalars.lastIndex(where: { !$0.properties.isWhitespace }) else { return "" }
        return String(scalars[first...last])
    }
}

/// What the gateway does differently for one meter, chosen only from what the meter shows and the
/// gateway stores (Device Information strings, the advertised name), so `meters` and `status` can show
/// it without a connection and a user can see why. A meter no rule names gets the Glucose Profile as
/// written.
public struct MeterHandling: Sendable, Equatable, CustomStringConvertible {
    public struct Kind: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public var description: String { rawValue }

        /// The meter numbers its records newest first (0 = newest, every number moving up by one with each
        /// new record): TaiDoc firmware 1.2.4, by manufacturer "TaiDoc..." and firmware "1.2.4". See
        /// `MeterDownload.Run.reversedSequenceProcedure` (RACP/MeterDownload+NewestFirst.swift).
        public static let reversedSequence = Kind(rawValue: "reversed-sequence")
        /// The Device Information strings carried NUL or control characters, removed before storing them.
        public static let identityStringsCleaned = Kind(rawValue: "identity-strings-cleaned")
        /// A ForaCare TN'G (advertised name "TNG" as its first word, no manufacturer string, or "ForaCare"): its HI records
        /// dated 2037 or later are excluded as `memory-full-marker`.
        public static let memoryFullMarker = Kind(rawValue: "memory-full-marker")
    }

    public private(set) var kinds: [Kind]

    public init(kinds: [Kind]) { self.kinds = kinds }

    /// The handling for a meter as stored.
    public init(for meter: MeterInfo) {
        var kinds: [Kind] = []
        if Self.numbersNewestFirst(manufacturer: meter.manufacturer, firmware: meter.firmware) {
            kinds.append(.reversedSequence)
        }
        if !meter.rawIdentity.isEmpty { kinds.append(.identityStringsCleaned) }
        if Self.isForaTNG(name: meter.name, manufacturer: meter.manufacturer) { kinds.append(.memoryFullMarker) }
        self.kinds = kinds
    }

    public func contains(_ kind: Kind) -> Bool { kinds.contains(kind) }

    public var isEmpty: Bool { kinds.isEmpty }

    /// `reversed-sequence, identity-strings-cleaned`, or `none`.
    public var description: String { kinds.isEmpty ? "none" : kinds.map(\.rawValue).joined(separator: ", ") }

    /// TaiDoc firmware 1.2.4 (Diamond Mobile Mini DM30b): "reversed sequence numbers" (xDrip
    /// `BluetoothGlucoseMeter.java`). Other TaiDoc firmware is not known to do it and keeps the profile.
    static func numbersNewestFirst(manufacturer: String?, firmware: String?) -> Bool {
        guard let manufacturer, manufacturer.lowercased().hasPrefix("taidoc") else { return false }
        guard let firmware else { return false }
        var f = Substring(firmware.lowercased())
        if f.hasPrefix("v") { f = f.dropFirst() }
        return f == "1.2.4"
    }

    /// ForaCare TN'G Voice: advertises as "TNG VOICE ..." and sends no manufacturer string (Tidepool
    /// uploader `bluetoothLEDriver.js`). "TNG" must be a word of its own: "TNGX 100" is another meter.
    static func isForaTNG(name: String?, manufacturer: String?) -> Bool {
        guard let name else { return false }
        let upper = name.uppercased()
        guard upper.hasPrefix("TNG") else { return false }
        if let next = upper.unicodeScalars.dropFirst(3).first, next.properties.isAlphabetic || next.properties.numericType != nil {
            return false
        }
        guard let manufacturer else { return true }
        return manufacturer.lowercased().hasPrefix("fora")
    }

    /// The year from which a Fora HI record is the memory-full marker (it is dated 2037).
    static let markerYear = 2037

    /// A reading as this meter's handling stores it: a Fora memory-full marker gets its own exclusion.
    public func applied(to reading: NewReading) -> NewReading {
        guard contains(.memoryFullMarker), reading.baseTime.year >= Self.markerYear else { return reading }
        let status = SensorStatus(rawValue: UInt16(truncatingIfNeeded: reading.sensorStatus ?? 0))
        let isHigh = reading.special == SFloat.positiveInfinity.special || status.contains(.resultTooHigh)
        guard isHigh else { return reading }
        var r = reading
        r.exclusion = .memoryFullMarker
        return r
    }
}
