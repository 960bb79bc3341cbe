internal import CDBus

// The only place that walks libdbus message iterators. Encoding validates the whole value first, because
// libdbus treats a malformed append (bad object path, element of the wrong type) as a programming error
// and aborts the process; a value built from meter or peer data must fail with an error instead.

enum Marshalling {
    /// libdbus allows 32 levels of array nesting and 32 of structs; staying under 32 in total is enough for
    /// every message this product sends.
    static let maximumDepth = 32

    // MARK: - Validation

    static func validate(_ values: [DBusValue]) throws(DBusError) {
        for value in values { try validate(value, depth: 0) }
        let signature = values.map(\.signature).joined()
        if signature.utf8.count > 255 {
            throw DBusError(.invalidSignature, "body signature longer than 255 bytes")
        }
    }

    static func validate(_ value: DBusValue, depth: Int) throws(DBusError) {
        guard depth < maximumDepth else { throw DBusError(.invalidArgs, "value nested deeper than \(maximumDepth)") }
        switch value {
        case .byte, .bool, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .unixFD, .bytes:
            return
        case .string(let s):
            if s.utf8.contains(0) { throw DBusError(.invalidArgs, "string contains a NUL byte") }
        case .objectPath(let p):
            guard isValidObjectPath(p) else { throw DBusError(.invalidArgs, "invalid object path \"\(p)\"") }
        case .signature(let s):
            guard isValidSignature(s) else { throw DBusError(.invalidSignature, "invalid signature \"\(s)\"") }
        case .array(let element, let items):
            guard isValidSingleSignature(element), !element.hasPrefix("{") else {
                throw DBusError(.invalidSignature, "invalid array element signature \"\(element)\"")
            }
            for item in items {
                guard item.signature == element else {
                    throw DBusError(.invalidArgs, "array of \(element) holds a \(item.signature)")
                }
                try validate(item, depth: depth + 1)
            }
        case .dictionary(let key, let valueSignature, let entries):
            guard isBasicSignature(key), isValidSingleSignature(valueSignature) else {
                throw DBusError(.invalidSignature, "invalid dictionary signature {\(key)\(valueSignature)}")
            }
            for entry in entries {
                guard entry.key.signature == key, entry.value.signature == valueSignature else {
                    throw DBusError(.invalidArgs, "dictionary {\(key)\(valueSignature)} holds a "
                        + "{\(entry.key.signature)\(entry.value.signature)}")
                }
                try validate(entry.key, depth: depth + 1)
                try validate(entry.value, depth: depth + 1)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw DBusError(.invalidArgs, "empty structure") }
            for field in fields { try validate(field, depth: depth + 1) }
        case .variant(let inner):
            try validate(inner, depth: depth + 1)
        }
    }

    static func isBasicSignature(_ s: String) -> Bool {
        s.utf8.count == 1 && s.utf8.first.map { "ybnqiuxtdsogh".utf8.contains($0) } == true
    }

    static func isValidSingleSignature(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        return dbus_signature_validate_single(s, nil) != 0
    }

    static func isValidSignature(_ s: String) -> Bool {
        guard !s.utf8.contains(0) else { return false }
        return dbus_signature_validate(s, nil) != 0
    }

    /// `/`, or `/`-separated non-empty elements of `[A-Za-z0-9_]`, no trailing `/`.
    static func isValidObjectPath(_ p: String) -> Bool {
        let bytes = Array(p.utf8)
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        guard bytes.last != UInt8(ascii: "/") else { return false }
        var previousSlash = false
        for b in bytes {
            if b == UInt8(ascii: "/") {
                if previousSlash { return false }
                previousSlash = true
                continue
            }
            previousSlash = false
            let ok = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F
            if !ok { return false }
        }
        return true
    }

