/// One D-Bus value with its wire type.
///
/// Arrays carry their element signature so that an empty array still has a type; `ay` has its own case
/// (``bytes(_:)``) because BlueZ moves every GATT value as bytes. Values decoded from the wire keep their
/// variants: a `v` argument arrives as ``variant(_:)``.
public indirect enum DBusValue: Sendable, Hashable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// A Unix file descriptor. A decoded one is a fresh descriptor the receiver owns and must close.
    case unixFD(Int32)
    /// `ay`.
    case bytes([UInt8])
    /// `a<element>` for any element type except dictionary entries (use ``dictionary(key:value:_:)``).
    case array(element: String, [DBusValue])
    /// `a{<key><value>}`, entries in wire order.
    case dictionary(key: String, value: String, [DBusDictEntry])
    /// `(...)`.
    case structure([DBusValue])
    /// `v`.
    case variant(DBusValue)

    /// The single complete type signature of this value.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .dictionary(let key, let value, _): "a{" + key + value + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        case .variant: "v"
        }
    }
}

/// One entry of a D-Bus dictionary.
public struct DBusDictEntry: Sendable, Hashable {
    public var key: DBusValue
    public var value: DBusValue
    public init(_ key: DBusValue, _ value: DBusValue) {
        self.key = key
        self.value = value
    }
}

// MARK: - Building values

extension DBusValue {
    /// `a{sv}` from a Swift dictionary; each value is wrapped in a variant. Keys are sorted so the wire
    /// form is deterministic.
    public static func vardict(_ entries: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: "s", value: "v",
            entries.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .variant($0.value)) }
        )
    }

    /// `as`.
    public static func strings(_ values: [String]) -> DBusValue {
        .array(element: "s", values.map { .string($0) })
    }

    /// `ao`.
    public static func objectPaths(_ values: [String]) -> DBusValue {
        .array(element: "o", values.map { .objectPath($0) })
    }

    /// `a{sa{sv}}`: interfaces and their properties, as in `InterfacesAdded`.
    public static func interfaces(_ interfaces: [String: [String: DBusValue]]) -> DBusValue {
        .dictionary(
            key: "s", value: "a{sv}",
            interfaces.sorted { $0.key < $1.key }.map { DBusDictEntry(.string($0.key), .vardict($0.value)) }
        )
    }

    /// `a{oa{sa{sv}}}`: the reply of `GetManagedObjects`.
    public static func managedObjects(_ objects: [String: [String: [String: DBusValue]]]) -> DBusValue {
        .dictionary(
            key: "o", value: "a{sa{sv}}",
            objects.sorted { $0.key < $1.key }.map { DBusDictEntry(.objectPath($0.key), .interfaces($0.value)) }
        )
    }
}

// MARK: - Reading values

extension DBusValue {
    /// The value inside any number of variant wrappers.
    public var unwrapped: DBusValue {
        var value = self
        while case .variant(let inner) = value { value = inner }
        return value
    }

    public var string: String? {
        switch unwrapped {
        case .string(let s), .objectPath(let s), .signature(let s): s
        default: nil
        }
    }

    public var objectPath: String? {
        if case .objectPath(let s) = unwrapped { return s }
        return nil
    }

    public var bool: Bool? {
        if case .bool(let b) = unwrapped { return b }
        return nil
    }

    public var uint8: UInt8? {
        if case .byte(let v) = unwrapped { return v }
        return nil
    }

    /// Any signed or unsigned integer type that fits an `Int64`.
    public var int64: Int64? {
        switch unwrapped {
        case .byte(let v): Int64(v)
        case .int16(let v): Int64(v)
        case .uint16(let v): Int64(v)
        case .int32(let v): Int64(v)
        case .uint32(let v): Int64(v)
        case .int64(let v): v
        case .uint64(let v): v <= UInt64(Int64.max) ? Int64(v) : nil
        default: nil
        }
    }

    public var uint32: UInt32? {
        if case .uint32(let v) = unwrapped { return v }
        return nil
    }

    public var int16: Int16? {
        if case .int16(let v) = unwrapped { return v }
        return nil
    }

