/// Writes JSON bytes with members in the order they are added, so the same value always gives the same
/// bytes: either member by member (`beginObject`, `string`, `integer`, ...) or a whole `JSONValue`.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    /// Bit `n`: the container open at depth `n` (0 is the top level) has a member already. Depths from 64
    /// on, which no builder reaches, are kept in `deeper`.
    private var hasMember: UInt64 = 0
    private var depth = 0
    private var deeper: [Bool] = []

    public init() { bytes.reserveCapacity(256) }

    /// With room for `capacity` bytes before the buffer grows.
    public init(capacity: Int) { bytes.reserveCapacity(capacity) }

    private mutating func separate() {
        if _fastPath(depth < 64) {
            let bit: UInt64 = 1 << UInt64(depth)
            if hasMember & bit != 0 { bytes.append(UInt8(ascii: ",")) }
            hasMember |= bit
        } else if let last = deeper.indices.last {
            if deeper[last] { bytes.append(UInt8(ascii: ",")) }
            deeper[last] = true
        }
    }

    private mutating func key(_ name: String?) {
        separate()
        if let name {
            Self.appendString(name, to: &bytes)
            bytes.append(UInt8(ascii: ":"))
        }
    }

    private mutating func open(_ bracket: UInt8) {
        bytes.append(bracket)
        depth += 1
        if depth < 64 {
            hasMember &= ~(1 << UInt64(depth))
        } else {
            deeper.append(false)
        }
    }

    private mutating func close(_ bracket: UInt8) {
        if depth >= 64 {
            deeper.removeLast()
        }
        if depth > 0 { depth -= 1 }
        bytes.append(bracket)
    }

    public mutating func beginObject(_ name: String? = nil) {
        key(name)
        open(UInt8(ascii: "{"))
    }

    public mutating func endObject() {
        close(UInt8(ascii: "}"))
    }

    public mutating func beginArray(_ name: String? = nil) {
        key(name)
        open(UInt8(ascii: "["))
    }

    public mutating func endArray() {
        close(UInt8(ascii: "]"))
    }

    public mutating func string(_ name: String?, _ value: String) {
        key(name)
        Self.appendString(value, to: &bytes)
    }

    /// A string given as UTF-8 bytes (text written on the stack), quoted and escaped as `string` does.
    public mutating func string(_ name: String?, utf8 value: UnsafeBufferPointer<UInt8>) {
        key(name)
        Self.appendQuoted(value, to: &bytes, escapingDelete: false)
    }

    public mutating func integer(_ name: String?, _ value: Int64) {
        key(name)
        Self.appendInteger(value, to: &bytes)
    }

    /// A decimal written with at most `fractionDigits` digits after the point, trailing zeros removed.
    public mutating func decimal(_ name: String?, _ value: Double, fractionDigits: Int) {
        key(name)
        bytes.append(contentsOf: Self.formatDecimal(value, fractionDigits: fractionDigits).utf8)
    }

    public mutating func bool(_ name: String?, _ value: Bool) {
        key(name)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    /// Inserts bytes that are already JSON (a frozen element).
    public mutating func raw(_ name: String?, _ json: [UInt8]) {
        key(name)
        bytes.append(contentsOf: json)
    }

    /// The decimal digits of `value` as `String(value)` writes them, `-` first when negative.
    public static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        var magnitude = value.magnitude
        // 20 digits hold any UInt64; written from the end.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 21) { digits in
            var at = digits.count
            repeat {
                at -= 1
                digits[at] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            if value < 0 {
                at -= 1
                digits[at] = UInt8(ascii: "-")
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[at...]))
        }
    }

    public static func formatDecimal(_ value: Double, fractionDigits: Int) -> String {
        guard value.isFinite else { return "0" }
        var scale: Int64 = 1
        for _ in 0..<max(0, min(fractionDigits, 9)) { scale *= 10 }
        let scaled = (abs(value) * Double(scale)).rounded()
        // Beyond 9e15 no fraction digit is exact; beyond Int64 a conversion would trap, so there the
        // shortest text of the Double itself (valid JSON number text) is written.
        guard scaled < 9.0e15 else {
            return abs(value) < 9.0e18 ? String(Int64(value.rounded())) : JSONNumber(value.rounded())?.text ?? "0"
        }
        let n = Int64(scaled)
        var whole = String(n / scale)
        var fraction = String(n % scale)
        if scale > 1 {
            fraction = String(repeating: "0", count: String(scale).count - 1 - fraction.count) + fraction
            while fraction.hasSuffix("0") { fraction.removeLast() }
        } else {
            fraction = ""
        }
        if value < 0 && n != 0 { whole = "-" + whole }
        return fraction.isEmpty ? whole : whole + "." + fraction
    }

    /// A quoted, escaped string: `"`, `\`, newline, return and tab by name, other control characters as
    /// `\u00XX`; DEL (0x7F) too when `escapingDelete` (the commands' `--json` has always escaped it,
    /// upload bodies never have, and both keep their bytes).
    public static func appendString(_ s: String, to out: inout [UInt8], escapingDelete: Bool = false) {
        var s = s
        s.withUTF8 { appendQuoted($0, to: &out, escapingDelete: escapingDelete) }
    }

    /// True when `appendQuoted` (without `escapingDelete`) copies `text` as it is between the quotes: no
    /// byte of it is a quote, a backslash or a control character. Eight bytes are looked at a time.
    public static func writesVerbatim(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = text.baseAddress else { return true }
        let end = text.count
        var i = 0
        while i + 8 <= end {
            if JSONParser.stopsString(UnsafeRawPointer(base + i).loadUnaligned(as: UInt64.self)) { return false }
            i += 8
        }
        while i < end {
            let c = base[i]
            if c < 0x20 || c == UInt8(ascii: "\"") || c == UInt8(ascii: "\\") { return false }
            i += 1
        }
        return true
    }

    /// `appendString` of UTF-8 bytes: runs that need no escape are copied in one piece.
    static func appendQuoted(_ text: UnsafeBufferPointer<UInt8>, to out: inout [UInt8], escapingDelete: Bool) {
        out.append(UInt8(ascii: "\""))
        var runStart = 0
        for (i, b) in text.enumerated() where b < 0x20 || b == 0x22 || b == 0x5C || (b == 0x7F && escapingDelete) {
            if runStart < i { out.append(contentsOf: UnsafeBufferPointer(rebasing: text[runStart..<i])) }
            runStart = i + 1
            switch b {
            case 0x22: out.append(contentsOf: [0x5C, 0x22])
            case 0x5C: out.append(contentsOf: [0x5C, 0x5C])
            case 0x0A: out.append(contentsOf: [0x5C, UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [0x5C, UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [0x5C, UInt8(ascii: "t")])
            default: out.append(contentsOf: ("\\u00" + hexString([b])).utf8)
            }
        }
        if runStart < text.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: text[runStart...])) }
        out.append(UInt8(ascii: "\""))
    }

    /// A whole value: compact when `indent` is nil, else members and items one per line.
    static func write(_ value: JSONValue, into out: inout [UInt8], indent: String?, level: Int) {
        switch value {
        case .null: out += Array("null".utf8)
        case let .bool(b): out += Array((b ? "true" : "false").utf8)
        case let .number(n): out += Array(n.text.utf8)
        case let .string(s): appendString(s, to: &out, escapingDelete: true)
        case let .array(items):
            if items.isEmpty { out += Array("[]".utf8); return }
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                newline(&out, indent, level + 1)
                write(item, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(UInt8(ascii: "]"))
        case let .object(members):
            if members.isEmpty { out += Array("{}".utf8); return }
            out.append(UInt8(ascii: "{"))
            for (i, member) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                newline(&out, indent, level + 1)
                appendString(member.key, to: &out, escapingDelete: true)
                out += Array((indent == nil ? ":" : ": ").utf8)
                write(member.value, into: &out, indent: indent, level: level + 1)
            }
            newline(&out, indent, level)
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func newline(_ out: inout [UInt8], _ indent: String?, _ level: Int) {
        guard let indent else { return }
        out.append(0x0A)
        for _ in 0..<level { out += Array(indent.utf8) }
    }
}
