/// A parsed config document split into its sections, each handed to the layer that owns it.
///
/// The owner of a section publishes its keys; `ConfigSections` refuses unknown sections, unknown keys and
/// repeated keys once, for every owner. Each owner then reads its values through a `ConfigSection`, whose
/// typed getters report a wrong type, an out-of-range number or an unusable file on the key's line, into
/// the section's problem list. Nothing here knows which sections exist: the schema comes from the caller.
public struct ConfigSections: Sendable {
    /// Known sections and their keys, in documentation order.
    public typealias Schema = [(section: String, keys: [String])]

    /// Problems of the document as a whole: syntax, unknown sections and keys, duplicates.
    public private(set) var problems: [ConfigProblem]
    private var sections: [String: ConfigSection] = [:]

    public init(document: ConfigDocument, schema: Schema, baseDirectory: String) {
        problems = document.problems
        let known = Dictionary(schema.map { ($0.section, Set($0.keys)) }, uniquingKeysWith: { $0.union($1) })
        for (name, _) in schema where sections[name] == nil {
            sections[name] = ConfigSection(name: name, baseDirectory: baseDirectory)
        }
        for header in document.headers {
            if known[header.name] == nil {
                problems.append(ConfigProblem(
                    line: header.line,
                    message: "unknown section" + Self.suggestion(header.name, among: schema.map(\.section))
                        + " (sections: " + schema.map { "[\($0.section)]" }.joined(separator: ", ") + ")"
                ))
            } else if let first = sections[header.name]?.headerLine {
                problems.append(ConfigProblem(line: header.line, message: "section [\(header.name)] is already defined on line \(first)",
                                              section: header.name))
            } else {
                sections[header.name]?.headerLine = header.line
            }
        }
        for entry in document.entries {
            guard let keys = known[entry.section] else { continue }  // reported with its header
            guard keys.contains(entry.key) else {
                let order = schema.first { $0.section == entry.section }?.keys ?? []
                problems.append(ConfigProblem(
                    line: entry.line,
                    message: "unknown key in [\(entry.section)]" + Self.suggestion(entry.key, among: order),
                    section: entry.section
                ))
                continue
            }
            if let first = sections[entry.section]?.entries[entry.key] {
                problems.append(ConfigProblem(line: entry.line, message: "duplicate key '\(entry.key)' in [\(entry.section)] (first set on line \(first.line))",
                                              section: entry.section))
                continue
            }
            sections[entry.section]?.entries[entry.key] = entry
        }
    }

    /// The section's entries (empty when the file has none), for its owner to read.
    public func section(_ name: String) -> ConfigSection {
        sections[name] ?? ConfigSection(name: name, baseDirectory: ".")
    }

    /// " (did you mean 'x'?)" for a near miss.
    static func suggestion(_ word: String, among candidates: [String]) -> String {
        let best = candidates.map { ($0, editDistance(word, $0)) }.min { $0.1 < $1.1 }
        guard let best, best.1 <= 2 else { return "" }
        return " (did you mean '\(best.0)'?)"
    }

    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a.utf8.prefix(64)), b = Array(b.utf8.prefix(64))
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}

/// One `[section]` of a config file and the problems found while its owner reads it.
///
/// Every message starts with `section.key:` and never quotes the value: it may be a secret.
public struct ConfigSection: Sendable {
    /// Larger secret files are refused.
    public static let secretLimit = 64 << 10
    /// Larger CA bundles are refused.
    public static let certificateLimit = 8 << 20

    public let name: String
    /// The line of the `[name]` header; nil when the file has none.
    public internal(set) var headerLine: Int?
    public internal(set) var entries: [String: ConfigEntry] = [:]
    /// Relative paths are taken relative to the config file's directory.
    public let baseDirectory: String
    public private(set) var problems: [ConfigProblem] = []

    init(name: String, baseDirectory: String) {
        self.name = name
        self.baseDirectory = baseDirectory
    }

