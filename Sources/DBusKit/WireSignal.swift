internal import CDBus
#if canImport(Glibc)
import Glibc
#endif

/// A `PropertiesChanged` signal that changes one property to a byte array and invalidates none: the shape
/// of every GATT notification. A subscription can take it in this form (see `DBusConnection.subscribe`)
/// and skip decoding the body into values.
public struct PropertyBytes {
    /// The interface whose property changed (the signal's first argument).
    public let interface: String
    /// The property's name.
    public let name: String
    /// The new value: valid only during the call it is handed to.
    public let value: UnsafeRawBufferPointer
}

/// What a subscriber did with a `PropertyBytes` signal.
public enum PropertyBytesOutcome: Sendable {
    /// Taken in: it counts as delivered to this subscription.
    case took
    /// Not wanted: as if the subscription's filter had rejected it.
    case skipped
    /// Wanted as any other message: decoded and delivered through the subscription's filter and callback.
    case asMessage
}

/// A received signal read from its wire bytes in one pass, instead of one libdbus call per header field
/// and per value: the path a burst of GATT notifications takes (each one a `PropertiesChanged` whose
/// header fields and body differ from the last one's only in the value).
///
/// libdbus validated every byte before handing the message over (lengths, alignment, padding, UTF-8,
/// object paths, signatures, booleans), so what is read here is well formed; every read is still bounds
/// checked, and whatever this reader does not know (big-endian byte order, a header field or a variant
/// type outside the short list below, a body signature other than `sa{sv}as`) makes it answer nil, and
/// the caller decodes through libdbus as before. Where it answers, the result is what `decodeHeader` and
/// `decodeBody` give (the tests hold the two side by side).
struct WireSignal {
    private let data: UnsafeMutablePointer<CChar>
    private let bytes: UnsafeRawBufferPointer
    /// Where the body starts.
    private let bodyStart: Int
    let header: DBusMessage

    /// The wire form of `message` with its header decoded; nil when libdbus cannot copy it out or the
    /// header holds what this reader leaves to libdbus. The copy is the caller's until ``free()``.
    init?(_ message: OpaquePointer, cache: inout WireSignalCache) {
        guard let (raw, bytes) = Self.wireCopy(of: message) else { return nil }
        guard let (header, bodyStart) = Self.readHeader(bytes, &cache) else {
            dbus_free(raw)
            return nil
        }
        self.data = raw
        self.bytes = bytes
        self.bodyStart = bodyStart
        self.header = header
    }

    /// libdbus's copy of the whole message (fixed part, header fields, body), to be given back with
    /// `dbus_free`; nil when libdbus could not make it.
    private static func wireCopy(of message: OpaquePointer) -> (UnsafeMutablePointer<CChar>, UnsafeRawBufferPointer)? {
        var raw: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(message, &raw, &length) != 0, let raw else { return nil }
        return (raw, UnsafeRawBufferPointer(start: raw, count: Int(max(length, 0))))
    }

    /// Gives the wire copy back to libdbus; the value is not used afterwards.
    func free() { dbus_free(data) }

    /// The body as `Marshalling.decodeBody` gives it; nil when it is not a `PropertiesChanged` whose
    /// variants all hold types this reader knows.
    func propertiesChangedBody(_ cache: inout WireSignalCache) -> [DBusValue]? {
        guard header.signature == "sa{sv}as" else { return nil }
        var r = Reader(bytes: bytes, at: bodyStart)
        guard let interface = r.string(&cache.strings), let changedLength = r.uint32() else { return nil }
        // The entries start at the next multiple of 8, which the array's length does not count.
        r.align(8)
        let changedEnd = r.at + Int(changedLength)
        guard changedEnd <= bytes.count else { return nil }
        var entries: [DBusDictEntry] = []
        while r.at < changedEnd {
            r.align(8)
            guard let key = r.string(&cache.strings), let value = r.variant() else { return nil }
            entries.append(DBusDictEntry(.string(key), .variant(value)))
        }
        guard r.at == changedEnd, let namesLength = r.uint32() else { return nil }
        let namesEnd = r.at + Int(namesLength)
        guard namesEnd <= bytes.count else { return nil }
        var invalidated: [DBusValue] = []
        while r.at < namesEnd {
            guard let name = r.string(&cache.strings) else { return nil }
            invalidated.append(.string(name))
        }
        guard r.at == namesEnd else { return nil }
        return [.string(interface), .dictionary(key: "s", value: "v", entries), .array(element: "s", invalidated)]
    }

