import GatewayCore
import Support
import Testing
@testable import GatewayCLI

/// One element of a documented usage line: a positional (`ADDRESS`, `check`), an option with its value
/// (`--wait SECONDS`) or a flag (`--json`).
struct UsageElement: Sendable, CustomStringConvertible {
    enum Kind: Sendable { case positional, option, flag }
    var kind: Kind
    var name: String
    /// The tokens this element puts on the command line.
    var tokens: [String]
    var optional: Bool
    var description: String { tokens.joined(separator: " ") }
}

/// A documented form: one usage line of a command's `--help`, with one alternative of each `A | B`.
struct UsageForm: Sendable, CustomStringConvertible {
    var command: String
    var elements: [UsageElement]
    var description: String { "\(command) " + elements.map(\.description).joined(separator: " ") }
}

/// Reads the usage lines of each command's help: `usage: glucose-gateway NAME ...` and the lines after it
/// that start with `glucose-gateway NAME`, up to the first blank line.
enum UsageLines {
    /// Values for placeholders; numbers on purpose, so a value taken as a positional shows.
    static func sample(_ placeholder: String) -> [String] {
        switch placeholder {
        case "ADDRESS": return ["C0:26:DA:01:02:03"]
        case "SECONDS": return ["20"]
        case "hciN": return ["hci1"]
        case "PIN": return ["123456"]
        case "Area/City": return ["Europe/Berlin"]
        case "TIME": return ["24h"]
        case "N": return ["5"]
        case "X": return ["3"]
        case "PATH": return ["/etc/gg.toml"]
        case "FILE": return ["meter.json"]
        case "CHARACTERISTIC": return ["2a18"]
        case "HEX...": return ["1b", "0200"]
        default: return [placeholder.lowercased()]
        }
    }

    static func lines(of command: any GatewayCommand.Type) -> [String] {
        var out: [String] = []
        for raw in command.help.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = raw.trimmingPrefix(while: { $0 == " " })
            if line.isEmpty { break }
            var text = String(line)
            if text.hasPrefix("usage: ") { text = String(text.dropFirst(7)) }
            let prefix = "glucose-gateway \(command.name)"
            guard text.hasPrefix(prefix) else { continue }
            out.append(String(text.dropFirst(prefix.count)))
        }
        return out
    }

    /// `SECONDS`, `Area/City`, `hciN`: a value's placeholder, not a flag or a literal.
    static func isPlaceholder(_ word: String) -> Bool {
        guard !word.hasPrefix("-"), word != "..." else { return false }
        return word.uppercased() == word || word.contains("/") || word == "hciN"
    }

    static func elements(_ words: [String], optional: Bool) -> [UsageElement] {
        var out: [UsageElement] = []
        var i = 0
        while i < words.count {
            let word = words[i]
            if word.hasPrefix("--") {
                if i + 1 < words.count, isPlaceholder(words[i + 1]) {
                    out.append(UsageElement(kind: .option, name: word, tokens: [word] + sample(words[i + 1]), optional: optional))
                    i += 2
                } else {
                    out.append(UsageElement(kind: .flag, name: word, tokens: [word], optional: optional))
                    i += 1
                }
                if i < words.count, words[i] == "..." { i += 1 }
                continue
            }
            out.append(UsageElement(kind: .positional, name: word, tokens: sample(word), optional: optional))
            i += 1
        }
        return out
    }

    static func forms(of command: any GatewayCommand.Type) -> [UsageForm] {
        var forms: [UsageForm] = []
        for line in lines(of: command) {
            var variants: [[UsageElement]] = [[]]
            var bare: [String] = []
            func flushBare() {
                let add = elements(bare, optional: false)
                bare = []
                variants = variants.map { $0 + add }
            }
            var rest = Substring(line)
            while let c = rest.first {
                if c == " " {
                    rest = rest.dropFirst()
                } else if c == "[" || c == "(" {
                    flushBare()
                    var depth = 0
                    var inner = ""
                    while let d = rest.first {
                        rest = rest.dropFirst()
                        if d == "[" || d == "(" { depth += 1 }
                        if d == "]" || d == ")" { depth -= 1 }
                        if depth == 0 { break }
                        if !(depth == 1 && (d == "[" || d == "(")) { inner.append(d) }
                    }
                    // `[OPTIONS]` and `METER FLAGS` stand for the option lists below the usage line.
                    let alternatives = inner.split(separator: "|").map { $0.split(separator: " ").map(String.init) }
                        .filter { $0 != ["OPTIONS"] && $0 != ["METER", "FLAGS"] }
                    guard !alternatives.isEmpty else { continue }
                    var next: [[UsageElement]] = []
                    for v in variants {
                        for alt in alternatives { next.append(v + elements(alt, optional: c == "[")) }
                    }
                    variants = next
                } else {
                    var word = ""
                    while let d = rest.first, d != " " {
                        word.append(d)
                        rest = rest.dropFirst()
                    }
                    bare.append(word)
                }
            }
            flushBare()
            for v in variants { forms.append(UsageForm(command: command.name, elements: v)) }
        }
        return forms
    }

    /// Every order of the elements that keeps the positionals in their documented order.
    static func orders(_ elements: [UsageElement]) -> [[UsageElement]] {
        var result: [[UsageElement]] = []
        func permute(_ prefix: [UsageElement], _ rest: [UsageElement]) {
            if rest.isEmpty {
                let positionals = prefix.filter { $0.kind == .positional }.map(\.name)
                if positionals == elements.filter({ $0.kind == .positional }).map(\.name) { result.append(prefix) }
                return
            }
            for i in rest.indices {
                var remaining = rest
                let e = remaining.remove(at: i)
                permute(prefix + [e], remaining)
            }
        }
        permute([], elements)
        return result
    }
}