    public func has(_ key: String) -> Bool { entries[key] != nil }

    /// The line a key is set on.
    public func line(of key: String) -> Int? { entries[key]?.line }

    /// A problem in this section, on `line` (0: the file as a whole).
    public mutating func problem(_ line: Int, _ message: String) {
        problems.append(ConfigProblem(line: line, message: ConfigParser.oneLine(message), section: name))
    }

    // MARK: typed getters (each reports a wrong type on the key's line)

    public mutating func string(_ key: String) -> (value: String, line: Int)? {
        guard let entry = entries[key] else { return nil }
        guard case .string(let text) = entry.value else {
            problem(entry.line, "\(name).\(key): expected a string, got \(entry.value.typeName)")
            return nil
        }
        guard !text.isEmpty else {
            problem(entry.line, "\(name).\(key): must not be empty (remove the line to use the default)")
            return nil
        }
        return (text, entry.line)
    }

    public mutating func bool(_ key: String) -> (value: Bool, line: Int)? {
        guard let entry = entries[key] else { return nil }
        guard case .boolean(let b) = entry.value else {
            problem(entry.line, "\(name).\(key): expected true or false, got \(entry.value.typeName)")
            return nil
        }
        return (b, entry.line)
    }

    public mutating func integer(_ key: String, in range: ClosedRange<Int>) -> (value: Int, line: Int)? {
        guard let entry = entries[key] else { return nil }
        guard case .integer(let i) = entry.value else {
            problem(entry.line, "\(name).\(key): expected an integer in \(range.lowerBound)..\(range.upperBound), got \(entry.value.typeName)")
            return nil
        }
        guard range.contains(i) else {
            problem(entry.line, "\(name).\(key): out of range \(range.lowerBound)..\(range.upperBound)")
            return nil
        }
        return (i, entry.line)
    }

    /// A string that must be one of `choices`; `expected` says so in the message.
    public mutating func choice<T>(_ key: String, _ choices: (String) -> T?, expected: String) -> T? {
        guard let v = string(key) else { return nil }
        guard let chosen = choices(v.value) else {
            problem(v.line, "\(name).\(key): expected \(expected)")
            return nil
        }
        return chosen
    }

    /// A file path, resolved against the config file's directory.
    public mutating func path(_ key: String) -> (value: String, line: Int)? {
        guard let v = string(key) else { return nil }
        return (ConfigFiles.resolve(v.value, relativeTo: baseDirectory), v.line)
    }

    /// A file path naming an existing regular file, with its line and its mode bits.
    public mutating func existingFile(_ key: String) -> (value: String, line: Int, info: ConfigFiles.Info)? {
        guard let v = path(key) else { return nil }
        let info: ConfigFiles.Info
        switch ConfigFiles.lookUp(v.value) {
        case .success(let found): info = found
        case .failure(let why):
            problem(v.line, "\(name).\(key): the file \(why.text)")
            return nil
        }
        guard info.isRegular else {
            problem(v.line, "\(name).\(key): the file is not a regular file")
            return nil
        }
        return (v.value, v.line, info)
    }

    /// A CA bundle: an existing regular file that holds at least one PEM certificate.
    public mutating func certificateFile(_ key: String) -> String? {
        guard let (path, line, _) = existingFile(key) else { return nil }
        switch FileContents.contents(of: path, limit: Self.certificateLimit) {
        case .failure(let error):
            problem(line, "\(name).\(key): cannot read the file: \(error.text)")
            return nil
        case .success(let bytes):
            guard Self.holdsPEMCertificate(bytes) else {
                problem(line, "\(name).\(key): the file holds no PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)")
                return nil
            }
            return path
        }
    }

    /// A secret written in the config itself.
    public mutating func inlineSecret(_ key: String) -> String? {
        guard let entry = entries[key] else { return nil }
        guard case .string(let text) = entry.value else {
            problem(entry.line, "\(name).\(key): expected a string, got \(entry.value.typeName)")
            return nil
        }
        if let message = Self.secretProblem(text) {
            problem(entry.line, "\(name).\(key): \(message)")
            return nil
        }
        return text
    }