    static func isValidInterface(_ s: String) -> Bool { !s.utf8.contains(0) && dbus_validate_interface(s, nil) != 0 }
    static func isValidMember(_ s: String) -> Bool { !s.utf8.contains(0) && dbus_validate_member(s, nil) != 0 }
    static func isValidBusName(_ s: String) -> Bool { !s.utf8.contains(0) && dbus_validate_bus_name(s, nil) != 0 }
    static func isValidErrorName(_ s: String) -> Bool { !s.utf8.contains(0) && dbus_validate_error_name(s, nil) != 0 }

    // MARK: - Encoding

    /// Appends validated values to a message. Returns false only when libdbus runs out of memory.
    static func append(_ values: [DBusValue], to message: OpaquePointer) -> Bool {
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for value in values {
            guard append(value, to: &iter) else { return false }
        }
        return true
    }

    private static func appendBasic<T: BitwiseCopyable>(_ value: T, type: Int32, to iter: inout DBusMessageIter) -> Bool {
        var copy = value
        return dbus_message_iter_append_basic(&iter, type, &copy) != 0
    }

    private static func appendString(_ s: String, type: Int32, to iter: inout DBusMessageIter) -> Bool {
        s.withCString { cString in
            var pointer: UnsafePointer<CChar>? = cString
            return dbus_message_iter_append_basic(&iter, type, &pointer) != 0
        }
    }