/// A documented form with the optional elements chosen: all of them, or none.
struct FormCase: Sendable, CustomStringConvertible {
    var form: UsageForm
    var description: String { form.description }

    static var all: [FormCase] {
        var cases: [FormCase] = []
        for command in allCommands {
            for form in UsageLines.forms(of: command) {
                cases.append(FormCase(form: form))
                let required = form.elements.filter { !$0.optional }
                if required.count != form.elements.count {
                    cases.append(FormCase(form: UsageForm(command: form.command, elements: required)))
                }
                // Each optional element alone, too (`sync --wait 20` without ADDRESS).
                for e in form.elements where e.optional {
                    let one = form.elements.filter { !$0.optional || $0.name == e.name }
                    if one.count != required.count, one.count != form.elements.count {
                        cases.append(FormCase(form: UsageForm(command: form.command, elements: one)))
                    }
                }
            }
        }
        var seen = Set<String>()
        return cases.filter { seen.insert($0.description).inserted }
    }
}

@Suite("command-line tokenizer")
struct ArgumentsTests {
    func table(_ name: String) throws -> OptionTable {
        let command = try #require(allCommands.first { $0.name == name })
        return command.options.merging(GatewayMain.globalOptions)
    }

    @Test func everyCommandHasADocumentedUsageLine() {
        for command in allCommands {
            #expect(!UsageLines.forms(of: command).isEmpty, "\(command.name)")
        }
    }

    @Test(arguments: FormCase.all)
    func everyDocumentedFormParsesTheSameInEveryOrder(_ c: FormCase) throws {
        let table = try table(c.form.command)
        // The help and the table agree on which options take a value.
        for e in c.form.elements {
            switch e.kind {
            case .option: #expect(table.valued.contains(e.name), "\(e.name) is documented with a value")
            case .flag: #expect(table.flags.contains(e.name), "\(e.name) is documented as a flag")
            case .positional: break
            }
        }
        let expectedPositionals = c.form.elements.filter { $0.kind == .positional }.flatMap(\.tokens)
        let orders = UsageLines.orders(c.form.elements)
        #expect(!orders.isEmpty)
        for order in orders {
            let tokens = order.flatMap(\.tokens)
            var args = try Arguments(parsing: tokens, options: table)
            for e in c.form.elements {
                switch e.kind {
                case .option:
                    let value = try args.option(e.name)
                    #expect(value == e.tokens.last, "\(tokens)")
                case .flag:
                    let given = args.flag(e.name)
                    #expect(given, "\(tokens)")
                case .positional: break
                }
            }
            var positionals: [String] = []
            while let p = args.positional() { positionals.append(p) }
            #expect(positionals == expectedPositionals, "\(tokens)")
            #expect(throws: Never.self) { try args.finish() }
        }
    }

    struct Reported: Sendable, CustomStringConvertible {
        var tokens: [String]
        var command: String
        var option: String
        var value: String
        var positional: String?
        var description: String { "\(command) " + tokens.joined(separator: " ") }
    }

