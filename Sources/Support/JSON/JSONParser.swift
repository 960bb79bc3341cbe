/// Where and why a JSON text was refused.
public struct JSONParseError: Error, Sendable, CustomStringConvertible, Equatable {
    /// Byte offset of the failure; `line` and `column` (both from 1) locate the same place.
    public var offset: Int
    public var line: Int
    public var column: Int
    public var message: String
    public var description: String { "JSON line \(line) column \(column): \(message)" }
}

/// A strict RFC 8259 parser for server answers, meter files and control calls. It never traps on any
/// input and refuses: nesting deeper than `maxDepth` (64) levels, duplicate member names, numbers outside
/// the grammar (`01`, `1.`, `-`) or beyond Double's range, lone or mismatched surrogates in `\u` escapes,
/// raw control characters in strings, and anything after the document. Numbers keep their text.
public enum JSONParser {
    public static let maxDepth = 64

    public static func parse(_ bytes: [UInt8]) throws(JSONParseError) -> JSONValue {
        // The error comes out as a Result: before Swift 6.1, withUnsafeBufferPointer rethrows `any Error`.
        try bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONParseError) -> JSONValue in
                var parser = Parser(bytes: buffer)
                parser.skipWhitespace()
                let value = try parser.value(depth: 0)
                parser.skipWhitespace()
                guard parser.atEnd else { throw parser.error("unexpected data after the document") }
                return value
            }
        }.get()
    }

    /// One element of an array read by `scanArray`.
    public struct ScannedElement: Sendable, Equatable {
        /// Where the element's text is in the document (`parse` of these bytes gives the element).
        public var range: Range<Int>
        /// True for an object.
        public var isObject: Bool
        /// The object's members named in `keys`, in document order, with their values in full.
        public var members: [JSONMember]
        /// Bit `n` is set when the object has a member named `present[n]` (its value checked, not built).
        public var present: UInt64 = 0

        /// The member's value, nil when the object has no member of that name (or is not an object).
        public func member(_ key: String) -> JSONValue? { members.first { $0.key == key }?.value }

        /// Whether the object has a member named `present[index]` of `scanArray(_:keys:present:)`.
        public func has(_ index: Int) -> Bool { index >= 0 && index < 64 && present & (1 << UInt64(index)) != 0 }
    }

    /// Checks `bytes` as `parse` does (it throws exactly where `parse` throws) and, when the document is an
    /// array, returns its elements: their places, and for objects the members named in `keys`. Every
    /// other value is checked but not built, so an answer of many documents costs no allocation per value.
    /// Nil for a document that is not an array.
    /// Names in `present` (at most 64, none of them in `keys`) are only looked for: an element's
    /// `has(n)` says whether it has a member named `present[n]`, whose value is checked as the rest.
    public static func scanArray(_ bytes: [UInt8], keys: [String], present: [String] = []) throws(JSONParseError) -> [ScannedElement]? {
        precondition(present.count <= 64 && !present.contains(where: keys.contains), "scanArray: at most 64 names looked for, none of them built")
        return try bytes.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONParseError) -> [ScannedElement]? in
                var parser = Parser(bytes: buffer)
                parser.namePlaces.reserveCapacity(32)
                parser.skipWhitespace()
                var elements: [ScannedElement]?
                if parser.peek() == UInt8(ascii: "[") {
                    elements = try parser.scanElements(keys: ScanKeys(keys, present: present))
                } else {
                    try parser.skip(depth: 0)
                }
                parser.skipWhitespace()
                guard parser.atEnd else { throw parser.error("unexpected data after the document") }
                return elements
            }
        }.get()
    }

    /// Whether any of the eight bytes in `word` ends a run of plain string bytes: a quote, a backslash
    /// or a control character (below 0x20). Eight bytes are passed over at a time while none does.
    @inline(__always)
    static func stopsString(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // A byte of `x` is zero where `(x - ones) & ~x` has its high bit; below 0x20 likewise with 0x20s.
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let control = (word &- ones &* 0x20) & ~word
        return ((quote &- ones) & ~quote | (backslash &- ones) & ~backslash | control) & highs != 0
    }

    /// The member names `scanArray` builds, as strings and as their UTF-8 bytes (compared with a name's
    /// bytes in the document without a string made for the name).
    struct ScanKeys {
        /// The names built, then the names only looked for.
        let names: [String]
        let utf8: [[UInt8]]
        /// How many of `names` are built (the first ones).
        let built: Int

        static let none = ScanKeys([])

        init(_ names: [String], present: [String] = []) {
            self.names = names + present
            utf8 = self.names.map { Array($0.utf8) }
            built = names.count
        }

        /// Where in `names` the name whose bytes are `text` is, nil when none is.
        func place(matching text: UnsafeBufferPointer<UInt8>) -> Int? {
            for (n, key) in utf8.enumerated() where key.count == text.count {
                let equal = key.withUnsafeBufferPointer { k -> Bool in
                    var i = 0
                    while i < k.count {
                        if k[i] != text[i] { return false }
                        i += 1
                    }
                    return true
                }
                if equal { return n }
            }
            return nil
        }
    }

    /// Reads the bytes through a pointer that is valid for the whole of `parse` (no reference counting
    /// per byte read).
    private struct Parser {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0
        /// The places of the plain names of the objects `scanObject` is in, outermost first.
        var namePlaces: [Range<Int>] = []

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        var atEnd: Bool { index >= bytes.count }

        func error(_ message: String) -> JSONParseError {
            var line = 1
            var column = 1
            for b in bytes[0..<min(index, bytes.count)] {
                if b == 0x0A { line += 1; column = 1 } else { column += 1 }
            }
            return JSONParseError(offset: index, line: line, column: column, message: message)
        }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        mutating func expect(_ literal: String) throws(JSONParseError) {
            let lit = Array(literal.utf8)
            guard index + lit.count <= bytes.count, bytes[index..<(index + lit.count)].elementsEqual(lit) else {
                throw error("expected '\(literal)'")
            }
            index += lit.count
        }

        mutating func value(depth: Int) throws(JSONParseError) -> JSONValue {
            guard depth < JSONParser.maxDepth else { throw error("nesting too deep") }
            guard let b = peek() else { throw error("unexpected end of input") }
            switch b {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try expect("true"); return .bool(true)
            case UInt8(ascii: "f"): try expect("false"); return .bool(false)
            case UInt8(ascii: "n"): try expect("null"); return .null
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return .number(try number())
            default: throw error("unexpected character")
            }
        }

        mutating func object(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var members: [JSONMember] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "}") { index += 1; return .object(members) }
            // Room for a typical document's members at once instead of growing 1, 2, 4, 8.
            members.reserveCapacity(8)
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
                let key = try string()
                if members.contains(where: { $0.key == key }) { throw error("duplicate key '\(key)'") }
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                members.append(JSONMember(key, try value(depth: depth + 1)))
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an object") }
                index += 1
                if c == UInt8(ascii: "}") { return .object(members) }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or '}'") }
            }
        }

        mutating func array(depth: Int) throws(JSONParseError) -> JSONValue {
            index += 1
            var items: [JSONValue] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { index += 1; return .array(items) }
            while true {
                skipWhitespace()
                items.append(try value(depth: depth + 1))
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an array") }
                index += 1
                if c == UInt8(ascii: "]") { return .array(items) }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or ']'") }
            }
        }

        /// The top-level array of `scanArray` (at depth 0, as `array(depth: 0)`).
        mutating func scanElements(keys: ScanKeys) throws(JSONParseError) -> [ScannedElement] {
            index += 1
            var items: [ScannedElement] = []
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { index += 1; return items }
            while true {
                skipWhitespace()
                let start = index
                guard 1 < JSONParser.maxDepth else { throw error("nesting too deep") }
                if peek() == UInt8(ascii: "{") {
                    var present: UInt64 = 0
                    let members = try scanObject(depth: 1, keys: keys, present: &present)
                    items.append(ScannedElement(range: start..<index, isObject: true, members: members, present: present))
                } else {
                    try skip(depth: 1)
                    items.append(ScannedElement(range: start..<index, isObject: false, members: []))
                }
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an array") }
                index += 1
                if c == UInt8(ascii: "]") { return items }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or ']'") }
            }
        }

        /// An object as `object(depth:)` reads it (the same checks, duplicate names included); only the
        /// members named in `keys` are built. Names of plain ASCII without escapes are compared as bytes,
        /// which for them is what comparing the strings does; once a name has an escape or other bytes,
        /// every name of the object is compared as a string, as `object(depth:)` compares them.
        /// The names of `keys` past its built ones that the object has are flagged in `present`.
        mutating func scanObject(depth: Int, keys: ScanKeys, present: inout UInt64) throws(JSONParseError) -> [JSONMember] {
            index += 1
            var kept: [JSONMember] = []
            var names: [String]?
            skipWhitespace()
            if peek() == UInt8(ascii: "}") { index += 1; return kept }
            // This object's plain names are `namePlaces[first...]`: an object inside one adds its own after
            // them and takes them away when it ends, so one array serves every object of the document.
            let first = namePlaces.count
            defer { namePlaces.removeSubrange(first...) }
            if keys.built > 0 { kept.reserveCapacity(keys.built) }
            while true {
                skipWhitespace()
                guard peek() == UInt8(ascii: "\"") else { throw error("expected a string key") }
                // The name as built (the document's own, as `object(depth:)` keeps it) and where it is in `keys`.
                var key: String?
                let place: Int?
                if names == nil, let range = plainName() {
                    for earlier in namePlaces[first...] where earlier.count == range.count && same(earlier, range) {
                        throw error("duplicate key '\(String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self))'")
                    }
                    namePlaces.append(range)
                    place = keys.place(matching: UnsafeBufferPointer(rebasing: bytes[range]))
                    if let place, place < keys.built { key = keys.names[place] }
                } else {
                    if names == nil {
                        names = namePlaces[first...].map { String(decoding: UnsafeBufferPointer(rebasing: bytes[$0]), as: UTF8.self) }
                    }
                    let name = try string()
                    if names?.contains(name) == true { throw error("duplicate key '\(name)'") }
                    names?.append(name)
                    place = keys.names.firstIndex(of: name)
                    if let place, place < keys.built { key = name }
                }
                skipWhitespace()
                guard peek() == UInt8(ascii: ":") else { throw error("expected ':'") }
                index += 1
                skipWhitespace()
                if let key {
                    kept.append(JSONMember(key, try value(depth: depth + 1)))
                } else {
                    if let place { present |= 1 << UInt64(place - keys.built) }
                    try skip(depth: depth + 1)
                }
                skipWhitespace()
                guard let c = peek() else { throw error("unexpected end of input in an object") }
                index += 1
                if c == UInt8(ascii: "}") { return kept }
                guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or '}'") }
            }
        }

        /// Whether the bytes at `a` and at `b` (of the same length) are the same.
        func same(_ a: Range<Int>, _ b: Range<Int>) -> Bool {
            var i = a.lowerBound, j = b.lowerBound
            while i < a.upperBound {
                if bytes[i] != bytes[j] { return false }
                i += 1
                j += 1
            }
            return true
        }

        /// At a string: when its bytes up to the closing quote are printable ASCII without a backslash,
        /// moves past it and returns where its text is; otherwise stays and returns nil.
        mutating func plainName() -> Range<Int>? {
            var i = index + 1
            while i < bytes.count {
                let c = bytes[i]
                if c == UInt8(ascii: "\"") {
                    let range = (index + 1)..<i
                    index = i + 1
                    return range
                }
                if c == UInt8(ascii: "\\") || c < 0x20 || c >= 0x80 { return nil }
                i += 1
            }
            return nil
        }

        /// Checks a value as `value(depth:)` does, building nothing but object keys (for the duplicate check).
        mutating func skip(depth: Int) throws(JSONParseError) {
            guard depth < JSONParser.maxDepth else { throw error("nesting too deep") }
            guard let b = peek() else { throw error("unexpected end of input") }
            switch b {
            case UInt8(ascii: "{"):
                var present: UInt64 = 0
                _ = try scanObject(depth: depth, keys: ScanKeys.none, present: &present)
            case UInt8(ascii: "["):
                index += 1
                skipWhitespace()
                if peek() == UInt8(ascii: "]") { index += 1; return }
                while true {
                    skipWhitespace()
                    try skip(depth: depth + 1)
                    skipWhitespace()
                    guard let c = peek() else { throw error("unexpected end of input in an array") }
                    index += 1
                    if c == UInt8(ascii: "]") { return }
                    guard c == UInt8(ascii: ",") else { index -= 1; throw error("expected ',' or ']'") }
                }
            case UInt8(ascii: "\""): try skipString()
            case UInt8(ascii: "t"): try expect("true")
            case UInt8(ascii: "f"): try expect("false")
            case UInt8(ascii: "n"): try expect("null")
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): try skipNumber()
            default: throw error("unexpected character")
            }
        }

        /// A string checked as `string()` checks it; a string without escapes is passed over whole.
        mutating func skipString() throws(JSONParseError) {
            // The bytes up to the closing quote in a loop of its own, the place kept in a local.
            if let base = bytes.baseAddress {
                let end = bytes.count
                var i = index + 1
                while i + 8 <= end, !JSONParser.stopsString(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { i += 8 }
                while i < end {
                    let c = base[i]
                    if c == UInt8(ascii: "\"") {
                        index = i + 1
                        return
                    }
                    if c == UInt8(ascii: "\\") || c < 0x20 { break }
                    i += 1
                }
            }
            // Escapes or a control character: the full reading decides, with the same errors.
            _ = try string()
        }

        /// A number checked as `number()` checks it, its text built only where `number()` needs a Double.
        mutating func skipNumber() throws(JSONParseError) {
            let start = index
            if peek() == UInt8(ascii: "-") { index += 1 }
            var wholeDigits = 0
            if peek() == UInt8(ascii: "0") {
                index += 1
                wholeDigits = 1
            } else {
                while let c = peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { index += 1; wholeDigits += 1 }
                guard wholeDigits > 0 else { throw error("invalid number") }
            }
            var simple = wholeDigits <= 308
            if let c = peek(), c == UInt8(ascii: ".") || c == UInt8(ascii: "e") || c == UInt8(ascii: "E") { simple = false }
            guard simple else {
                // A fraction, an exponent or a long number: read it as `number()` does.
                index = start
                _ = try number()
                return
            }
        }

        mutating func hex4() throws(JSONParseError) -> UInt32 {
            guard index + 4 <= bytes.count else { throw error("truncated \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                guard let d = hexDigitValue(UInt32(bytes[index])) else { throw error("invalid \\u escape") }
                v = v << 4 | UInt32(d)
                index += 1
            }
            return v
        }

        mutating func string() throws(JSONParseError) -> String {
            index += 1
            // Most strings have no escape: their bytes are taken as they are, without a copy that grows.
            let start = index
            if let base = bytes.baseAddress {
                let end = bytes.count
                var i = index
                while i + 8 <= end, !JSONParser.stopsString(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { i += 8 }
                while i < end {
                    let c = base[i]
                    if c == UInt8(ascii: "\"") {
                        index = i + 1
                        return String(decoding: UnsafeBufferPointer(start: base + start, count: i - start), as: UTF8.self)
                    }
                    if c == UInt8(ascii: "\\") || c < 0x20 { break }
                    i += 1
                }
                index = i
            }
            var out = Array(bytes[start..<index])
            while true {
                guard let c = peek() else { throw error("unterminated string") }
                index += 1
                switch c {
                case UInt8(ascii: "\""):
                    return String(decoding: out, as: UTF8.self)
                case UInt8(ascii: "\\"):
                    guard let e = peek() else { throw error("unterminated escape") }
                    index += 1
                    switch e {
                    case UInt8(ascii: "\""): out.append(0x22)
                    case UInt8(ascii: "\\"): out.append(0x5C)
                    case UInt8(ascii: "/"): out.append(0x2F)
                    case UInt8(ascii: "b"): out.append(0x08)
                    case UInt8(ascii: "f"): out.append(0x0C)
                    case UInt8(ascii: "n"): out.append(0x0A)
                    case UInt8(ascii: "r"): out.append(0x0D)
                    case UInt8(ascii: "t"): out.append(0x09)
                    case UInt8(ascii: "u"):
                        var scalar = try hex4()
                        if (0xD800...0xDBFF).contains(scalar) {
                            guard peek() == UInt8(ascii: "\\") else { throw error("lone surrogate in \\u escape") }
                            index += 1
                            guard peek() == UInt8(ascii: "u") else { throw error("lone surrogate in \\u escape") }
                            index += 1
                            let low = try hex4()
                            guard (0xDC00...0xDFFF).contains(low) else { throw error("invalid surrogate pair") }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        }
                        guard let u = Unicode.Scalar(scalar) else { throw error("invalid \\u escape") }
                        out.append(contentsOf: Array(String(Character(u)).utf8))
                    default: throw error("invalid escape")
                    }
                case 0x00..<0x20:
                    throw error("control character in string")
                default:
                    out.append(c)
                }
            }
        }

        /// RFC 8259 number grammar: `-`? (`0` | [1-9][0-9]*) (`.` [0-9]+)? ([eE] [+-]? [0-9]+)?
        mutating func number() throws(JSONParseError) -> JSONNumber {
            let start = index
            func digits(_ p: inout Parser) -> Int {
                var n = 0
                while let c = p.peek(), c >= UInt8(ascii: "0"), c <= UInt8(ascii: "9") { p.index += 1; n += 1 }
                return n
            }
            if peek() == UInt8(ascii: "-") { index += 1 }
            var wholeDigits = 1
            if peek() == UInt8(ascii: "0") {
                index += 1
            } else {
                wholeDigits = digits(&self)
                guard wholeDigits > 0 else { throw error("invalid number") }
            }
            if peek() == UInt8(ascii: ".") {
                index += 1
                guard digits(&self) > 0 else { throw error("invalid number") }
            }
            var exponent = false
            if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
                index += 1
                if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
                guard digits(&self) > 0 else { throw error("invalid number") }
                exponent = true
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            // Only an exponent or more than 308 whole digits can take a number beyond Double's range.
            if exponent || wholeDigits > 308 {
                guard let value = Double(text), value.isFinite else { throw error("invalid number") }
            }
            return JSONNumber(parsed: text)
        }
    }
}