    private static func withContainer(
        _ type: Int32, _ signature: String?, _ iter: inout DBusMessageIter,
        _ body: (inout DBusMessageIter) -> Bool
    ) -> Bool {
        var sub = DBusMessageIter()
        let opened: Bool
        if let signature {
            opened = signature.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) != 0 }
        } else {
            opened = dbus_message_iter_open_container(&iter, type, nil, &sub) != 0
        }
        guard opened else { return false }
        guard body(&sub) else {
            dbus_message_iter_abandon_container(&iter, &sub)
            return false
        }
        return dbus_message_iter_close_container(&iter, &sub) != 0
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) -> Bool {
        switch value {
        case .byte(let v): return appendBasic(v, type: CDBUS_TYPE_BYTE, to: &iter)
        case .bool(let v): return appendBasic(dbus_bool_t(v ? 1 : 0), type: CDBUS_TYPE_BOOLEAN, to: &iter)
        case .int16(let v): return appendBasic(v, type: CDBUS_TYPE_INT16, to: &iter)
        case .uint16(let v): return appendBasic(v, type: CDBUS_TYPE_UINT16, to: &iter)
        case .int32(let v): return appendBasic(v, type: CDBUS_TYPE_INT32, to: &iter)
        case .uint32(let v): return appendBasic(v, type: CDBUS_TYPE_UINT32, to: &iter)
        case .int64(let v): return appendBasic(v, type: CDBUS_TYPE_INT64, to: &iter)
        case .uint64(let v): return appendBasic(v, type: CDBUS_TYPE_UINT64, to: &iter)
        case .double(let v): return appendBasic(v, type: CDBUS_TYPE_DOUBLE, to: &iter)
        case .unixFD(let v): return appendBasic(v, type: CDBUS_TYPE_UNIX_FD, to: &iter)
        case .string(let s): return appendString(s, type: CDBUS_TYPE_STRING, to: &iter)
        case .objectPath(let s): return appendString(s, type: CDBUS_TYPE_OBJECT_PATH, to: &iter)
        case .signature(let s): return appendString(s, type: CDBUS_TYPE_SIGNATURE, to: &iter)
        case .bytes(let bytes):
            return withContainer(CDBUS_TYPE_ARRAY, "y", &iter) { sub in
                bytes.withUnsafeBufferPointer { buffer in
                    // libdbus reads `count` bytes from the pointer stored at the given address; an empty
                    // array still needs a non-null pointer.
                    var storage: UInt8 = 0
                    return withUnsafeMutablePointer(to: &storage) { fallback in
                        var pointer: UnsafePointer<UInt8>? = buffer.baseAddress ?? UnsafePointer(fallback)
                        return dbus_message_iter_append_fixed_array(&sub, CDBUS_TYPE_BYTE, &pointer, Int32(buffer.count)) != 0
                    }
                }
            }
        case .array(let element, let items):
            return withContainer(CDBUS_TYPE_ARRAY, element, &iter) { sub in
                for item in items { guard append(item, to: &sub) else { return false } }
                return true
            }
        case .dictionary(let key, let valueSignature, let entries):
            return withContainer(CDBUS_TYPE_ARRAY, "{" + key + valueSignature + "}", &iter) { sub in
                for entry in entries {
                    let ok = withContainer(CDBUS_TYPE_DICT_ENTRY, nil, &sub) { e in
                        append(entry.key, to: &e) && append(entry.value, to: &e)
                    }
                    guard ok else { return false }
                }
                return true
            }
        case .structure(let fields):
            return withContainer(CDBUS_TYPE_STRUCT, nil, &iter) { sub in
                for field in fields { guard append(field, to: &sub) else { return false } }
                return true
            }
        case .variant(let inner):
            return withContainer(CDBUS_TYPE_VARIANT, inner.signature, &iter) { sub in append(inner, to: &sub) }
        }
    }

    // MARK: - Decoding

    /// Decodes a libdbus message into Swift values. libdbus has validated the wire data, so the walk is total.
    static func decode(_ message: OpaquePointer) -> DBusMessage {
        var decoded = decodeHeader(message)
        decoded.body = decodeBody(message)
        return decoded
    }

    /// The header fields only (empty body, signature kept).
    static func decodeHeader(_ message: OpaquePointer) -> DBusMessage {
        let kind: DBusMessage.Kind
        switch dbus_message_get_type(message) {
        case DBUS_MESSAGE_TYPE_METHOD_CALL: kind = .methodCall
        case DBUS_MESSAGE_TYPE_METHOD_RETURN: kind = .methodReturn
        case DBUS_MESSAGE_TYPE_ERROR: kind = .error
        default: kind = .signal
        }
        var decoded = DBusMessage(kind: kind)
        decoded.serial = dbus_message_get_serial(message)
        decoded.replySerial = dbus_message_get_reply_serial(message)
        decoded.path = dbus_message_get_path(message).map { String(cString: $0) }
        decoded.interface = dbus_message_get_interface(message).map { String(cString: $0) }
        decoded.member = dbus_message_get_member(message).map { String(cString: $0) }
        decoded.errorName = dbus_message_get_error_name(message).map { String(cString: $0) }
        decoded.sender = dbus_message_get_sender(message).map { String(cString: $0) }
        decoded.destination = dbus_message_get_destination(message).map { String(cString: $0) }
        decoded.signature = dbus_message_get_signature(message).map { String(cString: $0) } ?? ""
        return decoded
    }

    /// The body, whatever its signature.
    static func decodeBody(_ message: OpaquePointer) -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }
        return decodeSequence(&iter)
    }

    private static func decodeSequence(_ iter: inout DBusMessageIter) -> [DBusValue] {
        var out: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != CDBUS_TYPE_INVALID {
            if let value = decodeOne(&iter) { out.append(value) }
            dbus_message_iter_next(&iter)
        }
        return out
    }

    private static func basic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ initial: T) -> T {
        var value = initial
        dbus_message_iter_get_basic(&iter, &value)
        return value
    }

    private static func basicString(_ iter: inout DBusMessageIter) -> String {
        var pointer: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &pointer)
        return pointer.map { String(cString: $0) } ?? ""
    }

    private static func signature(of iter: inout DBusMessageIter) -> String {
        guard let raw = dbus_message_iter_get_signature(&iter) else { return "" }
        defer { dbus_free(raw) }
        return String(cString: raw)
    }

    private static func decodeOne(_ iter: inout DBusMessageIter) -> DBusValue? {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case CDBUS_TYPE_BYTE: return .byte(basic(&iter, UInt8(0)))
        case CDBUS_TYPE_BOOLEAN: return .bool(basic(&iter, dbus_bool_t(0)) != 0)
        case CDBUS_TYPE_INT16: return .int16(basic(&iter, Int16(0)))
        case CDBUS_TYPE_UINT16: return .uint16(basic(&iter, UInt16(0)))
        case CDBUS_TYPE_INT32: return .int32(basic(&iter, Int32(0)))
        case CDBUS_TYPE_UINT32: return .uint32(basic(&iter, UInt32(0)))
        case CDBUS_TYPE_INT64: return .int64(basic(&iter, Int64(0)))
        case CDBUS_TYPE_UINT64: return .uint64(basic(&iter, UInt64(0)))
        case CDBUS_TYPE_DOUBLE: return .double(basic(&iter, Double(0)))
        case CDBUS_TYPE_UNIX_FD: return .unixFD(basic(&iter, Int32(-1)))
        case CDBUS_TYPE_STRING: return .string(basicString(&iter))
        case CDBUS_TYPE_OBJECT_PATH: return .objectPath(basicString(&iter))
        case CDBUS_TYPE_SIGNATURE: return .signature(basicString(&iter))
        case CDBUS_TYPE_VARIANT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            guard let inner = decodeOne(&sub) else { return nil }
            return .variant(inner)
        case CDBUS_TYPE_STRUCT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(decodeSequence(&sub))
        case CDBUS_TYPE_ARRAY:
            let elementType = dbus_message_iter_get_element_type(&iter)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if elementType == CDBUS_TYPE_BYTE {
                // `ay` needs no signature: the bytes are read in place.
                var pointer: UnsafeRawPointer? = nil
                var count: Int32 = 0
                dbus_message_iter_get_fixed_array(&sub, &pointer, &count)
                guard let pointer, count > 0 else { return .bytes([]) }
                let buffer = UnsafeRawBufferPointer(start: pointer, count: Int(count))
                return .bytes(Array(buffer))
            }
            let arraySignature = signature(of: &iter)
            let element = String(arraySignature.dropFirst())
            if elementType == CDBUS_TYPE_DICT_ENTRY {
                // element is "{kv}": split into key (one basic type) and value.
                let inner = element.dropFirst().dropLast()
                let key = String(inner.prefix(1))
                let value = String(inner.dropFirst())
                var entries: [DBusDictEntry] = []
                while dbus_message_iter_get_arg_type(&sub) == CDBUS_TYPE_DICT_ENTRY {
                    var entry = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &entry)
                    let pair = decodeSequence(&entry)
                    if pair.count == 2 { entries.append(DBusDictEntry(pair[0], pair[1])) }
                    dbus_message_iter_next(&sub)
                }
                return .dictionary(key: key, value: value, entries)
            }
            return .array(element: element, decodeSequence(&sub))
        default:
            return nil
        }
    }
}

extension Marshalling {
    /// Encodes `values` into a method-call message, serializes it to wire bytes, parses the bytes back and
    /// decodes the body. Used by tests to check both directions against libdbus itself.
    static func wireRoundTrip(_ values: [DBusValue]) throws(DBusError) -> [DBusValue] {
        try validate(values)
        guard let message = dbus_message_new_method_call("org.example.Peer", "/org/example", "org.example.Iface", "Echo")
        else { throw DBusError(.noMemory, "out of memory") }
        defer { dbus_message_unref(message) }
        dbus_message_set_serial(message, 1)
        guard append(values, to: message) else { throw DBusError(.noMemory, "out of memory") }
        var buffer: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(message, &buffer, &length) != 0, let buffer else {
            throw DBusError(.noMemory, "out of memory")
        }
        defer { dbus_free(buffer) }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let parsed = dbus_message_demarshal(buffer, length, &error) else {
            throw ConnectionCore.takeError(&error, fallback: .failed)
        }
        defer { dbus_message_unref(parsed) }
        return decodeBody(parsed)
    }
}
