#if canImport(Glibc)
import Glibc
#endif
import GatewayCore
import Support

/// The whole command line: global options, subcommand dispatch, help, and exit statuses.
public enum GatewayMain {
    public static let usage = """
    usage: glucose-gateway [--config PATH] [--verbose] COMMAND [ARGS...]

    A headless gateway for Bluetooth LE blood-glucose meters: pairs once, downloads every reading,
    stores it durably in SQLite and uploads it to Nightscout or a FHIR R4 server.

    Global options:
      --config PATH   config file (else $GLUCOSE_GATEWAY_CONFIG, else /etc/glucose-gateway/glucose-gateway.toml)
      --verbose       log debug messages
      --help          this text; COMMAND --help for a command's own

    Commands:
    """

    public static func helpText() -> String {
        var text = usage + "\n"
        for command in allCommands {
            let pad = String(repeating: " ", count: max(1, 16 - command.name.count))
            text += "  \(command.name)\(pad)\(command.abstract)\n"
        }
        text += "\nExit status: 0 ok, 1 failure, 64 usage, 65 malformed data, 69 meter or adapter unavailable,\n"
        text += "75 readings stored but upload deferred, 78 configuration error.\n"
        return text
    }

    /// The options before the command name (also accepted after it).
    static let globalOptions = OptionTable(values: ["--config"], flags: ["--verbose"])

    /// Runs the command line and returns the exit status; prints one-line errors to stderr. A failed write
    /// to stdout (a full disk, `/dev/full`) is reported in one line on stderr; it and a failed write to
    /// stderr turn success into exit 1. A command that failed already keeps its own, more precise status.
    public static func main(_ argv: [String], environment: [String: String]) async -> Int32 {
        let status = await dispatch(argv, environment: environment)
        return Program.exitStatus(status, name: commandName(argv).map { "glucose-gateway \($0)" } ?? "glucose-gateway")
    }

    /// Where the command name is: global options (and their values) come before it, up to the first
    /// positional or `--`. Past the end when there is none.
    static func commandIndex(_ argv: [String]) -> Int {
        var i = 0
        while i < argv.count {
            let token = argv[i]
            if token == "--" || token == "-" || !token.hasPrefix("-") { break }
            i += globalOptions.valued.contains(token) ? 2 : 1
        }
        if i < argv.count, argv[i] == "--" { i += 1 }
        return i
    }

    /// The command named on the line, for the prefix of a late error.
    static func commandName(_ argv: [String]) -> String? {
        let i = commandIndex(argv)
        guard i < argv.count, let command = allCommands.first(where: { $0.name == argv[i] }) else { return nil }
        return command.name
    }

    static func dispatch(_ argv: [String], environment: [String: String]) async -> Int32 {
        let split = commandIndex(argv)
        let globals: Arguments
        do {
            globals = try Arguments(parsing: Array(argv[..<min(split, argv.count)]), options: globalOptions)
        } catch {
            return fail(error)
        }
        guard split < argv.count else {
            if globals.help {
                return finishOutput(helpText(), status: .ok)
            }
            StandardStream.writeError(helpText())
            return ExitStatus.usage.rawValue
        }
        let name = argv[split]
        if name == "help" {
            return finishOutput(helpText(), status: .ok)
        }
        guard let command = allCommands.first(where: { $0.name == name }) else {
            StandardStream.writeError("glucose-gateway: unknown command '\(TerminalText.escaped(name, limit: 40))' (see glucose-gateway --help)\n")
            return ExitStatus.usage.rawValue
        }
        let rest = Array(argv[(split + 1)...])
        var args: Arguments
        do {
            args = try Arguments(parsing: rest, options: command.options.merging(globalOptions))
        } catch {
            // `--help` wins over a mistake elsewhere on the line.
            if asksForHelp(rest) { return finishOutput(command.help + "\n", status: .ok) }
            return fail(error, command: command.name)
        }
        if globals.help || args.help {
            return finishOutput(command.help + "\n", status: .ok)
        }
        var globalsCopy = globals
        let configOption: String?
        do {
            let before = try globalsCopy.option("--config")
            let after = try args.option("--config")
            if before != nil, after != nil { throw GatewayFailure(.usage, "--config is given more than once") }
            configOption = before ?? after
        } catch {
            return fail(error, command: command.name)
        }
        let verbose = globalsCopy.flag("--verbose") || args.flag("--verbose")
        let level: LogLevel = verbose ? .debug : .info
        let journal = environment["JOURNAL_STREAM"] != nil || environment["INVOCATION_ID"] != nil
        let logger = Logger(label: "glucose-gateway", minimumLevel: level, sink: StderrLogSink(journalPrefix: journal))
        let context = CommandContext(
            configPath: configOption ?? environment["GLUCOSE_GATEWAY_CONFIG"],
            environment: environment,
            logger: logger
        )
        do {
            return try await command.run(&args, context: context).rawValue
        } catch {
            return fail(error, command: command.name)
        }
    }

    /// `--help` or `-h` before any `--`.
    static func asksForHelp(_ tokens: [String]) -> Bool {
        for token in tokens {
            if token == "--" { return false }
            if token == "--help" || token == "-h" { return true }
        }
        return false
    }

    static func finishOutput(_ text: String, status: ExitStatus) -> Int32 {
        StandardStream.writeOutput(text)
        return status.rawValue
    }

    static func fail(_ error: any Error, command: String? = nil) -> Int32 {
        let prefix = command.map { "glucose-gateway \($0): " } ?? "glucose-gateway: "
        if let failure = error as? GatewayFailure {
            StandardStream.writeError(prefix + oneLine(failure.message) + "\n")
            return failure.status.rawValue
        }
        StandardStream.writeError(prefix + oneLine(String(describing: error)) + "\n")
        return ExitStatus.failure.rawValue
    }

    static func oneLine(_ text: String) -> String {
        TerminalText.escaped(text)
    }
}