    /// The body when it is a `PropertiesChanged` that changes one property to an `ay` value and invalidates
    /// none (a GATT notification), read in place: the bytes are this wire copy's, valid until ``free()``.
    /// nil for any other body, which `propertiesChangedBody` or libdbus then decode.
    func singleBytesProperty(_ cache: inout WireSignalCache) -> PropertyBytes? {
        guard header.signature == "sa{sv}as" else { return nil }
        var r = Reader(bytes: bytes, at: bodyStart)
        guard let interface = r.string(&cache.strings), let changedLength = r.uint32() else { return nil }
        r.align(8)
        let changedEnd = r.at + Int(changedLength)
        guard changedEnd <= bytes.count, let name = r.string(&cache.strings), let value = r.byteArrayVariant(),
              r.at == changedEnd, let namesLength = r.uint32(), namesLength == 0 else { return nil }
        return PropertyBytes(interface: interface, name: name, value: value)
    }

    /// The fixed part and the header fields of a little-endian signal. Fields with the same bytes as the
    /// last signal's (the same path, interface, member, sender and signature) are taken from `cache`.
    private static func readHeader(_ bytes: UnsafeRawBufferPointer, _ cache: inout WireSignalCache) -> (DBusMessage, Int)? {
        // Byte order, message type (4: signal), flags, version; body length; serial; the fields' length.
        guard bytes.count >= 16, bytes[0] == UInt8(ascii: "l"), bytes[1] == 4 else { return nil }
        var r = Reader(bytes: bytes, at: 8)
        guard let serial = r.uint32(), let fieldsLength = r.uint32() else { return nil }
        let fieldsEnd = 16 + Int(fieldsLength)
        guard fieldsEnd <= bytes.count else { return nil }
        let fields = UnsafeRawBufferPointer(rebasing: bytes[16..<fieldsEnd])
        if var message = cache.header(for: fields) {
            message.serial = serial
            r.at = fieldsEnd
            r.align(8)
            return (message, r.at)
        }
        var message = DBusMessage(kind: .signal)
        message.serial = serial
        while r.at < fieldsEnd {
            r.align(8)
            // A field's code, then its value as a variant: a one-letter signature, then the value.
            guard let code = r.byte(), let type = r.basicType() else { return nil }
            switch (code, type) {
            case (1, UInt8(ascii: "o")): message.path = r.string(&cache.strings)
            case (2, UInt8(ascii: "s")): message.interface = r.string(&cache.strings)
            case (3, UInt8(ascii: "s")): message.member = r.string(&cache.strings)
            case (6, UInt8(ascii: "s")): message.destination = r.string(&cache.strings)
            case (7, UInt8(ascii: "s")): message.sender = r.string(&cache.strings)
            case (8, UInt8(ascii: "g")):
                guard let signature = r.signature(&cache.strings) else { return nil }
                message.signature = signature
            default: return nil   // an error name, a reply serial, file descriptors or a field yet to come
            }
            // A value cut short: libdbus would not have passed such a message, so leave it to libdbus.
            if r.failed { return nil }
        }
        guard r.at == fieldsEnd, message.path != nil, message.interface != nil, message.member != nil else { return nil }
        cache.keep(message, for: fields)
        r.align(8)
        return (message, r.at)
    }

    /// Little-endian reads at `at`, each aligned as its type is on the wire (offsets count from the start
    /// of the message). A read past the end sets `failed` and gives nil.
    private struct Reader {
        let bytes: UnsafeRawBufferPointer
        var at: Int
        var failed = false

        init(bytes: UnsafeRawBufferPointer, at: Int) {
            self.bytes = bytes
            self.at = at
        }

        mutating func align(_ boundary: Int) {
            at = (at + boundary - 1) & ~(boundary - 1)
        }

        private mutating func take(_ count: Int, aligned boundary: Int) -> Int? {
            align(boundary)
            guard count >= 0, at <= bytes.count - count else {
                failed = true
                return nil
            }
            defer { at += count }
            return at
        }

        mutating func byte() -> UInt8? { take(1, aligned: 1).map { bytes[$0] } }

