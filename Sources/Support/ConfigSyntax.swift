/// The config file's syntax: a small subset of TOML.
///
/// - `[section]` headers (bare names only; no dotted tables, no arrays of tables),
/// - `key = value` with a bare key (`A-Z a-z 0-9 _ -`),
/// - values: double-quoted strings with the escapes `\"`, `\\`, `\n`, `\t`; decimal integers (optional sign,
///   `_` between digits, no leading zeros); `true` / `false`; arrays of strings, which may span lines and
///   hold comments and a trailing comma,
/// - `#` comments to the end of a line; LF or CRLF line ends.
///
/// Everything else is an error naming its line. The parser reports every line it cannot read and goes on
/// with the next one, so `config check` can list all problems at once.
///
/// A syntax error never quotes what the line holds: a value may be a secret (an unquoted
/// `API_SECRET = ...`), and so may a "key" (a secret file passed as the config). Only key names the
/// schema knows are named.

/// One problem found in a config file. `line` is 1-based; 0 means the file as a whole.
public struct ConfigProblem: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var message: String
    /// The `[section]` the problem is in, when it is inside a known one (nil: the file as a whole, an
    /// unknown section, or lines before any header).
    public var section: String?

    public init(line: Int, message: String, section: String? = nil) {
        self.line = line
        self.message = message
        self.section = section
    }

    public var description: String { line > 0 ? "line \(line): \(message)" : message }
}

/// A value as written in the file, before the schema gives it a meaning.
public enum ConfigValue: Sendable, Equatable {
    case string(String)
    case integer(Int)
    case boolean(Bool)
    case array([String])

    public var typeName: String {
        switch self {
        case .string: "a string"
        case .integer: "an integer"
        case .boolean: "a boolean"
        case .array: "an array"
        }
    }
}

/// `key = value` on `line`, inside `section`.
public struct ConfigEntry: Sendable, Equatable {
    public var section: String
    public var key: String
    public var value: ConfigValue
    public var line: Int
}

/// A `[section]` header and where it is.
public struct ConfigSectionHeader: Sendable, Equatable {
    public var name: String
    public var line: Int
}

/// What the parser read: headers and entries in file order, plus the lines it could not read.
public struct ConfigDocument: Sendable {
    public var headers: [ConfigSectionHeader] = []
    public var entries: [ConfigEntry] = []
    public var problems: [ConfigProblem] = []
}

/// Parses the TOML subset. Never traps on any input.
public struct ConfigParser {
    private struct SyntaxError: Error {
        var line: Int
        var message: String
    }

    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var section: String?
    private var document = ConfigDocument()

    /// Key names a message may quote: those of the schema. Anything else on a line may be a secret.
    private let knownKeys: Set<String>

    private init(bytes: [UInt8], knownKeys: Set<String>) {
        self.bytes = bytes
        self.knownKeys = knownKeys
    }

    public static func parse(_ bytes: [UInt8], knownKeys: Set<String> = []) -> ConfigDocument {
        var parser = ConfigParser(bytes: bytes, knownKeys: knownKeys)
        parser.run()
        return parser.document
    }

    private static let space = UInt8(ascii: " ")
    private static let tab = UInt8(ascii: "\t")
    private static let newline = UInt8(ascii: "\n")
    private static let carriageReturn = UInt8(ascii: "\r")
    private static let hash = UInt8(ascii: "#")
    private static let quote = UInt8(ascii: "\"")
    private static let apostrophe = UInt8(ascii: "'")
    private static let backslash = UInt8(ascii: "\\")
    private static let openBracket = UInt8(ascii: "[")
    private static let closeBracket = UInt8(ascii: "]")
    private static let equals = UInt8(ascii: "=")
    private static let comma = UInt8(ascii: ",")

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    private func peek(_ offset: Int) -> UInt8? {
        let i = index + offset
        return i < bytes.count ? bytes[i] : nil
    }

    private static func isBareKeyByte(_ b: UInt8) -> Bool {
        (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39)
            || b == UInt8(ascii: "_") || b == UInt8(ascii: "-")
    }

    private mutating func run() {
        // A UTF-8 byte order mark, as some editors write, is not content.
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
        while true {
            skipSpaces()
            guard let byte = current else { break }
            if byte == Self.newline {
                index += 1
                line += 1
                continue
            }
            if byte == Self.hash {
                do throws(SyntaxError) { try skipComment() } catch { record(error) }
                continue
            }
            do throws(SyntaxError) {
                if byte == Self.openBracket {
                    try parseHeader()
                } else {
                    try parseKeyValue()
                }
                try expectEndOfLine()
            } catch {
                record(error)
            }
        }
    }

    private mutating func record(_ error: SyntaxError) {
        let inSection = section.flatMap { $0.isEmpty ? nil : $0 }
        document.problems.append(ConfigProblem(line: error.line, message: Self.oneLine(error.message), section: inSection))
        // Resynchronise at the next line.
        while let byte = current, byte != Self.newline { index += 1 }
    }