    /// The lines users typed that failed.
    @Test(arguments: [
        Reported(tokens: ["--wait", "20"], command: "sync", option: "--wait", value: "20", positional: nil),
        Reported(tokens: ["--wait", "2", "C0:26:DA:01:02:03"], command: "sync", option: "--wait", value: "2", positional: "C0:26:DA:01:02:03"),
        Reported(tokens: ["--adapter", "hci0", "C0:26:DA:01:02:03"], command: "sync", option: "--adapter", value: "hci0", positional: "C0:26:DA:01:02:03"),
        Reported(tokens: ["--pin", "123456", "C0:26:DA:01:02:03"], command: "pair", option: "--pin", value: "123456", positional: "C0:26:DA:01:02:03"),
        Reported(tokens: ["--timezone", "UTC", "C0:26:DA:01:02:03"], command: "pair", option: "--timezone", value: "UTC", positional: "C0:26:DA:01:02:03"),
        Reported(tokens: ["--adapter", "hci0", "C0:26:DA:01:02:03"], command: "unpair", option: "--adapter", value: "hci0", positional: "C0:26:DA:01:02:03"),
        Reported(tokens: ["--wait=-1"], command: "sync", option: "--wait", value: "-1", positional: nil),
        Reported(tokens: ["--wait", "-1"], command: "sync", option: "--wait", value: "-1", positional: nil),
    ])
    func optionValuesAreNeverPositionals(_ r: Reported) throws {
        var args = try Arguments(parsing: r.tokens, options: table(r.command))
        let value = try args.option(r.option)
        let first = args.positional()
        let second = args.positional()
        #expect(value == r.value)
        #expect(first == r.positional)
        #expect(second == nil)
    }

    @Test func aNegativeWaitIsReportedAsABadValue() throws {
        var args = try Arguments(parsing: ["--wait", "-1"], options: table("sync"))
        let error = #expect(throws: GatewayFailure.self) { _ = try args.secondsOption("--wait", max: 3600) }
        #expect(error?.status == .usage)
        #expect(error?.message.contains("got '-1'") == true)
    }

    @Test func doubleDashEndsTheOptions() throws {
        var args = try Arguments(parsing: ["--json", "--", "--all", "-h", "--"], options: table("meters"))
        let json = args.flag("--json")
        let all = args.flag("--all")
        #expect(json && !all)
        #expect(!args.help)
        #expect(args.remaining == ["--all", "-h", "--"])
    }

    @Test func shortHIsHelp() throws {
        #expect(try Arguments(parsing: ["-h"], options: table("sync")).help)
        #expect(try Arguments(parsing: ["C0:26:DA:01:02:03", "--wait", "3", "-h"], options: table("sync")).help)
        #expect(try Arguments(parsing: ["--help"], options: table("decode")).help)
    }

    struct Refused: Sendable, CustomStringConvertible {
        var command: String
        var tokens: [String]
        var message: String
        var description: String { "\(command) " + tokens.joined(separator: " ") }
    }

    @Test(arguments: [
        Refused(command: "sync", tokens: ["--wait"], message: "--wait needs a value"),
        Refused(command: "sync", tokens: ["--wait", "--adapter", "hci0"], message: "--wait needs a value"),
        Refused(command: "sync", tokens: ["--wait", "1", "--wait", "2"], message: "--wait is given more than once"),
        Refused(command: "sync", tokens: ["--bogus"], message: "unknown option '--bogus'"),
        Refused(command: "sync", tokens: ["-x"], message: "unknown option '-x'"),
        Refused(command: "meters", tokens: ["--json=yes"], message: "--json takes no value"),
        Refused(command: "status", tokens: ["--config", "a", "--config", "b"], message: "--config is given more than once"),
        Refused(command: "status", tokens: ["--bogus\u{1B}[2J"], message: "unknown option '--bogus\\e[2J'"),
    ])
    func mistakesAreUsageErrorsNamingTheOption(_ r: Refused) throws {
        let table = try table(r.command)
        let error = #expect(throws: GatewayFailure.self) { _ = try Arguments(parsing: r.tokens, options: table) }
        #expect(error?.status == .usage)
        #expect(error?.message == r.message)
    }

    @Test func leftoverPositionalsAreReported() throws {
        var args = try Arguments(parsing: ["C0:26:DA:01:02:03", "extra"], options: table("sync"))
        _ = args.positional()
        let error = #expect(throws: GatewayFailure.self) { try args.finish() }
        #expect(error?.message == "unexpected argument 'extra'")
    }

    @Test func everyOptionInAHelpTextIsKnownToItsCommand() throws {
        for command in allCommands {
            let table = command.options.merging(GatewayMain.globalOptions)
            // Other commands' options quoted in prose (`readings --meter ADDRESS`) are left out.
            let prose = command.help.split(separator: "`", omittingEmptySubsequences: false).enumerated()
                .filter { $0.offset % 2 == 0 }.map(\.element).joined(separator: " ")
            for word in prose.split(whereSeparator: { " \n[]()|,=".contains($0) }) where word.hasPrefix("--") {
                var name = String(word)
                while let last = name.last, !last.isLetter, !last.isNumber { name.removeLast() }
                guard name.count > 2, name != "--help" else { continue }
                #expect(table.valued.contains(name) || table.flags.contains(name), "\(command.name): \(name)")
            }
        }
    }
}
