import GatewayCore

/// A small command-line tokenizer: positionals, `--name value`, `--name=value` and `--flag`.
/// Commands take what they know; whatever is left is a usage error.
public struct Arguments: Sendable {
    private var tokens: [String]

    public init(_ tokens: [String]) { self.tokens = tokens }

    public var isEmpty: Bool { tokens.isEmpty }
    public var remaining: [String] { tokens }

    /// Removes `--name` and returns true when present.
    public mutating func flag(_ name: String) -> Bool {
        if let i = tokens.firstIndex(of: name) {
            tokens.remove(at: i)
            return true
        }
        return false
    }

    /// Removes `--name value` or `--name=value` and returns the value; a missing value is a usage error.
    public mutating func option(_ name: String) throws(GatewayFailure) -> String? {
        for (i, token) in tokens.enumerated() {
            if token == name {
                guard i + 1 < tokens.count else { throw GatewayFailure(.usage, "\(name) needs a value") }
                let value = tokens[i + 1]
                tokens.removeSubrange(i...(i + 1))
                return value
            }
            if token.hasPrefix(name + "=") {
                tokens.remove(at: i)
                return String(token.dropFirst(name.count + 1))
            }
            if token == "--" { break }
        }
        return nil
    }

    /// Removes every occurrence of a repeatable option.
    public mutating func options(_ name: String) throws(GatewayFailure) -> [String] {
        var values: [String] = []
        while let v = try option(name) { values.append(v) }
        return values
    }

    /// `--name N` as an integer within a range.
    public mutating func intOption(_ name: String, in range: ClosedRange<Int>) throws(GatewayFailure) -> Int? {
        guard let text = try option(name) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw GatewayFailure(.usage, "\(name) must be an integer in \(range.lowerBound)...\(range.upperBound), got '\(text)'")
        }
        return value
    }

    /// `--name S` as a non-negative number of seconds (fractions allowed).
    public mutating func secondsOption(_ name: String, max: Double = 86_400) throws(GatewayFailure) -> Double? {
        guard let text = try option(name) else { return nil }
        guard let value = Double(text), value >= 0, value <= max else {
            throw GatewayFailure(.usage, "\(name) must be a number of seconds between 0 and \(Int(max)), got '\(text)'")
        }
        return value
    }

    /// The next positional (a token not starting with `--`), removed.
    public mutating func positional() -> String? {
        guard let i = tokens.firstIndex(where: { !$0.hasPrefix("--") || $0 == "-" }) else { return nil }
        return tokens.remove(at: i)
    }

    /// Fails with a usage error when anything is left over.
    public func finish() throws(GatewayFailure) {
        if let first = tokens.first {
            throw GatewayFailure(.usage, "unexpected argument '\(first)'")
        }
    }
}