    /// A secret file: must exist, be a regular file, and give no access to group or others. Trailing
    /// newlines are trimmed. Returns the secret and the file's path.
    public mutating func secretFile(_ key: String) -> (text: String, file: String)? {
        guard let v = existingFile(key) else { return nil }
        let label = "\(name).\(key)"
        guard v.info.mode & 0o077 == 0 else {
            problem(v.line, "\(label): the file is accessible by group or others (mode \(ConfigFiles.octal(v.info.mode))); chmod 600 it")
            return nil
        }
        switch FileContents.contents(of: v.value, limit: Self.secretLimit) {
        case .failure(let error):
            problem(v.line, "\(label): cannot read the file: \(error.text)")
            return nil
        case .success(let bytes):
            var trimmed = bytes[...]
            while let last = trimmed.last, last == UInt8(ascii: "\n") || last == UInt8(ascii: "\r") {
                trimmed = trimmed.dropLast()
            }
            guard let text = String(validating: trimmed, as: UTF8.self) else {
                problem(v.line, "\(label): the file is not valid UTF-8 text")
                return nil
            }
            if let message = Self.secretProblem(text) {
                problem(v.line, "\(label): the secret in the file \(message)")
                return nil
            }
            return (text, v.value)
        }
    }

    /// A command to run: a program path, or an array of strings whose first is an absolute path to an
    /// executable file.
    public mutating func command(_ key: String) -> [String]? {
        guard let entry = entries[key] else { return nil }
        let command: [String]
        switch entry.value {
        case .string(let text): command = [text]
        case .array(let items): command = items
        default:
            problem(entry.line, "\(name).\(key): expected a program path (string) or an array of strings, got \(entry.value.typeName)")
            return nil
        }
        guard let program = command.first, !program.isEmpty else {
            problem(entry.line, "\(name).\(key): the command is empty")
            return nil
        }
        guard program.hasPrefix("/") else {
            problem(entry.line, "\(name).\(key): the program must be an absolute path")
            return nil
        }
        guard ConfigFiles.isExecutable(program) else {
            problem(entry.line, "\(name).\(key): the program is not an executable file")
            return nil
        }
        return command
    }

    // MARK: value rules

    /// Why a secret (or a user name) cannot be used; never mentions its text.
    public static func secretProblem(_ text: String) -> String? {
        if text.isEmpty { return "must not be empty" }
        if text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F }) {
            return "must be one line without control characters"
        }
        if text.first == " " || text.last == " " { return "must not start or end with a space" }
        return nil
    }

    /// A `BEGIN CERTIFICATE` line followed by base64 and its `END CERTIFICATE` line.
    public static func holdsPEMCertificate(_ bytes: [UInt8]) -> Bool {
        let begin = Array("-----BEGIN CERTIFICATE-----".utf8)
        let end = Array("-----END CERTIFICATE-----".utf8)
        func find(_ needle: [UInt8], from start: Int) -> Int? {
            guard bytes.count >= needle.count, start <= bytes.count - needle.count else { return nil }
            for i in start...(bytes.count - needle.count) where bytes[i] == needle[0] && Array(bytes[i..<(i + needle.count)]) == needle {
                return i
            }
            return nil
        }
        func isBase64(_ b: UInt8) -> Bool {
            (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || (b >= 0x30 && b <= 0x39) || b == 0x2B || b == 0x2F || b == 0x3D
        }
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || b == 0x09 || b == 0x0A || b == 0x0D }
        var from = 0
        while let b = find(begin, from: from) {
            let bodyStart = b + begin.count
            guard let e = find(end, from: bodyStart) else { return false }
            let body = bytes[bodyStart..<e].filter { !isSpace($0) }
            if body.count >= 16, body.allSatisfy(isBase64) { return true }
            from = e + end.count
        }
        return false
    }
}