    /// Spaces, tabs, and a carriage return that ends a CRLF line.
    private mutating func skipSpaces() {
        while let byte = current {
            if byte == Self.space || byte == Self.tab {
                index += 1
            } else if byte == Self.carriageReturn && peek(1) == Self.newline {
                index += 1
            } else {
                break
            }
        }
    }

    /// A `#` comment up to (not including) the newline. Control characters other than tab are refused.
    private mutating func skipComment() throws(SyntaxError) {
        while let byte = current, byte != Self.newline {
            if byte == Self.carriageReturn && peek(1) == Self.newline { index += 1; continue }
            if byte < 0x20 && byte != Self.tab || byte == 0x7F {
                throw SyntaxError(line: line, message: "control character in a comment")
            }
            index += 1
        }
    }

    /// After a statement only spaces and a comment may follow on the line.
    private mutating func expectEndOfLine() throws(SyntaxError) {
        skipSpaces()
        guard let byte = current else { return }
        if byte == Self.newline { return }
        if byte == Self.hash {
            try skipComment()
            return
        }
        throw SyntaxError(line: line, message: "unexpected text after the value (one key = value per line)")
    }

    private mutating func parseHeader() throws(SyntaxError) {
        let headerLine = line
        index += 1  // [
        if current == Self.openBracket {
            throw SyntaxError(line: line, message: "arrays of tables ([[...]]) are not supported")
        }
        skipSpaces()
        let start = index
        while let byte = current, Self.isBareKeyByte(byte) || byte == UInt8(ascii: ".") { index += 1 }
        let name = String(decoding: bytes[start..<index], as: UTF8.self)
        skipSpaces()
        guard current == Self.closeBracket else {
            section = ""  // keys below belong to no known section; the header line carries the error
            throw SyntaxError(line: line, message: "malformed section header (expected [name])")
        }
        index += 1
        guard !name.isEmpty else {
            section = ""
            throw SyntaxError(line: line, message: "empty section name")
        }
        section = name
        document.headers.append(ConfigSectionHeader(name: name, line: headerLine))
    }

    private mutating func parseKeyValue() throws(SyntaxError) {
        let keyLine = line
        guard let first = current else { return }
        if first == Self.quote || first == Self.apostrophe {
            throw SyntaxError(line: line, message: "quoted keys are not supported; use a bare key")
        }
        let start = index
        while let byte = current, Self.isBareKeyByte(byte) { index += 1 }
        guard index > start else {
            throw SyntaxError(line: line, message: "expected a key, a [section] or a comment")
        }
        let key = String(decoding: bytes[start..<index], as: UTF8.self)
        skipSpaces()
        if current == UInt8(ascii: ".") {
            throw SyntaxError(line: line, message: "dotted keys are not supported\(named(key))")
        }
        guard current == Self.equals else {
            // What stands before the missing '=' may be a secret (a secret file read as a config).
            throw SyntaxError(line: line, message: "expected '=' after the key\(named(key)) (one key = value per line)")
        }
        index += 1
        skipSpaces()
        let value = try parseValue(key: key)
        guard let section else {
            throw SyntaxError(line: keyLine, message: "the key\(named(key)) appears before any [section] header")
        }
        document.entries.append(ConfigEntry(section: section, key: key, value: value, line: keyLine))
    }

    private mutating func parseValue(key: String) throws(SyntaxError) -> ConfigValue {
        guard let byte = current, byte != Self.newline, byte != Self.hash else {
            throw SyntaxError(line: line, message: "missing value for the key\(named(key))")
        }
        switch byte {
        case Self.quote:
            return .string(try parseString())
        case Self.apostrophe:
            throw SyntaxError(line: line, message: "strings must use double quotes (\"...\")")
        case Self.openBracket:
            return .array(try parseArray())
        default:
            return try parseBareValue(key: key)
        }
    }

    private mutating func parseString() throws(SyntaxError) -> String {
        if peek(1) == Self.quote && peek(2) == Self.quote {
            throw SyntaxError(line: line, message: "multi-line strings (\"\"\") are not supported")
        }
        index += 1  // opening quote
        var out: [UInt8] = []
        while true {
            guard let byte = current, byte != Self.newline else {
                throw SyntaxError(line: line, message: "unterminated string (missing closing \")")
            }
            index += 1
            if byte == Self.quote { break }
            if byte == Self.backslash {
                guard let escaped = current else {
                    throw SyntaxError(line: line, message: "unterminated string (missing closing \")")
                }
                index += 1
                switch escaped {
                case Self.quote: out.append(Self.quote)
                case Self.backslash: out.append(Self.backslash)
                case UInt8(ascii: "n"): out.append(Self.newline)
                case UInt8(ascii: "t"): out.append(Self.tab)
                default:
                    throw SyntaxError(line: line, message: "unsupported escape in a string (use \\\" or \\\\)")
                }
                continue
            }
            if byte < 0x20 && byte != Self.tab || byte == 0x7F {
                throw SyntaxError(line: line, message: "control character in a string")
            }
            out.append(byte)
        }
        guard let text = String(validating: out, as: UTF8.self) else {
            throw SyntaxError(line: line, message: "string is not valid UTF-8")
        }
        return text
    }