        mutating func fixed<T: FixedWidthInteger>(_: T.Type) -> T? {
            take(MemoryLayout<T>.size, aligned: MemoryLayout<T>.size).map {
                T(littleEndian: bytes.loadUnaligned(fromByteOffset: $0, as: T.self))
            }
        }

        mutating func uint32() -> UInt32? { fixed(UInt32.self) }

        /// A variant's signature when it is one type code (`s`, `u`, ...): that code; nil otherwise.
        mutating func basicType() -> UInt8? {
            guard let length = byte(), length == 1, let start = take(2, aligned: 1) else { return nil }
            return bytes[start]
        }

        /// `s` or `o`: a length, the bytes, a NUL; its text from `strings` where kept there.
        mutating func string(_ strings: inout DecodedStrings?) -> String? {
            guard let length = uint32() else { return nil }
            return text(Int(length), &strings)
        }

        /// `g`: a one-byte length, the bytes, a NUL; its text from `strings` where kept there.
        mutating func signature(_ strings: inout DecodedStrings?) -> String? {
            guard let length = byte() else { return nil }
            return text(Int(length), &strings)
        }

        /// `s`, `o` or `g` as a new string, as `Marshalling.decodeOne` reads a variant's.
        mutating func string() -> String? {
            var none: DecodedStrings? = nil
            return string(&none)
        }

        mutating func signature() -> String? {
            var none: DecodedStrings? = nil
            return signature(&none)
        }

        /// `length` bytes of text and the NUL after them.
        private mutating func text(_ length: Int, _ strings: inout DecodedStrings?) -> String? {
            guard let start = take(length + 1, aligned: 1) else { return nil }
            let text = slice(start, length)
            return strings?.string(text) ?? String(decoding: text, as: UTF8.self)
        }

        private func slice(_ start: Int, _ length: Int) -> UnsafeRawBufferPointer {
            UnsafeRawBufferPointer(rebasing: bytes[start..<(start + length)])
        }

        /// `v` holding `ay`: its bytes in place; nil for any other variant (nothing is read then but the
        /// signature).
        mutating func byteArrayVariant() -> UnsafeRawBufferPointer? {
            guard let length = byte(), length == 2, let start = take(3, aligned: 1),
                  bytes[start] == UInt8(ascii: "a"), bytes[start + 1] == UInt8(ascii: "y"),
                  let count = uint32(), let first = take(Int(count), aligned: 1) else { return nil }
            return slice(first, Int(count))
        }

        /// `v` holding `ay` (the value of a GATT characteristic) or a basic type; nil for anything else.
        mutating func variant() -> DBusValue? {
            guard let length = byte(), let start = take(Int(length) + 1, aligned: 1) else { return nil }
            if length == 2, bytes[start] == UInt8(ascii: "a"), bytes[start + 1] == UInt8(ascii: "y") {
                guard let count = uint32(), let first = take(Int(count), aligned: 1) else { return nil }
                return .bytes(Array(slice(first, Int(count))))
            }
            guard length == 1 else { return nil }
            switch bytes[start] {
            case UInt8(ascii: "y"): return byte().map(DBusValue.byte)
            case UInt8(ascii: "b"): return uint32().map { .bool($0 != 0) }
            case UInt8(ascii: "n"): return fixed(Int16.self).map(DBusValue.int16)
            case UInt8(ascii: "q"): return fixed(UInt16.self).map(DBusValue.uint16)
            case UInt8(ascii: "i"): return fixed(Int32.self).map(DBusValue.int32)
            case UInt8(ascii: "u"): return uint32().map(DBusValue.uint32)
            case UInt8(ascii: "x"): return fixed(Int64.self).map(DBusValue.int64)
            case UInt8(ascii: "t"): return fixed(UInt64.self).map(DBusValue.uint64)
            case UInt8(ascii: "d"): return fixed(UInt64.self).map { .double(Double(bitPattern: $0)) }
            case UInt8(ascii: "s"): return string().map(DBusValue.string)
            case UInt8(ascii: "o"): return string().map(DBusValue.objectPath)
            case UInt8(ascii: "g"): return signature().map(DBusValue.signature)
            default: return nil
            }
        }
    }
}

