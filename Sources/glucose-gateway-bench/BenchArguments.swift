/// The `--name value` options of one benchmark: every argument is a known name followed by its value.
///
/// A value that does not parse reads as -1 (or "" for text), so the benchmark's own range check rejects
/// it with its message.
struct BenchArguments {
    private var values: [String: String] = [:]

    /// Nil, after printing `usage`, when an argument is not one of `names` or has no value.
    init?(_ args: [String], names: Set<String>, usage: String) {
        var i = 0
        while i < args.count {
            let name = args[i]
            guard name.hasPrefix("--"), names.contains(String(name.dropFirst(2))), i + 1 < args.count else {
                print("usage: glucose-gateway-bench " + usage)
                return nil
            }
            values[String(name.dropFirst(2))] = args[i + 1]
            i += 2
        }
    }

    func int(_ name: String, _ fallback: Int) -> Int {
        guard let text = values[name] else { return fallback }
        return Int(text) ?? -1
    }

    func double(_ name: String, _ fallback: Double) -> Double {
        guard let text = values[name] else { return fallback }
        return Double(text) ?? -1
    }

    func string(_ name: String, _ fallback: String) -> String {
        values[name] ?? fallback
    }

    func has(_ name: String) -> Bool { values[name] != nil }
}