    private mutating func parseArray() throws(SyntaxError) -> [String] {
        let openLine = line
        index += 1  // [
        var items: [String] = []
        var expectingItem = true
        while true {
            // Blank space, newlines and comments may sit anywhere between items.
            skipSpaces()
            guard let byte = current else {
                throw SyntaxError(line: openLine, message: "unterminated array (missing ])")
            }
            if byte == Self.newline {
                index += 1
                line += 1
                continue
            }
            if byte == Self.hash {
                try skipComment()
                continue
            }
            if byte == Self.closeBracket {
                index += 1
                return items
            }
            if byte == Self.comma {
                if expectingItem {
                    throw SyntaxError(line: line, message: "unexpected ',' in an array")
                }
                index += 1
                expectingItem = true
                continue
            }
            guard expectingItem else {
                throw SyntaxError(line: line, message: "expected ',' or ']' in an array")
            }
            if byte == Self.quote {
                items.append(try parseString())
                expectingItem = false
            } else if byte == Self.openBracket {
                throw SyntaxError(line: line, message: "nested arrays are not supported")
            } else {
                throw SyntaxError(line: line, message: "arrays may hold only double-quoted strings")
            }
        }
    }

    /// ` 'key'` for a key name the schema knows, else nothing.
    private func named(_ key: String) -> String {
        knownKeys.contains(key) ? " '\(key)'" : ""
    }

    /// `true`, `false` or an integer. The text is never quoted back: it may be an unquoted secret.
    private mutating func parseBareValue(key: String) throws(SyntaxError) -> ConfigValue {
        let start = index
        while let byte = current, byte != Self.space, byte != Self.tab, byte != Self.newline, byte != Self.hash,
            byte != Self.comma, byte != Self.closeBracket, !(byte == Self.carriageReturn && peek(1) == Self.newline)
        {
            index += 1
        }
        let word = String(decoding: bytes[start..<index], as: UTF8.self)
        if word == "true" { return .boolean(true) }
        if word == "false" { return .boolean(false) }
        let what = knownKeys.contains(key) ? " for the key\(named(key))" : ""
        if !ConfigKeys.looksSecret(key), let first = word.utf8.first,
           first == UInt8(ascii: "+") || first == UInt8(ascii: "-") || (first >= 0x30 && first <= 0x39) {
            return .integer(try Self.integer(word, line: line, what: what))
        }
        throw SyntaxError(line: line, message: "invalid value\(what) (strings need double quotes; booleans are true or false)")
    }

    private static func integer(_ word: String, line: Int, what: String) throws(SyntaxError) -> Int {
        var digits = Substring(word)
        var negative = false
        if let sign = digits.first, sign == "+" || sign == "-" {
            negative = sign == "-"
            digits = digits.dropFirst()
        }
        let invalid = SyntaxError(line: line, message: "invalid integer\(what) (decimal integers only)")
        guard let firstDigit = digits.first, firstDigit.isASCII, firstDigit.isNumber else { throw invalid }
        if firstDigit == "0" && digits.count > 1 { throw SyntaxError(line: line, message: "leading zeros are not allowed in an integer\(what)") }
        var value = 0
        var previousUnderscore = false
        for ch in digits {
            if ch == "_" {
                if previousUnderscore { throw invalid }
                previousUnderscore = true
                continue
            }
            guard let digit = ch.asciiValue, digit >= 0x30, digit <= 0x39 else { throw invalid }
            previousUnderscore = false
            let (m, o1) = value.multipliedReportingOverflow(by: 10)
            let (s, o2) = negative ? m.subtractingReportingOverflow(Int(digit - 0x30)) : m.addingReportingOverflow(Int(digit - 0x30))
            if o1 || o2 { throw SyntaxError(line: line, message: "integer\(what) is too large") }
            value = s
        }
        if previousUnderscore { throw invalid }
        return value
    }

    /// Control characters (from escapes in values) shown as '?', so a message stays one line.
    public static func oneLine(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) else { return text }
        return String(String.UnicodeScalarView(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? "?" : $0 }))
    }

    /// Keeps messages one short line even for garbage input.
    public static func clip(_ text: String, limit: Int = 40) -> String {
        var out = ""
        for ch in text.prefix(limit) {
            if let a = ch.asciiValue, a < 0x20 || a == 0x7F { out += "?" } else { out.append(ch) }
        }
        return text.count > limit ? out + "…" : out
    }
}

/// Which config keys hold secrets, by their name.
public enum ConfigKeys {
    /// A key whose name says it holds a credential (`secret`, `token`, `bearer`, `password`, in any case,
    /// with `-` or `_`): its value is never shown, only `(hidden)`.
    public static func looksSecret(_ key: String) -> Bool {
        let flat = String(key.lowercased().filter { $0 != "-" && $0 != "_" })
        return ["secret", "token", "bearer", "password", "passwd"].contains { flat.containsBytes($0) }
    }

    /// A value as a message may show it: `(hidden)` for a secret-looking key.
    public static func shown(_ key: String, _ value: String) -> String {
        looksSecret(key) ? "(hidden)" : "\"\(ConfigParser.clip(value))\""
    }
}