/// What `WireSignal` keeps from one signal for the next: the strings of recent messages, and the last
/// header decoded with the bytes of its fields. Confined to the connection's queue.
struct WireSignalCache {
    var strings: DecodedStrings? = DecodedStrings()
    /// Longer field sections are decoded every time.
    static let longestFields = 512
    private var fields: [UInt8] = []
    private var last: DBusMessage?

    /// The last header when `fields` are the same bytes as its fields (the serial is not among them).
    func header(for fields: UnsafeRawBufferPointer) -> DBusMessage? {
        guard let last, fields.count > 0, fields.count == self.fields.count, let base = fields.baseAddress else { return nil }
        let same = self.fields.withUnsafeBytes { kept in kept.baseAddress.map { memcmp($0, base, fields.count) == 0 } ?? false }
        return same ? last : nil
    }

    mutating func keep(_ header: DBusMessage, for fields: UnsafeRawBufferPointer) {
        guard fields.count <= Self.longestFields else {
            last = nil
            return
        }
        self.fields.removeAll(keepingCapacity: true)
        self.fields.append(contentsOf: fields)
        last = header
    }
}

// MARK: - For tests: the two decodings side by side

extension WireSignal {
    /// A signal built by libdbus, as wire bytes (little-endian, as libdbus writes on this machine).
    static func signalBytes(path: String, interface: String, member: String, sender: String?, destination: String? = nil,
                            serial: UInt32, body: [DBusValue]) throws(DBusError) -> [UInt8] {
        try Marshalling.validate(body)
        guard let message = dbus_message_new_signal(path, interface, member) else { throw DBusError(.noMemory, "out of memory") }
        defer { dbus_message_unref(message) }
        dbus_message_set_serial(message, serial)
        if let sender { _ = dbus_message_set_sender(message, sender) }
        if let destination { _ = dbus_message_set_destination(message, destination) }
        guard Marshalling.append(body, to: message), let (raw, bytes) = wireCopy(of: message) else {
            throw DBusError(.noMemory, "out of memory")
        }
        defer { dbus_free(raw) }
        return Array(bytes)
    }

    /// `bytes` (one whole message) parsed and validated by libdbus; the caller unrefs the message.
    private static func demarshal(_ bytes: [UInt8]) throws(DBusError) -> OpaquePointer {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        let parsed = bytes.withUnsafeBufferPointer { buffer in
            buffer.baseAddress.flatMap { base in
                base.withMemoryRebound(to: CChar.self, capacity: buffer.count) { dbus_message_demarshal($0, Int32(buffer.count), &error) }
            }
        }
        guard let parsed else { throw ConnectionCore.takeError(&error, fallback: .failed) }
        return parsed
    }

    /// `bytes` (one whole message) parsed and validated by libdbus, then read as `PropertyBytes` (the
    /// value copied out); nil where `singleBytesProperty` leaves it to the full decoding.
    static func propertyBytes(of bytes: [UInt8]) throws(DBusError) -> (interface: String, name: String, value: [UInt8])? {
        let parsed = try demarshal(bytes)
        defer { dbus_message_unref(parsed) }
        var cache = WireSignalCache()
        guard let wire = WireSignal(parsed, cache: &cache) else { return nil }
        defer { wire.free() }
        return wire.singleBytesProperty(&cache).map { ($0.interface, $0.name, Array($0.value)) }
    }

    /// `bytes` (one whole message) parsed and validated by libdbus, then decoded both ways: through
    /// `WireSignal` (nil where it leaves the message to libdbus; `bodyFromWire` whether it read the body
    /// too) and field by field through libdbus.
    static func decodeBothWays(_ bytes: [UInt8], cache: inout WireSignalCache) throws(DBusError)
        -> (wire: DBusMessage?, libdbus: DBusMessage, bodyFromWire: Bool) {
        let parsed = try demarshal(bytes)
        defer { dbus_message_unref(parsed) }
        var plain: DecodedStrings? = nil
        var libdbus = Marshalling.decodeHeader(parsed, strings: &plain)
        libdbus.body = Marshalling.decodeBodyGenerically(parsed)
        guard let wire = WireSignal(parsed, cache: &cache) else { return (nil, libdbus, false) }
        defer { wire.free() }
        var decoded = wire.header
        let fromWire = wire.propertiesChangedBody(&cache)
        decoded.body = fromWire ?? Marshalling.decodeBody(parsed, strings: &cache.strings)
        return (decoded, libdbus, fromWire != nil)
    }
}