    public var uint16: UInt16? {
        if case .uint16(let v) = unwrapped { return v }
        return nil
    }

    public var double: Double? {
        if case .double(let v) = unwrapped { return v }
        return nil
    }

    /// `ay` (also an `av`/`ay` spelled as an array of bytes).
    public var bytes: [UInt8]? {
        switch unwrapped {
        case .bytes(let b): return b
        case .array(let element, let items) where element == "y":
            var out: [UInt8] = []
            out.reserveCapacity(items.count)
            for item in items {
                guard case .byte(let b) = item else { return nil }
                out.append(b)
            }
            return out
        default: return nil
        }
    }

    /// The elements of any array (not of a dictionary).
    public var arrayElements: [DBusValue]? {
        switch unwrapped {
        case .array(_, let items): items
        case .bytes(let b): b.map { .byte($0) }
        default: nil
        }
    }

    /// `as` (or `ao`) as Swift strings.
    public var stringArray: [String]? {
        guard let items = arrayElements else { return nil }
        var out: [String] = []
        out.reserveCapacity(items.count)
        for item in items {
            guard let s = item.string else { return nil }
            out.append(s)
        }
        return out
    }

    /// Entries of any dictionary, in wire order.
    public var dictionaryEntries: [DBusDictEntry]? {
        if case .dictionary(_, _, let entries) = unwrapped { return entries }
        return nil
    }

    /// The value of `key` in an `a{sv}` (its variant wrapper removed), found without building a Swift
    /// dictionary; the last entry wins, as in ``vardict``. Nil when absent or not a string-keyed dictionary.
    public func property(_ key: String) -> DBusValue? {
        guard let entries = dictionaryEntries else { return nil }
        for entry in entries.reversed() {
            guard case .string(let name) = entry.key else { return nil }
            if name == key { return entry.value.unwrapped }
        }
        return nil
    }

    /// `a{sv}` as a Swift dictionary, each value with its variant wrapper removed. Later duplicate keys win.
    public var vardict: [String: DBusValue]? {
        guard let entries = dictionaryEntries else { return nil }
        var out: [String: DBusValue] = [:]
        for entry in entries {
            guard let key = entry.key.string else { return nil }
            out[key] = entry.value.unwrapped
        }
        return out
    }

    /// `a{sa{sv}}` (interface name → properties).
    public var interfaces: [String: [String: DBusValue]]? {
        guard let entries = dictionaryEntries else { return nil }
        var out: [String: [String: DBusValue]] = [:]
        for entry in entries {
            guard let name = entry.key.string, let props = entry.value.vardict else { return nil }
            out[name] = props
        }
        return out
    }

    /// `a{oa{sa{sv}}}` (object path → interface name → properties).
    public var managedObjects: [String: [String: [String: DBusValue]]]? {
        guard let entries = dictionaryEntries else { return nil }
        var out: [String: [String: [String: DBusValue]]] = [:]
        for entry in entries {
            guard let path = entry.key.string, let ifaces = entry.value.interfaces else { return nil }
            out[path] = ifaces
        }
        return out
    }

    /// The fields of a structure.
    public var structureFields: [DBusValue]? {
        if case .structure(let f) = unwrapped { return f }
        return nil
    }
}

extension DBusValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .byte(let v): "\(v)"
        case .bool(let v): "\(v)"
        case .int16(let v): "\(v)"
        case .uint16(let v): "\(v)"
        case .int32(let v): "\(v)"
        case .uint32(let v): "\(v)"
        case .int64(let v): "\(v)"
        case .uint64(let v): "\(v)"
        case .double(let v): "\(v)"
        case .string(let v): "\"\(v)\""
        case .objectPath(let v): v
        case .signature(let v): "g\"\(v)\""
        case .unixFD(let v): "fd \(v)"
        case .bytes(let b): "[" + b.map { String($0, radix: 16) }.joined(separator: " ") + "]"
        case .array(_, let items): "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(_, _, let entries):
            "{" + entries.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .structure(let f): "(" + f.map(\.description).joined(separator: ", ") + ")"
        case .variant(let v): "<\(v)>"
        }
    }
}
