/// The options a command knows: which take a value (`--wait 20`, `--wait=20`), which are flags, and which
/// may be given more than once. The tokenizer needs this before it can tell a value from a positional:
/// in `sync --wait 20` the `20` belongs to `--wait`, in `sync 20` it is an ADDRESS.
public struct OptionTable: Sendable {
    public var valued: Set<String>
    public var flags: Set<String>
    public var repeatable: Set<String>

    public init(values: [String] = [], flags: [String] = [], repeatable: [String] = []) {
        self.valued = Set(values).union(repeatable)
        self.flags = Set(flags)
        self.repeatable = Set(repeatable)
    }

    /// A command with no options.
    public static let none = OptionTable()

    public func merging(_ other: OptionTable) -> OptionTable {
        var copy = self
        copy.valued.formUnion(other.valued)
        copy.flags.formUnion(other.flags)
        copy.repeatable.formUnion(other.repeatable)
        return copy
    }
}

/// A command line split by a command's `OptionTable` in one pass, so options and positionals may come in
/// any order:
/// - `--name value` and `--name=value` for an option that takes a value (the value may start with a single
///   `-`, as in `--wait -1`, so a bad value is reported as one; a missing value is a usage error);
/// - `--flag` for a flag; `-h` is `--help`, which every command knows;
/// - `--` ends the options: every token after it is a positional, also `--json` or `-h`;
/// - `-` alone is a positional (standard input); any other token starting with `-` that the table does not
///   name is a usage error naming it, as is an option given twice that is not repeatable.
/// Commands then take what they need; `finish()` reports what is left.
public struct Arguments: Sendable {
    private var values: [String: [String]] = [:]
    private var flagsGiven: Set<String> = []
    private var positionals: [String] = []
    private var nextPositional = 0
    private var taken: Set<String> = []
    /// `--help` or `-h` was given before any `--`.
    public private(set) var help = false

    public init(parsing tokens: [String], options table: OptionTable) throws(GatewayFailure) {
        var i = 0
        var optionsEnded = false
        while i < tokens.count {
            let token = tokens[i]
            i += 1
            if optionsEnded || token == "-" || !token.hasPrefix("-") {
                positionals.append(token)
                continue
            }
            if token == "--" {
                optionsEnded = true
                continue
            }
            if token == "-h" || token == "--help" {
                help = true
                continue
            }
            guard token.hasPrefix("--") else {
                throw GatewayFailure(.usage, "unknown option '\(Arguments.shown(token))'")
            }
            let name: String
            var inline: String?
            if let eq = token.firstIndex(of: "=") {
                name = String(token[..<eq])
                inline = String(token[token.index(after: eq)...])
            } else {
                name = token
            }
            if table.valued.contains(name) {
                let value: String
                if let inline {
                    value = inline
                } else {
                    // A following option (or `--`) is not a value: `--wait --adapter hci0` lacks one.
                    guard i < tokens.count, !tokens[i].hasPrefix("--") else {
                        throw GatewayFailure(.usage, "\(name) needs a value")
                    }
                    value = tokens[i]
                    i += 1
                }
                if values[name] != nil, !table.repeatable.contains(name) {
                    throw GatewayFailure(.usage, "\(name) is given more than once")
                }
                values[name, default: []].append(value)
            } else if table.flags.contains(name) {
                if inline != nil { throw GatewayFailure(.usage, "\(name) takes no value") }
                flagsGiven.insert(name)
            } else {
                throw GatewayFailure(.usage, "unknown option '\(Arguments.shown(name))'")
            }
        }
    }

    /// Options and flags given (for `--config` checks across the global and the command's part).
    public func has(_ name: String) -> Bool { values[name] != nil || flagsGiven.contains(name) }

    /// True when the flag `--name` was given.
    public mutating func flag(_ name: String) -> Bool {
        taken.insert(name)
        return flagsGiven.contains(name)
    }

    /// The value of `--name value` or `--name=value`, nil when the option was not given.
    public mutating func option(_ name: String) throws(GatewayFailure) -> String? {
        taken.insert(name)
        return values[name]?.first
    }

    /// Every value of a repeatable option, in the order given.
    public mutating func options(_ name: String) throws(GatewayFailure) -> [String] {
        taken.insert(name)
        return values[name] ?? []
    }

    /// `--name N` as an integer within a range.
    public mutating func intOption(_ name: String, in range: ClosedRange<Int>) throws(GatewayFailure) -> Int? {
        guard let text = try option(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw GatewayFailure(.usage, "\(name) must be an integer in \(range.lowerBound)...\(range.upperBound), got '\(Arguments.shown(text))'")
        }
        return value
    }

    /// `--name S` as a non-negative number of seconds (fractions allowed).
    public mutating func secondsOption(_ name: String, max: Double = 86_400) throws(GatewayFailure) -> Double? {
        guard let text = try option(name) else { return nil }
        guard let value = Double(text), value.isFinite, value >= 0, value <= max else {
            throw GatewayFailure(.usage, "\(name) must be a number of seconds between 0 and \(Int(max)), got '\(Arguments.shown(text))'")
        }
        return value
    }

    /// The next positional, in the order given.
    public mutating func positional() -> String? {
        guard nextPositional < positionals.count else { return nil }
        defer { nextPositional += 1 }
        return positionals[nextPositional]
    }

    /// The positionals not taken yet.
    public var remaining: [String] { Array(positionals[nextPositional...]) }

    /// Fails with a usage error when a positional is left over, or an option the command did not read
    /// (one its table names but its code does not use).
    public func finish() throws(GatewayFailure) {
        if nextPositional < positionals.count {
            throw GatewayFailure(.usage, "unexpected argument '\(Arguments.shown(positionals[nextPositional]))'")
        }
        if let unread = (Set(values.keys).union(flagsGiven)).subtracting(taken).sorted().first {
            throw GatewayFailure(.usage, "option \(unread) is not used by this command")
        }
    }

    /// A command-line token in an error message: printable, and not endless.
    public static func shown(_ token: String) -> String {
        TerminalText.escaped(String(token.prefix(60)))
    }
}
